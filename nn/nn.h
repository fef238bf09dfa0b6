/*
 * nn/nn.h - modules, layers, initialisation and functional layers.
 *
 * A module is a small object with a type name ("Linear"), named parameters
 * (leaf tensors that require grad), named child modules, a forward function
 * and a train/eval flag: PyTorch's nn.Module, in C. Full parameter names are
 * the dotted paths PyTorch and Hugging Face print
 * ("transformer.h.0.attn.c_attn.weight"), so checkpoints, optimizers and error
 * messages all speak the same names.
 *
 *     awl_module *net = awl_sequential_new(3, (awl_module *[]){
 *         awl_linear_new(4, 16, true, "cpu"), awl_gelu_new(), awl_linear_new(16, 2, true, "cpu")});
 *     awl_param_list params = {0};
 *     awl_module_parameters(net, &params);     // "0.weight", "0.bias", "2.weight", "2.bias"
 *     awl_scope_begin();
 *     awl_tensor *loss = awl_keep(awl_cross_entropy(awl_module_forward(net, x), y, -1));
 *     awl_scope_end();
 *     awl_backward(loss);
 *     ...
 *     awl_release(loss);
 *     awl_param_list_clear(&params);
 *     awl_module_free(net);
 *
 * Ownership: a module owns one reference to each parameter and owns its
 * children; awl_module_free releases all of it. Constructors return NULL
 * after recording an error (bad size, unknown device); a constructor given a
 * NULL child frees the other children it was given and returns NULL, so
 * nested constructors can be checked once.
 *
 * The functional layers (awl_linear, awl_layer_norm, awl_cross_entropy,
 * awl_scaled_dot_product_attention, ...) are differentiable ops. Where the
 * backend has a fused kernel (backends/backend.h) and awl_fused_kernels_enabled()
 * is on, they run it forward and backward as one graph node; otherwise, or
 * when the kernel answers AWL_ERR_UNSUPPORTED, they compose the same
 * computation from the ops of autograd/autograd.h. Both paths give the same
 * values and gradients up to rounding; tests/test_nn.c compares them.
 */
#ifndef AWL_NN_NN_H
#define AWL_NN_NN_H

#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "nn/param.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- modules -------------------------------------------------------------------- */

typedef struct awl_module awl_module;

/* Computes the module's output from x; the result belongs to the current
 * scope; NULL after an error (and for a NULL x, silently). */
typedef awl_tensor *(*awl_module_forward_fn)(awl_module *self, awl_tensor *x);

/* A registered parameter: the module reads and writes it through `slot`, a
 * field of the module's own struct, so moving the module to a device can
 * replace the tensor under the layer's feet. */
typedef struct awl_module_param {
    char *name;
    awl_tensor **slot;
} awl_module_param;

typedef struct awl_module_child {
    char *name;
    awl_module *module;
} awl_module_child;

/* Every layer type embeds this struct as its first member. */
struct awl_module {
    const char *type;                  /* "Linear", static storage */
    awl_module_forward_fn forward;     /* NULL for pure containers */
    void (*destroy)(awl_module *self); /* frees what the type adds; may be NULL */
    bool training;                     /* true after construction */
    int n_params, n_children;
    awl_module_param *params;
    awl_module_child *children;
};

/* For authors of module types: a zeroed block of `size` bytes (the type's
 * struct, whose first member is awl_module) set up as an empty module in
 * training mode. Never NULL (host bookkeeping aborts on exhaustion). */
awl_module *awl_module_alloc(size_t size, const char *type, awl_module_forward_fn forward,
                             void (*destroy)(awl_module *self));

/* Registers *slot, a leaf tensor whose one reference the module takes over,
 * as parameter `name` and marks it as requiring grad. Returns 0, or
 * negative (and releases *slot, setting it to NULL) for a NULL or non-float
 * tensor or a duplicate name. */
int awl_module_add_param(awl_module *m, const char *name, awl_tensor **slot);

/* Creates a float32 parameter of the given shape on device (zero-filled),
 * stores it in *slot and registers it. Returns 0 or negative. */
int awl_module_new_param(awl_module *m, const char *name, awl_tensor **slot, int ndim,
                         const int64_t *shape, const char *device);

/* Makes child a child named `name`, which m then owns. A NULL child, or a
 * duplicate name, returns negative (freeing the child). */
int awl_module_add_child(awl_module *m, const char *name, awl_module *child);

/* Adds children[0..n) under names[0..n) in order and returns m. On the first
 * failure (a NULL child, a duplicate name) frees m and every child not yet
 * added and returns NULL: constructors end with
 *     return awl_module_with_children(m, 2, (const char *[]){"c_fc", "c_proj"},
 *                                     (awl_module *[]){fc, proj});
 */
awl_module *awl_module_with_children(awl_module *m, int n, const char *const *names,
                                     awl_module *const *children);

/* m's forward on x. An error for a module without one (a container). */
awl_tensor *awl_module_forward(awl_module *m, awl_tensor *x);

/* Training (dropout active) or evaluation mode, for m and all its
 * descendants. */
void awl_module_train(awl_module *m, bool on);

/* Replaces every parameter by a copy on `device` ("cuda:0"), keeping names
 * and requires_grad; tensors shared between parameters stay shared.
 * Gradients and grad hooks stay with the old tensors (move before training). A no-op for parameters
 * already there. Returns 0 or negative (parameters already moved stay moved; the rest stay put). */
int awl_module_to(awl_module *m, const char *device);

/* As awl_module_to, converting parameters to a float dtype (AWL_F64 for
 * gradient checks). Gradients are dropped. */
int awl_module_cast(awl_module *m, awl_dtype dtype);

/* Appends m's parameters to out, with full dotted names, in registration
 * order (a module's own parameters, then each child's, depth first), each
 * tensor once: a parameter shared by two modules appears under its first
 * name. Returns the number appended, or negative. */
int awl_module_parameters(awl_module *m, awl_param_list *out);

/* Total elements of m's parameters, each shared tensor counted once. */
int64_t awl_module_num_params(awl_module *m);

/* The parameter or descendant at a dotted path ("h.0.attn.c_attn.weight",
 * "h.0.attn"), or NULL (no error recorded). */
awl_tensor *awl_module_get_param(awl_module *m, const char *path);
awl_module *awl_module_get_child(awl_module *m, const char *path);

/* Writes the tree, one member a line, indented by depth:
 *     GPT
 *       transformer: ModuleDict
 *         wte: Embedding
 *           weight (65,128) float32
 *         ...                                                          */
void awl_module_fprint(FILE *f, const awl_module *m);

/* Drops the gradient of every parameter (sets grad to NULL). */
void awl_module_zero_grad(awl_module *m);

/* Frees m, its children and its parameter references. NULL is a no-op. */
void awl_module_free(awl_module *m);

/* ---- layers ---------------------------------------------------------------------- */
/* device NULL means "cpu". Parameters are float32; awl_module_cast converts. */

/* y = x @ weight^T + bias; weight (out, in) as PyTorch; x (..., in) -> (..., out).
 * Default init as PyTorch: weight and bias U(-1/sqrt(in), 1/sqrt(in)). */
awl_module *awl_linear_new(int64_t in_features, int64_t out_features, bool bias,
                           const char *device);
/* weight (num, dim) ~ N(0, 1); forward: int32 idx (...) -> (..., dim). */
awl_module *awl_embedding_new(int64_t num, int64_t dim, const char *device);
/* Over the last axis of size dim; weight 1, bias 0 (no bias when !bias). */
awl_module *awl_layer_norm_new(int64_t dim, double eps, bool bias, const char *device);
/* Zeroes elements with probability p in training mode, scaling the rest by
 * 1/(1-p); the identity in evaluation mode. */
awl_module *awl_dropout_new(double p);
/* GELU, tanh approximation (GPT-2's). */
awl_module *awl_gelu_new(void);

/* Causal multi-head self-attention (nanoGPT's): children c_attn (n_embd ->
 * 3 n_embd) and c_proj (n_embd -> n_embd); dropout on the attention weights
 * and on the output. x (B, T, n_embd) -> (B, T, n_embd). n_embd must be a
 * multiple of n_head. */
awl_module *awl_causal_self_attention_new(int64_t n_embd, int n_head, double dropout, bool bias,
                                          const char *device);

/* One attention layer's key/value cache, for generation (nn/generate.h
 * makes one per layer of a GPT): the keys and values of the tokens seen so
 * far, k and v (B, n_head, capacity, head_dim) in the dtype attention
 * computes in, of which the first `length` positions are filled; key_mask
 * NULL, or (B, 1, 1, capacity) in that dtype, nonzero at positions no query
 * may see (a batch's padding). Whoever makes it owns the tensors. */
typedef struct awl_attention_cache {
    awl_tensor *k, *v;
    int64_t length;
    awl_tensor *key_mask;
} awl_attention_cache;

/* While cache is not NULL, the layer's forward attends over it
 * (awl_attention_qkv_cached) instead of over x alone: x (B, T, n_embd) is
 * then the next T tokens, and the cache grows by T. Meant for evaluation
 * mode. NULL turns it back into ordinary attention. The layer does not own
 * the cache. Returns 0, or negative when attn is not a
 * CausalSelfAttention. */
int awl_causal_self_attention_set_cache(awl_module *attn, awl_attention_cache *cache);
/* c_fc (n_embd -> 4 n_embd), GELU, c_proj (4 n_embd -> n_embd), dropout. */
awl_module *awl_mlp_new(int64_t n_embd, double dropout, bool bias, const char *device);
/* Pre-LayerNorm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(·)).
 * Children ln_1, attn, ln_2, mlp. */
awl_module *awl_block_new(int64_t n_embd, int n_head, double dropout, bool bias,
                          const char *device);

/* Applies modules[0..n) in order; children are named "0", "1", ... It owns
 * them (all freed if one is NULL). */
awl_module *awl_sequential_new(int n, awl_module *const *modules);
/* Appends one more (owned; freed on failure). Returns 0 or negative. */
int awl_sequential_append(awl_module *seq, awl_module *m);
/* x + inner(x); the child is named "fn". */
awl_module *awl_residual_new(awl_module *inner);
/* A module with children only and no forward (PyTorch's ModuleDict and
 * ModuleList, which GPT uses to reproduce nanoGPT's names). */
awl_module *awl_module_container_new(const char *type);

/* ---- initialisation (in place, from the global generator) ---------------------- */
/* Each returns 0 or negative. fan_in = size(1) * receptive field,
 * fan_out = size(0) * receptive field, as PyTorch computes them (the
 * receptive field is the product of the axes after the first two). */

typedef enum awl_fan_mode { AWL_FAN_IN, AWL_FAN_OUT } awl_fan_mode;

int awl_init_normal_(awl_tensor *t, double mean, double std);
int awl_init_uniform_(awl_tensor *t, double low, double high);
int awl_init_constant_(awl_tensor *t, double value);
/* U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)). */
int awl_init_xavier_uniform_(awl_tensor *t, double gain);
/* N(0, gain * sqrt(2 / (fan_in + fan_out))). */
int awl_init_xavier_normal_(awl_tensor *t, double gain);
/* He initialisation for a leaky ReLU of negative slope a (0: ReLU):
 * gain = sqrt(2 / (1 + a^2)); uniform: U(-b, b), b = gain * sqrt(3 / fan);
 * normal: N(0, gain / sqrt(fan)). */
int awl_init_kaiming_uniform_(awl_tensor *t, double a, awl_fan_mode mode);
int awl_init_kaiming_normal_(awl_tensor *t, double a, awl_fan_mode mode);

/* ---- autocast: mixed precision (nn/autocast.c) ------------------------------------ */
/* While this thread's autocast dtype is AWL_BF16, Linear layers cast their
 * float32 input, weight and bias to bfloat16 (differentiably: the float32
 * parameters receive float32 gradients), so matrix products, attention and
 * the activations between them run in bfloat16, while Block's residual
 * additions cast the branch back to the float32 stream. Functional ops
 * (awl_linear, ...) are not affected: they compute in the dtype they are
 * given. AWL_F32 (the default) turns autocast off.
 *
 *     awl_dtype before = awl_autocast_set(AWL_BF16);
 *     awl_tensor *loss = awl_cross_entropy(awl_module_forward(net, x), y, -1);
 *     awl_autocast_set(before);
 *
 * The CPU backend stores bfloat16 but refuses arithmetic on it, so autocast
 * to AWL_BF16 needs a CUDA device (awl_gpt_set_autocast checks this). */

/* Sets the autocast dtype (a float dtype; AWL_F32 is off) and returns the
 * previous one, for restoring. A non-float dtype records an error and
 * changes nothing. */
awl_dtype awl_autocast_set(awl_dtype dtype);
/* This thread's autocast dtype (AWL_F32 when off). */
awl_dtype awl_autocast_get(void);
/* t cast to the autocast dtype (awl_cast, owned by the current scope) when
 * autocast is on and t is float32; otherwise t itself. NULL for NULL. */
awl_tensor *awl_autocast(awl_tensor *t);

/* The weight-cast cache (PyTorch's autocast keeps one too): casts every
 * float32 tensor of ts[0..n) to the autocast dtype now, all together
 * (awl_cast_many: one kernel on CUDA instead of one per tensor), and until
 * awl_autocast_cache_clear awl_autocast(t) returns t's cast from the cache
 * instead of casting again. The casts are owned by the current scope, so
 * clear the cache before that scope ends, and before anything writes the
 * tensors (an optimizer step): the cache does not see writes. A second
 * call replaces the cache. A no-op while autocast is off. Returns 0 or
 * negative (the cache then stays empty). awl_gpt's forward caches the
 * weights and biases of its Linear layers and the tied head's embedding
 * for the forward's duration. */
int awl_autocast_cache(int n, awl_tensor *const *ts);
void awl_autocast_cache_clear(void);

/* Kept casts: `cast` (contiguous, source's size and device, a narrower
 * float dtype) holds source's current values in its dtype, and until
 * source is next written (its awl_tensor_version moves), awl_autocast and
 * the cache give a view of it with the cast's gradient (awl_cast_kept)
 * instead of casting. AdamW keeps its parameters' bfloat16 copies this way
 * (nn/optim.h's awl_optimizer_keep_casts); a second call for the same
 * source replaces the entry. The table is process-wide and holds a
 * reference to both tensors until awl_autocast_forget(source). Returns 0
 * or AWL_ERR_INVALID. */
int awl_autocast_keep(awl_tensor *source, awl_tensor *cast);
void awl_autocast_forget(awl_tensor *source);

/* ---- functional layers (differentiable) ------------------------------------------ */

/* x (..., in), weight (out, in), bias (out) or NULL -> (..., out).
 * y = x @ weight^T + bias: one GEMM over all rows of x, reading weight
 * through a transposed view, with the bias added in place. */
awl_tensor *awl_linear(awl_tensor *x, awl_tensor *weight, awl_tensor *bias);
/* A Transformer block's MLP, linear(gelu(linear(x, w1, b1)), w2, b2): w1
 * (hidden, in), w2 (out, hidden), biases may be NULL. Where the backend has
 * products with a GELU epilogue (CPU; CUDA in bfloat16, through cuBLASLt)
 * the first product writes gelu's output and input at once and the
 * backward computes the GELU's gradient in the product that gives it;
 * elsewhere it is the composed ops. */
awl_tensor *awl_mlp(awl_tensor *x, awl_tensor *w1, awl_tensor *b1, awl_tensor *w2, awl_tensor *b2);

/* Mean cross-entropy over the rows whose target is not ignore_index:
 * logits (N, V) or (B, T, V), targets int32 (N) or (B, T) with values in
 * [0, V) or equal to ignore_index. Returns a scalar (NaN when every row is
 * ignored, as PyTorch). Fused: one node whose backward is the backend's
 * cross-entropy kernel. */
awl_tensor *awl_cross_entropy(awl_tensor *logits, awl_tensor *targets, int ignore_index);
/* scale times awl_cross_entropy, as one node: gradient accumulation's
 * loss / n without a second node after it. In training, where the backend
 * has cross_entropy_forward_backward, the forward also writes the logits'
 * gradient for the case where the loss is backward's root (its gradient
 * exactly 1), from the same read of the logits, and backward hands it on;
 * a loss that is not the root (another op after it, or a gradient given to
 * awl_backward_ex) gets its gradient computed again in backward, as
 * without the kernel, and the forward's is not used. */
awl_tensor *awl_cross_entropy_scaled(awl_tensor *logits, awl_tensor *targets, int ignore_index,
                                     double scale);

/* LayerNorm over the last axis: x (..., C), weight and bias (C) or NULL. */
awl_tensor *awl_layer_norm(awl_tensor *x, awl_tensor *weight, awl_tensor *bias, double eps);
/* awl_layer_norm with its output in dtype: x's, or bfloat16 for a float32
 * x. The same bits as awl_cast(awl_layer_norm(x, ...), dtype), with the
 * rounding done by the LayerNorm's kernel where the backend has it (no
 * float32 output and no cast pass; its backward takes the bfloat16
 * gradient as it comes, and its gradients agree with the cast path's to
 * float32 rounding). Under autocast a GPT block's LayerNorms feed matmuls
 * this way. */
awl_tensor *awl_layer_norm_to(awl_tensor *x, awl_tensor *weight, awl_tensor *bias, double eps,
                              awl_dtype dtype);

/* softmax(q k^T / sqrt(D), causal mask) v with dropout (probability
 * dropout_p) on the attention weights: q (B, H, T, D), k and v (B, H, S, D),
 * out (B, H, T, D). The causal mask lets query i see keys j <= i. Pass
 * dropout_p = 0 outside training. The fused kernel needs T == S; with
 * dropout it drops the weights the composed path would drop from the same
 * generator state (common/dropout.h). Its output is laid out (B, T, H, D) in memory, so that
 * awl_transpose(out, 1, 2) followed by awl_reshape to (B, T, H * D) copies
 * nothing. */
awl_tensor *awl_scaled_dot_product_attention(awl_tensor *q, awl_tensor *k, awl_tensor *v,
                                             bool causal, double dropout_p);

/* Multi-head attention straight from a packed projection: qkv (B, T, 3C)
 * holds q, k and v side by side (c_attn's output), each split into n_head
 * heads of C / n_head; out (B, T, C), the heads' outputs side by side. On
 * the fused path q, k and v are strided views of qkv and the gradient is
 * written straight into one (B, T, 3C) buffer, with no slice, transpose or
 * concatenation copies. */
awl_tensor *awl_attention_qkv(awl_tensor *qkv, int n_head, bool causal, double dropout_p);

/* awl_attention_qkv for T new tokens over a key/value cache: qkv (B, T, 3C)
 * holds the new tokens' q, k and v; their keys and values are written into
 * the cache at positions [length, length + T), length grows by T, and each
 * new query attends causally to the cached keys up to its own position
 * (length + i), except those key_mask hides. out (B, T, C). Records no
 * graph (the cache is written in place), whatever the grad mode. NULL for
 * a cache that does not fit qkv (batch, heads, dtype, room left); after a
 * failure the cache's contents are undefined (start it again). */
awl_tensor *awl_attention_qkv_cached(awl_tensor *qkv, int n_head, awl_attention_cache *cache);

/* Inverted dropout: in training (p > 0), each element is zeroed with
 * probability p and the rest scaled by 1 / (1 - p); otherwise x itself. The
 * mask is drawn from the global Philox generator (common/dropout.h), so a
 * checkpointed segment replays it; with the backend's dropout kernel it is
 * never stored (the backward draws it again). */
awl_tensor *awl_dropout(awl_tensor *x, double p, bool training);

/* x + awl_dropout(h, p, training), h cast to x's dtype first: a residual
 * branch joining the residual stream (each of Block's two additions). x
 * and h have one shape. With the backend's dropout_add kernel it is one
 * pass (reading x and h, writing the sum; no mask stored); otherwise the
 * dropout, the cast and the addition, composed, draw the same mask. */
awl_tensor *awl_dropout_add(awl_tensor *x, awl_tensor *h, double p, bool training);

/* awl_dropout_add(x, h, p, training) into *sum, then awl_layer_norm_to of
 * it (weight, bias, eps, dtype), which this returns: a block's residual
 * addition and the LayerNorm that reads it (flash-attn's
 * dropout_add_layer_norm). With the backend's dropout_add_layernorm kernel
 * both come from one pass, which does not read the sum back; otherwise
 * from the two ops. Either way the same bits, the same draw and the same
 * two graph nodes. x float32 where the kernel takes it. *sum belongs to
 * the current scope, as the result does; both NULL on an error. */
awl_tensor *awl_dropout_add_layer_norm_to(awl_tensor *x, awl_tensor *h, double p, bool training,
                                          awl_tensor *weight, awl_tensor *bias, double eps,
                                          awl_dtype dtype, awl_tensor **sum);

/* awl_dropout(x + h, p, training), h broadcast over x's leading axes (h's
 * shape is x's last axes): a GPT's token and position embeddings, dropped
 * together. With the backend's add_dropout kernel it is one pass (reading
 * x and h, writing the result; no mask stored); otherwise the addition and
 * the dropout, composed, draw the same mask. */
awl_tensor *awl_add_dropout(awl_tensor *x, awl_tensor *h, double p, bool training);

#ifdef __cplusplus
}
#endif

#endif
