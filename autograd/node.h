/*
 * autograd/node.h - how an op records itself: for authors of new ops.
 *
 * A node is one recorded op. It knows the nodes that produced its inputs
 * (its edges), the shapes of those inputs, the tensors its backward needs
 * (saved tensors) and a small op-specific context. An op writes its forward
 * and its backward side by side:
 *
 *     // out = a * b (broadcast)
 *     static int mul_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
 *     {
 *         awl_tensor *a = awl_node_saved(node, 0), *b = awl_node_saved(node, 1);
 *         if (awl_node_needs_grad(node, 0)) grads[0] = awl_mul(grad, b);
 *         if (awl_node_needs_grad(node, 1)) grads[1] = awl_mul(grad, a);
 *         return 0;
 *     }
 *
 *     awl_tensor *awl_mul(awl_tensor *a, awl_tensor *b)
 *     {
 *         awl_tensor *out = awl_tensor_binary(AWL_BINARY_MUL, a, b);
 *         awl_node *node = awl_node_record(out, "mul", mul_backward, 2, (awl_tensor *[]){a, b}, 0);
 *         if (node) { awl_node_save(node, a); awl_node_save(node, b); }
 *         return out;
 *     }
 *
 * The engine does the rest: it sums a gradient over the axes its input was
 * broadcast along (so grads[i] may have the output's shape), accumulates
 * gradients that meet at a node, drops saved tensors once the node has run,
 * and records the backward itself when create_graph is on. Because backward
 * functions use the differentiable ops, they need no special case for
 * higher-order gradients.
 */
#ifndef AWL_AUTOGRAD_NODE_H
#define AWL_AUTOGRAD_NODE_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AWL_NODE_MAX_SAVED 8

typedef struct awl_node awl_node;

/* Computes grads[i] (d loss / d input i) for each input i that needs grad,
 * from grad = d loss / d out. Leaves the others NULL. Results belong to the
 * current scope. Returns 0 or a negative status. */
typedef int (*awl_backward_fn)(awl_node *node, awl_tensor *grad, awl_tensor **grads);

/* What the node remembers of input i. */
typedef struct awl_node_input {
    awl_node *node; /* producer of the input's gradient path; NULL: no grad */
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    awl_dtype dtype;
} awl_node_input;

struct awl_node {
    awl_node_base base; /* reference count and op name ("mul"), shared
                           with the tensor layer */
    awl_backward_fn backward;
    int n_inputs;
    awl_node_input *inputs;
    int n_saved;
    awl_tensor *saved[AWL_NODE_MAX_SAVED];
    bool saved_is_output[AWL_NODE_MAX_SAVED];
    uint64_t saved_version[AWL_NODE_MAX_SAVED]; /* awl_tensor_version when saved */
    bool released;     /* saved tensors already dropped */
    awl_tensor *leaf;  /* accumulate-grad nodes: the leaf (retained) */
    uint64_t sequence; /* creation order */
    void *ctx;         /* op-specific, ctx_size bytes, zeroed */
    /* awl_node_want_grad_copy: the backward casts the gradient it is given
     * to grad_copy_dtype */
    bool wants_grad_copy;
    awl_dtype grad_copy_dtype;

    /* engine scratch, valid during one backward pass */
    awl_tensor *grad;
    awl_tensor *grad_copy; /* grad in grad_copy_dtype, or NULL */
    int pending;
    int visit;
    bool needed;
};

/* Records a node for `out`, made by an op from inputs[0..n_inputs), when
 * grad mode is on and some input requires grad; returns NULL (recording
 * nothing) otherwise, or when out is NULL. Sets out->grad_fn and
 * out->requires_grad. */
awl_node *awl_node_record(awl_tensor *out, const char *name, awl_backward_fn backward, int n_inputs,
                          awl_tensor *const *inputs, size_t ctx_size);

/* Whether some input requires grad and grad mode is on (what
 * awl_node_record tests), for ops that prepare something before recording. */
bool awl_needs_grad(int n, awl_tensor *const *inputs);

/* Keeps t (an input or any other tensor) for backward; returns its index. */
int awl_node_save(awl_node *node, awl_tensor *t);
/* Keeps the op's own output for backward without a reference cycle. */
int awl_node_save_output(awl_node *node, awl_tensor *out);
/* A saved tensor, during backward. With create_graph a saved output comes
 * back connected to this node, so second derivatives see it. */
awl_tensor *awl_node_saved(awl_node *node, int i);
/* Whether input i needs a gradient. */
bool awl_node_needs_grad(const awl_node *node, int i);
/* Whether grad, handed to a backward function, is the gradient the pass
 * started from where it was implied: exactly 1, for the scalar root of
 * awl_backward(root) or awl_grad without options->grad. A node whose
 * forward already wrote its input's gradient for that case (the fused
 * cross-entropy) then hands it on without reading grad, which would wait
 * for the device. */
bool awl_grad_is_implied_one(const awl_tensor *grad);
/* During a backward that is not recorded (no create_graph): the gradient
 * that input i has received so far from its other consumers, taken from
 * the engine (the current scope owns it), or NULL when there is none yet
 * or it is not of the input's shape and dtype. The backward function then
 * returns grads[i] with it added in, so that a kernel that writes the
 * gradient can add it on the way, where the engine's sum would read that
 * gradient back and write it again. A residual connection is the case:
 * x + f(layer_norm(x)) gives x the add's gradient before layer_norm's
 * backward runs. */
awl_tensor *awl_node_take_pending_grad(awl_node *node, int i);
/* During a backward that is not recorded: whether input i is a bfloat16
 * cast of a float32 tensor (awl_cast's output, as autocast's weights are),
 * so that the backward function may return its gradient in float32, wider
 * than the input: the cast's backward would widen it anyway, and a product
 * that keeps its float32 sums (awl_tensor_matmul_wide) skips both the
 * rounding to bfloat16 and the cast. */
bool awl_node_input_widens(const awl_node *node, int i);

/* A gradient with a copy in a narrower dtype, written by the kernel that
 * writes the gradient. Under autocast the residual stream is float32 and a
 * block's branch bfloat16, so the backward of the residual addition
 * (awl_dropout_add) casts the stream's gradient to bfloat16 for the
 * branch: a pass that reads the whole gradient again. That gradient is
 * written by the next LayerNorm's backward, which can round its output to
 * bfloat16 as it writes it, at the cost of the narrower write only.
 *
 * The producer asks, when it is recorded (awl_node_want_grad_copy); a
 * consumer's backward checks that the gradient it returns for input i will
 * reach that producer whole (awl_node_input_wants_grad_copy: nothing else
 * has been or will be added to it) and hands the copy over with it
 * (awl_node_offer_grad_copy); the producer's backward takes it
 * (awl_node_take_grad_copy) instead of casting. The engine drops a copy
 * whenever the gradient it was made from changes (summed with another, or
 * taken as a pending gradient), so a copy is always the cast of the
 * gradient it travels with. Without create_graph only. */
void awl_node_want_grad_copy(awl_node *node, awl_dtype dtype);
/* During a backward that is not recorded: whether input i's producer wants
 * a copy of its gradient (and in which dtype, *dtype) and the gradient
 * this node returns for it will be its whole gradient: no other consumer
 * has delivered one (a pending one taken counts as none) and no other edge
 * is still to deliver. */
bool awl_node_input_wants_grad_copy(const awl_node *node, int i, awl_dtype *dtype);
/* Hands copy (of the gradient this backward returns in grads[i], in the
 * dtype awl_node_input_wants_grad_copy gave) to input i's producer. */
int awl_node_offer_grad_copy(awl_node *node, int i, awl_tensor *copy);
/* In a producer's backward: the copy of the gradient it is given, in
 * dtype, taken from the engine (the current scope owns it), or NULL. */
awl_tensor *awl_node_take_grad_copy(awl_node *node, awl_dtype dtype);

static inline void *awl_node_ctx(awl_node *node) { return node->ctx; }

/* For the engine and activation checkpointing: a leaf's accumulate node
 * (one more reference), and dropping a node's saved tensors once it ran. */
awl_node *awl_grad_accumulator(awl_tensor *leaf);
/* Drops one reference to a node (NULL is a no-op); the last frees it. */
void awl_node_release(awl_node *node);
void awl_node_free_saved(awl_node *node);

/* The autograd node of a tensor, or NULL for a leaf. */
static inline awl_node *awl_grad_fn(const awl_tensor *t) { return (awl_node *)t->grad_fn; }

#ifdef __cplusplus
}
#endif

#endif
