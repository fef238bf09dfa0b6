/*
 * autograd/autograd.h - differentiable ops and the backward engine.
 *
 * Every op here computes its result with the raw layer (tensor/tensor.h) and,
 * when grad mode is on and an input requires grad, records a node in the
 * graph: the op's backward function plus the few tensors it needs. Calling
 * awl_backward(loss) walks the graph from loss in reverse topological order,
 * accumulating gradients into the `grad` of every leaf that requires grad.
 *
 *     awl_tensor *w = awl_requires_grad_(awl_randn(AWL_SHAPE(3, 2), AWL_F32, "cpu"), true);
 *     awl_scope_begin();
 *     awl_tensor *y = awl_matmul(x, w);
 *     awl_tensor *loss = awl_keep(awl_mean_all(awl_mul(y, y)));
 *     awl_scope_end();              // y and the product die; the graph keeps what it needs
 *     awl_backward(loss);           // w->grad now holds d loss / d w
 *     awl_release(loss);
 *
 * Backward formulas are themselves written with these ops, so with
 * create_graph the gradient has a graph of its own and can be differentiated
 * again (higher-order gradients).
 *
 * Ownership and errors as in tensor/tensor.h: results belong to the current
 * scope; failures return NULL with a message naming the op and the shapes.
 */
#ifndef AWL_AUTOGRAD_AUTOGRAD_H
#define AWL_AUTOGRAD_AUTOGRAD_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- grad mode ---------------------------------------------------------------- */

/* Whether ops record graph nodes (thread-local, on by default). */
bool awl_is_grad_enabled(void);
/* Sets grad mode and returns the previous setting. */
bool awl_set_grad_enabled(bool on);
/* A no-grad region: begin switches recording off, end restores what was
 * there before begin. Regions nest. */
void awl_no_grad_begin(void);
void awl_no_grad_end(void);

/* ---- leaves and gradients ------------------------------------------------------- */

/* Marks a leaf as requiring grad (or not) and returns it. Fails for a
 * non-leaf or an integer tensor. */
awl_tensor *awl_requires_grad_(awl_tensor *t, bool on);
/* Whether t is a leaf (made by the user, not by a recorded op). */
bool awl_is_leaf(const awl_tensor *t);
/* Shares t's data without history (like PyTorch's detach()). */
awl_tensor *awl_detach(awl_tensor *t);
/* Calls fn(leaf, user) each time a backward pass has finished accumulating
 * into leaf->grad (data-parallel training overlaps communication with it). */
int awl_register_grad_hook(awl_tensor *leaf, awl_grad_hook_fn fn, void *user);
/* Removes a hook registered with the same fn and user. */
int awl_remove_grad_hook(awl_tensor *leaf, awl_grad_hook_fn fn, void *user);
/* Makes grad (same shape, dtype and device; one more reference) the leaf's
 * gradient, which later backward passes then add into in place: DDP makes
 * each gradient a view into a flat communication bucket this way. */
int awl_set_grad(awl_tensor *leaf, awl_tensor *grad);
/* Drops a leaf's gradient (sets it to NULL). */
void awl_clear_grad(awl_tensor *t);

/* ---- the engine ---------------------------------------------------------------- */

typedef struct awl_backward_options {
    awl_tensor *grad;  /* d out / d root; NULL means 1 (root must be a scalar) */
    bool retain_graph; /* keep saved tensors so the graph can run again      */
    bool create_graph; /* record the backward itself (higher-order grads)   */
} awl_backward_options;

/* Accumulates d root / d leaf into every reachable leaf's grad. root must
 * have one element. Returns 0 or a negative status. */
int awl_backward(awl_tensor *root);
int awl_backward_ex(awl_tensor *root, const awl_backward_options *options);

/* Like torch.autograd.grad: the gradients of root with respect to each of
 * inputs[0..n), written to grads[0..n) (owned by the current scope; NULL for
 * an input root does not depend on), without touching any leaf's grad. */
int awl_grad(awl_tensor *root, int n, awl_tensor *const *inputs, awl_tensor **grads,
             const awl_backward_options *options);

/* ---- element-wise ---------------------------------------------------------------- */

/* Binary ops broadcast (NumPy rules); both operands have the same dtype. */
awl_tensor *awl_add(awl_tensor *a, awl_tensor *b);
awl_tensor *awl_sub(awl_tensor *a, awl_tensor *b);
awl_tensor *awl_mul(awl_tensor *a, awl_tensor *b);
awl_tensor *awl_div(awl_tensor *a, awl_tensor *b);
awl_tensor *awl_maximum(awl_tensor *a, awl_tensor *b);
awl_tensor *awl_minimum(awl_tensor *a, awl_tensor *b);

awl_tensor *awl_add_scalar(awl_tensor *x, double s);  /* x + s */
awl_tensor *awl_sub_scalar(awl_tensor *x, double s);  /* x - s */
awl_tensor *awl_rsub_scalar(double s, awl_tensor *x); /* s - x */
awl_tensor *awl_mul_scalar(awl_tensor *x, double s);  /* x * s */
awl_tensor *awl_div_scalar(awl_tensor *x, double s);  /* x / s */
awl_tensor *awl_rdiv_scalar(double s, awl_tensor *x); /* s / x */
awl_tensor *awl_pow(awl_tensor *x, double exponent);  /* x ^ exponent */

awl_tensor *awl_neg(awl_tensor *x);
awl_tensor *awl_exp(awl_tensor *x);
awl_tensor *awl_log(awl_tensor *x);
awl_tensor *awl_sqrt(awl_tensor *x);
awl_tensor *awl_tanh(awl_tensor *x);
awl_tensor *awl_sigmoid(awl_tensor *x);
awl_tensor *awl_relu(awl_tensor *x);
awl_tensor *awl_gelu(awl_tensor *x); /* tanh approximation, as GPT-2 */
/* grad * gelu'(x), gelu's backward as an op of its own (differentiable:
 * awl_mlp's backward uses it where it composes). */
awl_tensor *awl_gelu_backward(awl_tensor *grad, awl_tensor *x);
awl_tensor *awl_abs(awl_tensor *x);

/* cond ? a : b, all three broadcast together; gradients flow to a and b. */
awl_tensor *awl_where(awl_tensor *cond, awl_tensor *a, awl_tensor *b);
/* x with `value` wherever mask is non-zero (mask broadcasts to x). */
awl_tensor *awl_masked_fill(awl_tensor *x, awl_tensor *mask, double value);

/* ---- comparisons (not differentiable; 1 or 0 in the inputs' dtype) ----------- */

awl_tensor *awl_eq(awl_tensor *a, awl_tensor *b);
awl_tensor *awl_gt(awl_tensor *a, awl_tensor *b);
awl_tensor *awl_lt(awl_tensor *a, awl_tensor *b);

/* ---- matrix products ---------------------------------------------------------- */

/* NumPy matmul: (..., M, K) @ (..., K, N), batch axes broadcast; 1-D operands
 * are promoted to matrices and the added axis removed. */
awl_tensor *awl_matmul(awl_tensor *a, awl_tensor *b);

/* ---- reductions ----------------------------------------------------------------- */

/* Over the listed axes (ndims == 0: all axes); keepdim keeps them as size 1.
 * awl_sum(x, AWL_DIMS(0, 2), false) */
awl_tensor *awl_sum(awl_tensor *x, int ndims, const int *dims, bool keepdim);
awl_tensor *awl_mean(awl_tensor *x, int ndims, const int *dims, bool keepdim);
/* Values of the maximum; the gradient is shared equally among ties. */
awl_tensor *awl_max(awl_tensor *x, int ndims, const int *dims, bool keepdim);
/* Shorthands reducing every axis to a scalar. */
awl_tensor *awl_sum_all(awl_tensor *x);
awl_tensor *awl_mean_all(awl_tensor *x);

awl_tensor *awl_softmax(awl_tensor *x, int dim);
awl_tensor *awl_log_softmax(awl_tensor *x, int dim);
awl_tensor *awl_logsumexp(awl_tensor *x, int dim, bool keepdim);

/* ---- shape and views (no copy where the strides allow) -------------------------- */

awl_tensor *awl_reshape(awl_tensor *x, int ndim, const int64_t *shape);
awl_tensor *awl_flatten(awl_tensor *x, int start_dim, int end_dim);
awl_tensor *awl_permute(awl_tensor *x, const int *dims);
awl_tensor *awl_transpose(awl_tensor *x, int dim0, int dim1);
awl_tensor *awl_expand(awl_tensor *x, int ndim, const int64_t *shape);
awl_tensor *awl_slice(awl_tensor *x, int dim, int64_t start, int64_t stop, int64_t step);
awl_tensor *awl_squeeze(awl_tensor *x, int dim);
awl_tensor *awl_unsqueeze(awl_tensor *x, int dim);
awl_tensor *awl_contiguous(awl_tensor *x);
awl_tensor *awl_clone(awl_tensor *x);

/* Joins n tensors along an existing axis (concat) or a new one (stack). */
awl_tensor *awl_concat(int n, awl_tensor *const *ts, int dim);
awl_tensor *awl_stack(int n, awl_tensor *const *ts, int dim);
/* Cuts x along dim into pieces of `size` (the last may be smaller), written
 * to out[0..); returns how many, or a negative status when more than max_out
 * would be needed. Each piece is a view. */
int awl_split(awl_tensor *x, int64_t size, int dim, awl_tensor **out, int max_out);

/* ---- indexing -------------------------------------------------------------------- */

/* Rows of weight (V, ...) picked by int32 indices of any shape: the result
 * has shape idx.shape + weight.shape[1:]. The gradient scatters back (sums
 * repeated rows). */
awl_tensor *awl_embedding(awl_tensor *weight, awl_tensor *idx);
/* PyTorch's gather along dim (idx int32, same ndim as x). */
awl_tensor *awl_gather(awl_tensor *x, int dim, awl_tensor *idx);

/* ---- dtype and device ------------------------------------------------------------ */

awl_tensor *awl_cast(awl_tensor *x, awl_dtype dtype);
/* outs[i] = awl_cast(xs[i], dtype) for i < n, each a new tensor with its
 * own cast node, computed together (awl_tensor_cast_many: one kernel where
 * the device has one). Returns 0 or negative (then no outs are left). */
int awl_cast_many(int n, awl_tensor *const *xs, awl_dtype dtype, awl_tensor **outs);
/* awl_cast(x, kept->dtype) without the cast kernel, for a kept that already
 * holds x's values in that dtype (AdamW's bfloat16 copy of a weight,
 * nn/autocast.c): a new tensor sharing kept's storage, with x's shape, and
 * the cast's node, so the gradient comes back to x as from awl_cast. The
 * caller vouches for the values; the shapes' element counts must match. */
awl_tensor *awl_cast_kept(awl_tensor *x, awl_tensor *kept);
/* Copies to a device ("cuda:0"); the gradient flows back to x's device. */
awl_tensor *awl_to(awl_tensor *x, const char *device);

#ifdef __cplusplus
}
#endif

#endif
