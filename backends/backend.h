/*
 * backends/backend.h - the interface every device implements.
 *
 * A backend is a table of function pointers registered under a name ("cpu",
 * "cuda"). The tensor layer above owns shapes, broadcasting rules, dtype
 * checks, autograd and memory statistics; a backend only moves and computes
 * bytes. Everything a kernel needs arrives in an awl_view: a base pointer, an
 * element offset, a shape and strides in elements. Kernels must read strided
 * views in place: a zero stride is a broadcast, a permuted stride order is a
 * transpose, and nothing on a hot path may copy either into a contiguous
 * buffer when the kernel could walk it directly.
 *
 * The table has two parts.
 *
 * Required primitives: memory, copies, fill, element-wise unary and binary
 * ops, where, reductions along axes, (batched) matmul, gather/scatter for
 * embeddings and cross-entropy, and random fill, for float32, float64 and
 * int32 (transcendental ops and division for the float types only).
 * bfloat16 is required only in fill, copy (conversion) and where; bf16
 * arithmetic is optional: a backend without it declares so (`supports`)
 * and refuses it with AWL_ERR_INVALID. backends/ops.h lists, op by op, the
 * dtypes each is defined for. With only these a backend runs every op in
 * autograd/ and trains a GPT; awl-check (tools/awl-check) checks each one
 * against a float64 reference.
 *
 * Optional fused kernels: softmax, layernorm, cross-entropy, attention (with
 * or without dropout), dropout, dropout_add, add_dropout, GELU backward,
 * matmul with a bias, AdamW.
 * A NULL pointer, a dtype the backend's `supports` declines, or a return of
 * AWL_ERR_UNSUPPORTED (for a shape or layout the kernel does not handle; no
 * error message is recorded) makes the framework compose the same
 * computation from primitives. So a student's new backend starts with the
 * primitives and adds fused kernels one at a time, each checked against the
 * composed version.
 *
 * Only the tensor layer calls this table: nn/ and autograd/ reach the fused
 * kernels through tensor/fused.c's entry points (awl_tensor_softmax_forward,
 * ...), and scripts/check_layers.sh fails the tests when code above tensor/
 * names the table.
 *
 * Conventions for every function:
 *   - return AWL_OK, or a negative status after recording a message with
 *     awl_error() (common/error.h);
 *   - the caller has already checked shapes and dtypes as the comment of
 *     each entry states, so a kernel may assume them;
 *   - `out` may be the very same view as an input of an element-wise op
 *     (in-place update), but never a partial overlap;
 *   - work may be asynchronous (CUDA): ordering is the order of calls, and
 *     synchronize() waits for all of it.
 */
#ifndef AWL_BACKENDS_BACKEND_H
#define AWL_BACKENDS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backends/ops.h"
#include "common/dropout.h"
#include "common/dtype.h"
#include "common/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AWL_MAX_DIMS 8

/* A strided window onto device memory. Element (i0, ..., in-1) lives at
 * data + (offset + sum_k i_k * strides[k]) * dtype_size. A stride of 0 means
 * the view repeats along that axis (broadcasting). */
typedef struct awl_view {
    void *data;
    int64_t offset;
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    int64_t strides[AWL_MAX_DIMS];
    awl_dtype dtype;
} awl_view;

static inline int64_t awl_view_numel(const awl_view *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
    return n;
}

/* A contiguous 1-d view of n elements of dtype at data (offset 0). */
static inline awl_view awl_view_1d(void *data, awl_dtype dtype, int64_t n)
{
    awl_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dtype;
    v.ndim = 1;
    v.shape[0] = n;
    v.strides[0] = 1;
    return v;
}

/* True when the view's elements are laid out row-major without gaps. */
static inline bool awl_view_is_contiguous(const awl_view *v)
{
    int64_t expected = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != expected) return false;
        expected *= v->shape[d];
    }
    return true;
}

/* ---- operation codes ------------------------------------------------------ */

/* The unary, binary and reduction op codes, and what each computes, are
 * the lists of backends/ops.h. */

typedef enum awl_random_kind {
    AWL_RANDOM_UNIFORM, /* a + (b - a) * u, u uniform in [0, 1)   */
    AWL_RANDOM_NORMAL,  /* a + b * z, z standard normal            */
} awl_random_kind;

/* Hyper-parameters of one AdamW step (optional fused kernel). */
typedef struct awl_adamw_args {
    float lr, beta1, beta2, eps;
    int64_t step; /* 1 for the first step: bias corrections use it */
    /* Each gradient element is multiplied by this first, g * grad_scale
     * rounded to float32 as the scale kernel rounds it (gradient clipping's
     * factor applied as the gradients are read: nn/optim.h's
     * awl_optimizer_clip_grad_norm); 1 for none. The grads are not written. */
    float grad_scale;
    /* NULL, or n views, one for each parameter: casts[i] (contiguous, the
     * parameter's element count, bfloat16) receives params[i]'s new value
     * rounded to bfloat16 (the copy kernel's rounding), written by the
     * same pass that writes the value. Mixed precision's forward then reads
     * this copy instead of casting the weight again (nn/autocast.c's kept
     * casts, nn/optim.h's awl_optimizer_keep_casts). A backend that cannot
     * write them declines the call (AWL_ERR_UNSUPPORTED), and the framework
     * asks again without them. */
    const awl_view *casts;
} awl_adamw_args;

/* ---- the table ------------------------------------------------------------ */

typedef struct awl_backend {
    const char *name; /* "cpu", "cuda" */
    /* Its memory is host memory and it has one device, named without an
     * index ("cpu"). */
    bool host_memory;

    /* ---- required: devices and memory ---- */

    /* Number of devices of this kind present (0 when none: "cuda" on a
     * machine without a GPU). */
    int (*device_count)(void);
    /* nbytes of device memory, or NULL after recording AWL_ERR_OOM with the
     * size asked for and the device's figures. nbytes may be 0. */
    void *(*alloc)(int device, size_t nbytes);
    /* Returns memory from alloc (ptr may be NULL). */
    void (*free)(int device, void *ptr, size_t nbytes);
    /* Contiguous copies between host memory and this device. copy_from_host
     * may return before the bytes are on the device, but it has read src by
     * then (the caller may overwrite it at once), and every op queued after it
     * on the device sees dst's new bytes. copy_to_host returns with dst
     * filled. */
    int (*copy_from_host)(int device, void *dst, const void *src, size_t nbytes);
    int (*copy_to_host)(int device, void *dst, const void *src, size_t nbytes);
    /* Waits until all queued work on the device has finished. */
    int (*synchronize)(int device);

    /* ---- required: element-wise ---- */

    /* Every element of out = value (converted to out's dtype). */
    int (*fill)(const awl_view *out, double value);
    /* out = in, element by element, converting dtype where they differ. `in`
     * has out's shape, possibly broadcast (zero strides). */
    int (*copy)(const awl_view *out, const awl_view *in);
    /* in has out's shape and dtype (possibly broadcast). */
    int (*unary)(awl_unary_op op, const awl_view *out, const awl_view *in, double alpha);
    /* a and b have out's shape (broadcast through zero strides) and dtype. */
    int (*binary)(awl_binary_op op, const awl_view *out, const awl_view *a, const awl_view *b);
    /* out = cond != 0 ? a : b; all four of out's shape, a, b and out one dtype,
     * cond any dtype. */
    int (*where)(const awl_view *out, const awl_view *cond, const awl_view *a, const awl_view *b);

    /* ---- required: reductions ---- */

    /* out has in's ndim, with size 1 along each reduced axis and in's size
     * along the others; same dtype. MEAN divides by the reduced count.
     * Float32 sums accumulate in double (awl-check sums 4M values). */
    int (*reduce)(awl_reduce_op op, const awl_view *out, const awl_view *in);

    /* ---- required: matrix products ---- */

    /* out (..., M, N) = a (..., M, K) @ b (..., K, N), or out += a @ b when
     * accumulate is true. All three have the same ndim >= 2 and the batch
     * dimensions of out; a's and b's batch dims may be broadcast (zero
     * strides). Float dtypes only, all equal. */
    int (*matmul)(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate);

    /* ---- required: indexing ---- */

    /* Rows by index (embedding lookup): idx int32 of any shape, src (V, ...);
     * out has shape idx.shape + src.shape[1:]. out[i..., :] = src[idx[i...], :].
     * Indices are already checked to lie in [0, V) (by the framework, or
     * by the backend's check_indices, whose report may come later: a
     * backend with check_indices must then skip an index out of range
     * rather than touch memory through it, here and in the three below). */
    int (*index_select)(const awl_view *out, const awl_view *src, const awl_view *idx);
    /* The adjoint of index_select: dst[idx[i...], :] += src[i..., :], summing
     * repeated indices in a fixed order (deterministic). */
    int (*index_add)(const awl_view *dst, const awl_view *idx, const awl_view *src);
    /* Along one axis (PyTorch's gather): out and idx share a shape, in agrees
     * with it except along axis; out[..., j, ...] = in[..., idx[..., j, ...], ...]. */
    int (*gather)(const awl_view *out, const awl_view *in, int axis, const awl_view *idx);
    /* The adjoint of gather: out[..., idx[..., j, ...], ...] += src[..., j, ...],
     * deterministic. */
    int (*scatter_add)(const awl_view *out, int axis, const awl_view *idx, const awl_view *src);

    /* ---- required: random numbers ---- */

    /* Fills out (row-major element order) from the Philox stream (seed,
     * offset) laid out as common/philox.h specifies. Float dtypes. */
    int (*random)(const awl_view *out, awl_random_kind kind, uint64_t seed, uint64_t offset,
                  double a, double b);

    /* ---- optional: what it computes ---- */

    /* Whether the backend computes `kernel` for op code `op` (unary, binary
     * and reduce; 0 for the others) in `dtype`, of the combinations
     * backends/ops.h defines. NULL: every kernel whose entry is set, in
     * every dtype it is defined for. A kernel the query accepts may still
     * return AWL_ERR_UNSUPPORTED for a shape or layout it does not handle.
     * awl_backend_supports() below is the question to ask. */
    bool (*supports)(awl_kernel kernel, int op, awl_dtype dtype);

    /* ---- optional: checks ---- */

    /* Starts checking that every index of idx (int32, any strides) lies in
     * [0, limit), without waiting for the device: the first one that does
     * not is reported by the next synchronize() or copy_to_host(), a point
     * a training step waits at anyway (its loss read back), as
     * AWL_ERR_INVALID with the message "<op>: index <i> out of range for
     * <limit> <what>" (op and what: string constants). NULL: the framework
     * copies the indices to the host and checks them there, before the op. */
    int (*check_indices)(const awl_view *idx, int64_t limit, const char *op, const char *what);

    /* ---- optional: settings and statistics (NULL when not meaningful) ---- */

    /* Bytes held from the system, including cached free blocks. */
    size_t (*memory_reserved)(int device);
    /* Returns cached free blocks to the system. */
    void (*empty_cache)(int device);
    /* Threads the backend's kernels may use, and how many they use now
     * (the CPU: OpenMP's count, which OMP_NUM_THREADS sets at start). */
    void (*set_num_threads)(int n);
    int (*get_num_threads)(void);
    /* Float32 matmuls may use TF32 (or another faster, less exact mode). */
    void (*set_matmul_fast_fp32)(bool on);
    /* The stream the device's work is queued on, in call order (a
     * cudaStream_t for CUDA), for a library that queues device work of its
     * own and must order it after awl's kernels with events: dist/'s NCCL
     * transport. NULL where work runs synchronously (the CPU). */
    void *(*stream)(int device);
    /* Sets one of the backend's named settings, chosen once rather than
     * looked up by kernels ("attention" = "auto", "simt", "split",
     * "one-pass" or "mma" on CUDA; "fp32_matmul" = "3xtf32" or "sgemm" on
     * CUDA);
     * AWL_ERR_INVALID with a message for an unknown name or value. */
    int (*set_option)(const char *name, const char *value);

    /* ---- optional: profiling (tensor/profiler.c; NULL when not meaningful) ---- */

    /* The device's peak dense arithmetic rate in FLOP/s for matmuls in
     * dtype (for float32 with fast_fp32, TF32's rate), a fixed fact of the
     * hardware that MFU is measured against; writes where the figure comes
     * from into source[0..size) ("H200: 989.4 TFLOP/s bf16 dense"). 0 when
     * the backend does not know it. */
    double (*peak_flops)(int device, awl_dtype dtype, bool fast_fp32, char *source, size_t size);
    /* Device time for asynchronous backends: marker_record queues a
     * timestamp on the device's stream and returns it; marker_seconds
     * waits until marker b has passed and gives the seconds from a to b;
     * marker_free drops one. They fail without recording an error (NULL, a
     * negative status): the profiler falls back to the host's clock. */
    void *(*marker_record)(int device);
    int (*marker_seconds)(int device, void *a, void *b, double *seconds);
    void (*marker_free)(int device, void *marker);
    /* Opens and closes a named range for the device's own tools (NVTX
     * ranges, which Nsight Systems shows); name is read during the call. */
    void (*range_push)(const char *name);
    void (*range_pop)(void);

    /* ---- optional fused kernels (NULL, or AWL_ERR_UNSUPPORTED: compose) ---- */

    /* Softmax (log_softmax when log) over the last axis. in, out contiguous
     * (rows, n). */
    int (*softmax_forward)(const awl_view *out, const awl_view *in, bool log);
    /* dx from dy and the forward output y: softmax: y * (dy - sum(dy * y));
     * log_softmax: dy - exp(y) * sum(dy). All (rows, n), contiguous. */
    int (*softmax_backward)(const awl_view *dx, const awl_view *dy, const awl_view *y, bool log);

    /* LayerNorm over the last axis: x, out (rows, C); weight, bias (C) or
     * NULL; mean, rstd (rows) float32 (saved for backward). out has x's
     * dtype, or is bfloat16 for a float32 x (a LayerNorm feeding a matmul
     * under autocast: computed in float32, each output rounded once; a
     * backend that does not round on the way out returns
     * AWL_ERR_UNSUPPORTED for it, and the framework casts after). */
    int (*layernorm_forward)(const awl_view *out, const awl_view *mean, const awl_view *rstd,
                             const awl_view *x, const awl_view *weight, const awl_view *bias,
                             double eps);
    /* dx (rows, C) written; dweight, dbias (C) written (not accumulated), or
     * NULL when not wanted. dy has x's dtype, or is bfloat16 for a float32 x
     * (the gradient of autocast's bfloat16 output; AWL_ERR_UNSUPPORTED if
     * the backend does not widen it itself). dx_add (rows, C) of x's dtype,
     * or NULL: added to dx as it is written (the gradient x already has from
     * its other consumers, a residual connection's; the engine's pending
     * gradient, autograd/node.h). dx_copy (rows, C) bfloat16 for a float32
     * x, or NULL: dx written a second time, rounded to bfloat16 (the cast
     * that a bfloat16 branch of the residual stream reads,
     * awl_node_offer_grad_copy); AWL_ERR_UNSUPPORTED if the backend does
     * not write it, and the framework casts dx itself. */
    int (*layernorm_backward)(const awl_view *dx, const awl_view *dweight, const awl_view *dbias,
                              const awl_view *dy, const awl_view *x, const awl_view *weight,
                              const awl_view *mean, const awl_view *rstd, const awl_view *dx_add,
                              const awl_view *dx_copy);

    /* Cross-entropy per row: logits (N, V); targets int32 (N); loss (N) =
     * logsumexp(logits[i]) - logits[i, t_i], 0 where t_i == ignore_index;
     * lse (N) float32 saved for backward. */
    int (*cross_entropy_forward)(const awl_view *loss, const awl_view *lse, const awl_view *logits,
                                 const awl_view *targets, int ignore_index);
    /* dlogits (N, V) = dloss[i] * (softmax(logits[i]) - onehot(t_i)), 0 for
     * ignored rows; dloss (N). */
    int (*cross_entropy_backward)(const awl_view *dlogits, const awl_view *dloss,
                                  const awl_view *logits, const awl_view *lse,
                                  const awl_view *targets, int ignore_index);
    /* Both in one kernel, for training, where dloss (the rows' share of
     * the loss's gradient, 1 / count for a mean) is known before backward
     * (nn/functional.c: the loss is backward's root): loss and lse as
     * cross_entropy_forward, dlogits as cross_entropy_backward, the same
     * values, from one read of each row (CUDA keeps the row in shared
     * memory between its two passes). */
    int (*cross_entropy_forward_backward)(const awl_view *loss, const awl_view *lse,
                                          const awl_view *dlogits, const awl_view *dloss,
                                          const awl_view *logits, const awl_view *targets,
                                          int ignore_index);

    /* Scaled dot-product attention, q, k, v, out (B, H, T, D), possibly
     * strided along B, H and T (D contiguous); lse (B, H, T) float32.
     * out = dropout(softmax(q k^T * scale, causal mask)) v; lse is that of
     * the weights before dropout.
     *
     * dropout: NULL or p == 0 for none; otherwise weight (b, h, i, j) is
     * kept, and multiplied by awl_attention_dropout_scale(threshold), where
     * awl_attention_dropout_keep(seed, offset, awl_attention_dropout_row(b,
     * h, i, H, T), j, T, threshold) says so, threshold =
     * awl_attention_dropout_threshold(p) (common/dropout.h: 8-bit
     * decisions, sixteen keys a Philox block): a pure function of the
     * position, which the backward computes again (no mask is stored) and
     * which is the mask the composed path applies for the same generator
     * state. A backend without dropout returns AWL_ERR_UNSUPPORTED for p >
     * 0, and the framework composes (softmax, the same mask, matmul). The
     * backward gets the forward's arguments. */
    int (*attention_forward)(const awl_view *out, const awl_view *lse, const awl_view *q,
                             const awl_view *k, const awl_view *v, double scale, bool causal,
                             const awl_dropout_args *dropout);
    int (*attention_backward)(const awl_view *dq, const awl_view *dk, const awl_view *dv,
                              const awl_view *dout, const awl_view *q, const awl_view *k,
                              const awl_view *v, const awl_view *out, const awl_view *lse,
                              double scale, bool causal, const awl_dropout_args *dropout);

    /* out (M, N) = a (M, K) @ b (K, N) + bias (N) broadcast over the rows: a
     * linear layer's forward, the bias added as the product is written (a
     * GEMM epilogue) rather than in a pass of its own. Same dtype for all. */
    int (*matmul_bias)(const awl_view *out, const awl_view *a, const awl_view *b,
                       const awl_view *bias);

    /* An MLP's first product with its GELU (awl_mlp): pre (M, N) = a (M, K)
     * @ b (K, N) + bias (N), or no bias when bias is NULL, and out (M, N) =
     * gelu(pre) (ops.h's AWL_GELU), both written as the product is (CUDA:
     * cuBLASLt's GELU_AUX epilogue, bfloat16 only). out and pre have one
     * shape and layout. Same dtype for all; the result may differ from
     * AWL_GELU's by what awl-check allows the dtype (float32: 1e-5
     * relative). */
    int (*matmul_bias_gelu)(const awl_view *out, const awl_view *pre, const awl_view *a,
                            const awl_view *b, const awl_view *bias);

    /* The backward of that GELU in the product that gives its output's
     * gradient: out (M, N) = (a (M, K) @ b (K, N)) * gelu'(pre (M, N)), pre
     * the forward's (CUDA: cuBLASLt's DGELU epilogue, bfloat16 only). */
    int (*matmul_gelu_backward)(const awl_view *out, const awl_view *a, const awl_view *b,
                                const awl_view *pre);

    /* Dropout without a stored mask: out = in * keep_i / (1 - p), keep_i
     * = awl_dropout_keep(seed, offset, i, threshold) for element i of out in
     * row-major order (common/dropout.h); 0 < p < 1. out and in have one
     * shape and dtype (in possibly strided or broadcast). Its backward is
     * the same call on the gradient. A backend may also take a float32 in
     * for a bfloat16 out: in is rounded to bfloat16 first and then dropped
     * out, the bits of a cast then a dropout in one pass (dropout_add's
     * backward under autocast: the float32 residual gradient for the
     * bfloat16 branch); otherwise it answers AWL_ERR_UNSUPPORTED. */
    int (*dropout)(const awl_view *out, const awl_view *in, const awl_dropout_args *args);

    /* A residual branch joining the residual stream: out = x + keep_i h_i /
     * (1 - p), computed in out's dtype with h_i first cast to it (keep_i as
     * in dropout, for element i of out in row-major order; args NULL: no
     * dropout, out = x + h). out and x have one dtype, h may have another
     * (bfloat16 under autocast); all three one shape, contiguous. Its
     * backward needs no kernel of its own: dx = dout, dh = dropout(dout). */
    int (*dropout_add)(const awl_view *out, const awl_view *x, const awl_view *h,
                       const awl_dropout_args *args);

    /* A sum that is dropped as a whole (a GPT's token plus position
     * embeddings): out = keep_i (x_i + h_(i mod n)) / (1 - p), keep_i as in
     * dropout for element i of out, n = h's element count, which divides
     * x's (h repeats over x's leading axes). out, x, h one dtype,
     * contiguous; 0 < p < 1. Its backward needs no kernel of its own: dx =
     * dropout(dout), dh = dx summed over the repeats. */
    int (*add_dropout)(const awl_view *out, const awl_view *x, const awl_view *h,
                       const awl_dropout_args *args);

    /* A block's residual addition and the LayerNorm that reads it, in one
     * pass: sum = x + dropout(h) as dropout_add computes it (args NULL: no
     * dropout), then out, mean, rstd = layernorm_forward's of sum, without
     * reading sum back. x and sum float32, h float32 or bfloat16 (autocast's
     * branch), out float32 or bfloat16 (autocast's LayerNorm feeding a
     * matmul), all (rows, C) and contiguous; weight, bias float32 (C) or
     * NULL. Each output has the bits the two kernels give one after the
     * other (dropout_add, then layernorm_forward). */
    int (*dropout_add_layernorm)(const awl_view *sum, const awl_view *out, const awl_view *mean,
                                 const awl_view *rstd, const awl_view *x, const awl_view *h,
                                 const awl_view *weight, const awl_view *bias, double eps,
                                 const awl_dropout_args *args);

    /* dx = dy * gelu'(x) (tanh form), all three the same shape: GELU's
     * backward in one pass instead of gelu' then a multiply. */
    int (*gelu_backward)(const awl_view *dx, const awl_view *dy, const awl_view *x);

    /* One AdamW step over n parameters, in place on params, m and v
     * (contiguous, float32). weight_decay[i] applies to params[i]; where
     * args->casts is not NULL, the bfloat16 copies are written too. */
    int (*adamw_step)(int n, const awl_view *params, const awl_view *grads, const awl_view *m,
                      const awl_view *v, const float *weight_decay, const awl_adamw_args *args);

    /* The sum of the squares of every element of n tensors (contiguous,
     * float32), each square and the sum in float64, written to out (a
     * float64 scalar). Gradient clipping's norm in one pass over all the
     * gradients, instead of a cast, a square, a sum and an addition per
     * tensor. The order of the additions depends on the tensors' sizes
     * only, not on threads or launch shapes, so a sum repeats bit for bit. */
    int (*sum_squares)(int n, const awl_view *xs, const awl_view *out);

    /* xs[i] *= factor, in place, for n tensors (contiguous, float32); the
     * factor is rounded to float32 first, as the MUL_SCALAR unary op does,
     * so the products are that op's bits. Gradient clipping's scaling. */
    int (*scale)(int n, const awl_view *xs, double factor);

    /* outs[i] = xs[i] converted to outs' dtype (the kernel's dtype, one for
     * all n), for n pairs of contiguous tensors of the same element count,
     * the xs float32: the bits of the copy kernel's cast, for every tensor
     * in as few launches as the backend can. Autocast's weight casts
     * (nn/autocast.c), a kernel for all of a model's Linear weights and
     * biases instead of one per tensor. */
    int (*cast_many)(int n, const awl_view *outs, const awl_view *xs);

    /* out (M, N) float32 = a (M, K) @ b (K, N), a and b bfloat16 (the
     * kernel's dtype): the float32 sums of the products kept as they are,
     * not rounded to bfloat16. Mixed precision's weight gradients, which
     * go to float32 parameters (autograd/engine.c: a gradient may arrive
     * wider than a cast's output). 2-D views; a backend may decline
     * layouts it cannot read in place (CUDA: a broadcast operand), and the
     * framework then rounds instead. Where a_row_sums is not NULL, it (M,
     * float32) also gets the sums of a's rows, taken as the product reads
     * them: with a = dY^T, a linear layer's bias gradient. A backend that
     * cannot give the sums declines the call (AWL_ERR_UNSUPPORTED), and the
     * framework asks again without them. */
    int (*matmul_wide)(const awl_view *out, const awl_view *a_row_sums, const awl_view *a,
                       const awl_view *b);
} awl_backend;

/* ---- registry --------------------------------------------------------------- */

/* Adds a backend under its name (replacing one of the same name). The CPU
 * backend, and the CUDA and student backends when built, are registered on
 * first use. */
int awl_backend_register(const awl_backend *backend);

/* The backend registered as `name`, or NULL. */
const awl_backend *awl_backend_find(const char *name);

/* The registered backends, in registration order (the built-in ones
 * first): awl_backend_at(i) for 0 <= i < awl_backend_count(). */
int awl_backend_count(void);
const awl_backend *awl_backend_at(int i);

/* Whether the table's entry for kernel is set (not NULL). */
bool awl_backend_has(const awl_backend *backend, awl_kernel kernel);
/* Whether the backend computes kernel (op, dtype): the entry is set, ops.h
 * defines the combination, and the backend's `supports` accepts it. */
bool awl_backend_supports(const awl_backend *backend, awl_kernel kernel, int op, awl_dtype dtype);

/* Names for error messages ("exp"; "unary?" for a code out of range). */
const char *awl_unary_op_name(awl_unary_op op);
const char *awl_binary_op_name(awl_binary_op op);
const char *awl_reduce_op_name(awl_reduce_op op);

/* The built-in backends' tables. awl_cuda_backend() is NULL when awl was
 * built without CUDA, awl_student_backend() when without the student
 * backend (the CMake option AWL_WITH_STUDENT; backends/student). */
const awl_backend *awl_cpu_backend(void);
const awl_backend *awl_cuda_backend(void);
const awl_backend *awl_student_backend(void);

#ifdef __cplusplus
}
#endif

#endif
