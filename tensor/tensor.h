/*
 * tensor/tensor.h - the strided tensor, its memory model, and raw compute.
 *
 * A tensor is a strided view (shape, strides, offset, dtype) onto a
 * reference-counted storage on one device. Views (reshape, permute, slice,
 * expand, ...) share storage and copy nothing.
 *
 * Memory: every tensor a function returns is owned by the innermost *scope*,
 * a thread-local autorelease pool:
 *
 *     awl_scope_begin();
 *     awl_tensor *h = awl_tensor_binary(AWL_BINARY_MUL, x, w);  // owned by the scope
 *     awl_tensor *y = awl_keep(awl_tensor_unary(AWL_UNARY_EXP, h, 0)); // handed outward
 *     awl_scope_end();                                            // h freed here
 *     ...
 *     awl_release(y);        // no enclosing scope: the caller owned y
 *
 * Outside every scope, the caller owns what a function returns and releases
 * it. awl_retain/awl_release keep long-lived tensors (parameters, optimizer
 * state) regardless of scopes.
 *
 * This header is the raw layer: nothing here records autograd history. Most
 * code calls the differentiable ops of autograd/autograd.h (awl_add,
 * awl_matmul, ...), which are built on the awl_tensor_* functions below.
 * The creation functions (awl_zeros, awl_randn, ...) make leaf tensors and
 * are used directly.
 *
 * Failure follows common/error.h: NULL (or a negative status) with a message
 * naming the function and the shapes; a NULL input gives NULL silently.
 */
#ifndef AWL_TENSOR_TENSOR_H
#define AWL_TENSOR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/backend.h"
#include "common/dtype.h"
#include "common/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A shape literal: awl_zeros(AWL_SHAPE(2, 3), AWL_F32, "cpu"). */
#define AWL_SHAPE(...)                                                                             \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }
/* A list of axes: awl_sum(x, AWL_DIMS(0, 2), true). */
#define AWL_DIMS(...)                                                                              \
    (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]) { __VA_ARGS__ }

/* A device: a backend and an index ("cuda:1" is the cuda backend, index 1). */
typedef struct awl_device {
    const awl_backend *backend;
    int index;
} awl_device;

/* Reference-counted device memory shared by a tensor and its views. */
typedef struct awl_storage {
    int refcount;
    void *data;
    size_t nbytes;
    awl_device device;
    int role;    /* its awl_memory_role (the ledger); set through the API */
    int saved;   /* graph nodes keeping it for backward */
    int counted; /* the role its bytes are counted under (tensor/storage.c) */
    uint64_t version; /* writes in place so far (awl_tensor_version) */
} awl_storage;

/* The part of an autograd graph node the tensor layer needs in order to drop
 * its reference; autograd/ defines the rest (struct awl_node). */
typedef struct awl_node_base {
    int refcount;
    const char *name; /* the op that made it: "mul" */
    void (*destroy)(struct awl_node_base *self);
} awl_node_base;

typedef struct awl_tensor awl_tensor;

/* Called when a leaf's gradient is complete for one backward pass. */
typedef void (*awl_grad_hook_fn)(awl_tensor *leaf, void *user);

typedef struct awl_grad_hook {
    awl_grad_hook_fn fn;
    void *user;
} awl_grad_hook;

/* Read the fields freely; change them only through the API. */
struct awl_tensor {
    int refcount;
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    int64_t strides[AWL_MAX_DIMS]; /* in elements; 0 = broadcast           */
    int64_t offset;                /* first element's index in storage      */
    awl_dtype dtype;
    awl_storage *storage;

    /* autograd (see autograd/autograd.h) */
    bool requires_grad;
    awl_tensor *grad;                /* accumulated gradient of a leaf         */
    awl_node_base *grad_fn;          /* the node that made it, NULL for leaves */
    awl_node_base *grad_accumulator; /* weak: a leaf's accumulate node       */
    int n_hooks;
    awl_grad_hook *hooks;
};

/* ---- devices ---------------------------------------------------------------- */

/* Parses "cpu", "cuda", "cuda:1" into a device. Fails when no backend of that
 * name is registered or the index is out of range. */
int awl_device_parse(const char *name, awl_device *out);

/* Whether two devices are the same one. */
bool awl_device_equal(awl_device a, awl_device b);

/* True when `name` parses and the device is present. */
bool awl_device_available(const char *name);

/* Writes "cpu" or "cuda:0" into buf and returns buf (a host-memory backend's
 * one device has no index). */
const char *awl_device_name(awl_device device, char *buf, size_t size);

/* A tensor's device, as a name in buf (convenience over awl_device_name). */
const char *awl_tensor_device_name(const awl_tensor *t, char *buf, size_t size);
/* Whether t's storage is host memory the CPU reads directly (its backend's
 * host_memory: the CPU backend's and the student's), so that
 * t->storage->data may be handed to host code. */
bool awl_tensor_is_host(const awl_tensor *t);

/* Number of threads CPU kernels use (OpenMP and OpenBLAS together); until
 * set, the count the CPU backend starts with (OMP_NUM_THREADS, or the
 * cores). */
void awl_set_num_threads(int n);
int awl_get_num_threads(void);

/* Like torch.set_float32_matmul_precision: "highest" (the default) computes
 * float32 matmuls in float32; "high" lets backends use a faster, less exact
 * mode (TF32 tensor cores on CUDA; no change on the CPU). */
int awl_set_float32_matmul_precision(const char *precision);

/* Sets a backend's named setting for the device's backend, such as
 * ("cuda", "attention", "simt"): the CUDA attention kernels' rung. Returns 0,
 * or AWL_ERR_INVALID with a message for a name or value it does not know. */
int awl_device_set_option(const char *device, const char *name, const char *value);

/* Runs each required primitive of the device's backend once, on a few
 * elements, and counts those that answer AWL_ERR_NOT_IMPLEMENTED (or have
 * no entry): a student backend still being written. Writes one line per
 * missing primitive ("  matmul (milestone 5: ...)") into report (size
 * bytes, may be 0). Whether the others compute correctly is awl-check's
 * question, not this one's. Returns the count, or a negative status. */
int awl_device_missing_primitives(const char *device, char *report, size_t size);

/* Waits for all queued work on a device ("cuda:0"); a no-op on the CPU. */
int awl_synchronize(const char *device);

/* The stream awl queues a device's work on, in call order, into *stream:
 * a cudaStream_t for "cuda:N" (record events on it with that device
 * current), NULL for the CPU, whose work is done when each call returns.
 * For libraries that queue device work of their own and order it after
 * awl's kernels with an event (dist/nccl.c). 0, or negative for an unknown
 * device. */
int awl_device_stream(const char *device, void **stream);

/* Whether fused backend kernels may be used (on by default): off, every op
 * composes from primitives, which is what the tests compare the two paths
 * with. A process-wide setting; returns the previous one. */
bool awl_set_fused_kernels(bool on);
bool awl_fused_kernels_enabled(void);

/* ---- scopes and reference counts -------------------------------------------- */

void awl_scope_begin(void);
/* Releases every tensor created in the scope that was not kept. */
void awl_scope_end(void);
/* Hands t to the enclosing scope, or to the caller when there is none, and
 * returns it. A t the current scope does not own gains a reference instead.
 * NULL in, NULL out. */
awl_tensor *awl_keep(awl_tensor *t);
/* One more / one less reference. Releasing the last one frees the tensor,
 * dropping its storage, gradient and graph node references. */
awl_tensor *awl_retain(awl_tensor *t);
void awl_release(awl_tensor *t);
/* Depth of the scope stack (0 outside every scope). */
int awl_scope_depth(void);
/* Takes t's reference out of the current scope and returns it: the caller
 * now owns that reference (a graph node keeping a tensor it created). */
awl_tensor *awl_take(awl_tensor *t);
/* Gives the current scope one reference the caller owned (a tensor made in
 * an inner scope and retained across its end). NULL in, NULL out. */
awl_tensor *awl_adopt(awl_tensor *t);

/* ---- creation (leaf tensors) ----------------------------------------------- */

/* Uninitialised memory. device: "cpu", "cuda:0", ...; NULL means "cpu". */
awl_tensor *awl_empty(int ndim, const int64_t *shape, awl_dtype dtype, const char *device);
awl_tensor *awl_zeros(int ndim, const int64_t *shape, awl_dtype dtype, const char *device);
awl_tensor *awl_ones(int ndim, const int64_t *shape, awl_dtype dtype, const char *device);
awl_tensor *awl_full(int ndim, const int64_t *shape, double value, awl_dtype dtype,
                     const char *device);
/* 1-D: start, start + step, ... while < stop (> stop for a negative step). */
awl_tensor *awl_arange(double start, double stop, double step, awl_dtype dtype, const char *device);
/* Uniform in [0, 1) and standard normal, from the global generator. */
awl_tensor *awl_rand(int ndim, const int64_t *shape, awl_dtype dtype, const char *device);
awl_tensor *awl_randn(int ndim, const int64_t *shape, awl_dtype dtype, const char *device);
/* A copy of host data laid out row-major in `dtype`. */
awl_tensor *awl_from_data(const void *data, int ndim, const int64_t *shape, awl_dtype dtype,
                          const char *device);
/* Same shape, dtype and device as t. */
awl_tensor *awl_empty_like(const awl_tensor *t);
awl_tensor *awl_zeros_like(const awl_tensor *t);
awl_tensor *awl_ones_like(const awl_tensor *t);
awl_tensor *awl_full_like(const awl_tensor *t, double value);

/* ---- reading back ------------------------------------------------------------ */

int64_t awl_numel(const awl_tensor *t);
/* Copies t's elements, row-major, into dst (nbytes >= numel * dtype size). */
int awl_to_host(const awl_tensor *t, void *dst, size_t nbytes);
/* The value of a one-element tensor, as a double (NaN after an error). */
double awl_item(const awl_tensor *t);
/* True when t's elements are row-major without gaps. */
bool awl_is_contiguous(const awl_tensor *t);
/* Whether two tensors have equal shapes. */
bool awl_same_shape(const awl_tensor *a, const awl_tensor *b);
/* Whether t's shape is the last t->ndim axes of of's (t repeats over the
 * others). */
bool awl_trailing_shape(const awl_tensor *t, const awl_tensor *of);
/* "(2,3,4)" into buf; returns buf. */
const char *awl_shape_str(const awl_tensor *t, char *buf, size_t size);
const char *awl_format_shape(int ndim, const int64_t *shape, char *buf, size_t size);
/* Normalises a possibly negative axis of a tensor with ndim axes into *out;
 * records an error naming op when it is out of range. */
int awl_normalize_dim(const char *op, int dim, int ndim, int *out);

/* PyTorch-style repr: tensor([[0.1000, 0.2000], ...], requires_grad=True).
 * awl_repr writes at most size bytes (always terminated) and returns the
 * length the whole repr needs. */
size_t awl_repr(const awl_tensor *t, char *buf, size_t size);
void awl_print(const awl_tensor *t);
void awl_fprint(FILE *f, const awl_tensor *t);

/* ---- random numbers ------------------------------------------------------------ */

/* The global generator is a (seed, offset) pair for the Philox stream
 * (common/philox.h). Seeding resets the offset to 0. */
void awl_manual_seed(uint64_t seed);
void awl_rng_get_state(uint64_t *seed, uint64_t *offset);
void awl_rng_set_state(uint64_t seed, uint64_t offset);
/* Reserves the counter blocks for n elements and returns the offset they
 * start at (for ops such as dropout that draw through a kernel). */
uint64_t awl_rng_reserve(uint64_t n);

/* ---- memory statistics ------------------------------------------------------- */

typedef struct awl_memory_stats {
    int64_t in_use;      /* bytes held by live storages                    */
    int64_t peak;        /* highest in_use since the last reset            */
    int64_t reserved;    /* bytes the backend holds (>= in_use with a cache) */
    int64_t allocations; /* storages allocated since the program began     */
    int64_t live;        /* storages alive now                             */
} awl_memory_stats;

int awl_memory_get_stats(const char *device, awl_memory_stats *out);
/* Sets the peak to the bytes in use now (and the ledger's maxima and
 * figures at the peak to the figures now). */
int awl_memory_reset_peak(const char *device);

/* The memory ledger: every storage is counted under one role, so the bytes
 * in use split exactly into what they are for. A storage is a temporary
 * until tagged; the library tags parameters (nn's parameter lists),
 * gradients (the engine, awl_set_grad, DDP's buckets) and optimizer state
 * (the optimizers), and a temporary that a graph node keeps for backward
 * counts as a saved activation while some node keeps it. */
typedef enum awl_memory_role {
    AWL_MEMORY_TEMPORARY,
    AWL_MEMORY_PARAMETER,
    AWL_MEMORY_GRADIENT,
    AWL_MEMORY_OPTIMIZER,
    AWL_MEMORY_ACTIVATION,
    AWL_MEMORY_ROLE_COUNT
} awl_memory_role;

/* "temporaries", "parameters", "gradients", "optimizer state", "saved
 * activations". */
const char *awl_memory_role_name(awl_memory_role role);

typedef struct awl_memory_ledger {
    int64_t now[AWL_MEMORY_ROLE_COUNT];     /* bytes held now, by role                   */
    int64_t max[AWL_MEMORY_ROLE_COUNT];     /* the most each role held since the reset    */
    int64_t at_peak[AWL_MEMORY_ROLE_COUNT]; /* by role when in_use reached the peak       */
    int64_t peak;                           /* the peak of in_use since the reset         */
    int64_t cached_free;                    /* reserved - in use: the allocator's reserve */
} awl_memory_ledger;

int awl_memory_get_ledger(const char *device, awl_memory_ledger *out);
/* Counts t's storage (shared by all its views) under role from now on;
 * NULL is a no-op. Tagging AWL_MEMORY_ACTIVATION is an error: that role
 * follows from awl_tensor_saved. */
int awl_tensor_set_memory_role(awl_tensor *t, awl_memory_role role);
/* The role t's storage counts under now (a saved temporary is an
 * activation). */
awl_memory_role awl_tensor_memory_role(const awl_tensor *t);
/* A graph node starts (+1) or stops (-1) keeping t for backward: while
 * some node keeps a temporary's storage, it counts as a saved activation. */
void awl_tensor_saved(awl_tensor *t, int delta);

/* ---- raw views (no autograd; share storage) ------------------------------------ */

/* A view with explicit shape and strides (elements) at `offset` into t's
 * storage; the caller guarantees it stays inside the storage. */
awl_tensor *awl_tensor_as_strided(awl_tensor *t, int ndim, const int64_t *shape,
                                  const int64_t *strides, int64_t offset);
/* One dimension may be -1 (inferred). A view when the strides allow it,
 * otherwise a contiguous copy. */
awl_tensor *awl_tensor_reshape(awl_tensor *t, int ndim, const int64_t *shape);
/* dims is a permutation of 0..ndim-1; negative axes count from the end. */
awl_tensor *awl_tensor_permute(awl_tensor *t, const int *dims);
awl_tensor *awl_tensor_transpose(awl_tensor *t, int dim0, int dim1);
/* Broadcasts size-1 axes (and new leading axes) to `shape`; -1 keeps a size. */
awl_tensor *awl_tensor_expand(awl_tensor *t, int ndim, const int64_t *shape);
/* Python's t[..., start:stop:step, ...] along dim. step > 0; negative start
 * and stop count from the end, as in Python, but unlike Python a bound
 * outside [-size, size] is an error ("slice out of range"), not clamped.
 * start >= stop gives an empty view. */
awl_tensor *awl_tensor_slice(awl_tensor *t, int dim, int64_t start, int64_t stop, int64_t step);
/* Removes axis dim, which must have size 1. */
awl_tensor *awl_tensor_squeeze(awl_tensor *t, int dim);
awl_tensor *awl_tensor_unsqueeze(awl_tensor *t, int dim);
/* A contiguous tensor with t's elements: an alias sharing t's storage when
 * t is already contiguous, else a copy. */
awl_tensor *awl_tensor_contiguous(awl_tensor *t);
/* A contiguous copy. */
awl_tensor *awl_tensor_clone(awl_tensor *t);
/* Shares t's storage, shape and strides, without gradient history. */
awl_tensor *awl_tensor_detach(awl_tensor *t);

/* ---- raw compute (no autograd) ------------------------------------------------- */

/* The result has the broadcast shape (NumPy rules) and the inputs' dtype. */
awl_tensor *awl_tensor_unary(awl_unary_op op, awl_tensor *x, double alpha);
awl_tensor *awl_tensor_binary(awl_binary_op op, awl_tensor *a, awl_tensor *b);
awl_tensor *awl_tensor_where(awl_tensor *cond, awl_tensor *a, awl_tensor *b);
/* Reduces over the listed axes (all axes when ndims == 0). */
awl_tensor *awl_tensor_reduce(awl_reduce_op op, awl_tensor *x, int ndims, const int *dims,
                              bool keepdim);
/* NumPy matmul semantics: 1-D operands are promoted and the added axis
 * removed; batch axes broadcast. */
awl_tensor *awl_tensor_matmul(awl_tensor *a, awl_tensor *b);
/* Checks that every element of idx (int32) is in [0, limit). Where the
 * backend checks on the device (awl_tensor_indices_checked_later: CUDA),
 * nothing is copied to the host and a bad index is reported at the next
 * synchronisation as "op: index I out of range for LIMIT what"; elsewhere
 * at once. 0, or negative after an error. */
int awl_tensor_check_indices(awl_tensor *idx, int64_t limit, const char *op, const char *what);
bool awl_tensor_indices_checked_later(const awl_tensor *t);
/* idx int32; see backend.h index_select / index_add (idx values checked). */
awl_tensor *awl_tensor_index_select(awl_tensor *src, awl_tensor *idx);
awl_tensor *awl_tensor_gather(awl_tensor *x, int dim, awl_tensor *idx);
awl_tensor *awl_tensor_concat(int n, awl_tensor *const *ts, int dim);
/* Converts to another dtype (an alias sharing t's storage when equal). */
awl_tensor *awl_tensor_cast(awl_tensor *t, awl_dtype dtype);
/* Copies to another device (an alias sharing t's storage when equal). */
awl_tensor *awl_tensor_to_device(awl_tensor *t, const char *device);

/* ---- raw in-place updates (optimizers, gradient accumulation) --------------- */

/* How many times t's storage has been written in place: by each call below
 * that gets past its checks, and by awl_tensor_adamw_step and
 * awl_tensor_scale (the fused section's writes in place). Every view of
 * a storage shares its count. Autograd records it when a node saves a
 * tensor for backward and refuses to run that node's backward once it has
 * moved (autograd/engine.c), as PyTorch's version counter does. */
uint64_t awl_tensor_version(const awl_tensor *t);

/* dst = src (src broadcast to dst's shape, dtype converted). */
int awl_tensor_copy_(awl_tensor *dst, awl_tensor *src);
int awl_tensor_fill_(awl_tensor *dst, double value);
/* dst = op(x, alpha) / dst = a (op) b, inputs broadcast to dst's shape. */
int awl_tensor_unary_out(awl_unary_op op, awl_tensor *dst, awl_tensor *x, double alpha);
int awl_tensor_binary_out(awl_binary_op op, awl_tensor *dst, awl_tensor *a, awl_tensor *b);
/* dst += a @ b (accumulate) or dst = a @ b, with dst of the result's shape. */
int awl_tensor_matmul_out(awl_tensor *dst, awl_tensor *a, awl_tensor *b, bool accumulate);
/* dst[idx[i], :] += src[i, :] / gather's adjoint along dim. */
int awl_tensor_index_add_(awl_tensor *dst, awl_tensor *idx, awl_tensor *src);
int awl_tensor_scatter_add_(awl_tensor *dst, int dim, awl_tensor *idx, awl_tensor *src);
/* Fills with the global generator's stream. */
int awl_tensor_uniform_(awl_tensor *dst, double low, double high);
int awl_tensor_normal_(awl_tensor *dst, double mean, double std);

/* ---- fused kernels (tensor/fused.c) -------------------------------------------- */

/* The optional fused kernels of backends/backend.h, on tensors. Each returns
 * 0, or AWL_ERR_UNSUPPORTED without a message when it cannot run (fused
 * kernels switched off, the device lacks the kernel or the dtype, a layout
 * the kernel does not read), and the caller then composes the computation
 * from ordinary ops; any other failure is a negative status with a message.
 * The shapes and dtypes are those of the backend.h entry of the same name,
 * with any leading axes allowed where the kernel takes (rows, C): those
 * tensors must be contiguous. Outputs are written, not allocated. */

/* Whether kernel can run for tensors like `like` (fused kernels on, and
 * like's device computes it in like's dtype): the cheap question to ask
 * before preparing a call. */
bool awl_fused_available(awl_kernel kernel, const awl_tensor *like);

/* The arguments of the attention kernels beyond the tensors, in a struct so
 * that a new one is added here and where it is used, not to every caller's
 * argument list. */
typedef struct awl_attention_args {
    double scale; /* applied to q k^T */
    bool causal;
    /* NULL or p == 0 for none; else the attention weights' dropout, drawn
     * as backend.h's attention_forward says (the backward gets the same) */
    const awl_dropout_args *dropout;
} awl_attention_args;

int awl_tensor_softmax_forward(awl_tensor *out, awl_tensor *x, bool log);
int awl_tensor_softmax_backward(awl_tensor *dx, awl_tensor *dy, awl_tensor *y, bool log);
/* weight, bias, dweight, dbias may be NULL; so may dx_add, x's shape and
 * dtype, added to dx as it is written, and dx_copy, x's shape in bfloat16
 * for a float32 x, dx rounded as it is written (backend.h). */
int awl_tensor_layernorm_forward(awl_tensor *out, awl_tensor *mean, awl_tensor *rstd, awl_tensor *x,
                                 awl_tensor *weight, awl_tensor *bias, double eps);
/* sum = x + dropout(h) (d NULL: none), then out, mean, rstd the
 * LayerNorm of sum, in one kernel (backend.h's dropout_add_layernorm). */
int awl_tensor_dropout_add_layernorm(awl_tensor *sum, awl_tensor *out, awl_tensor *mean,
                                     awl_tensor *rstd, awl_tensor *x, awl_tensor *h,
                                     awl_tensor *weight, awl_tensor *bias, double eps,
                                     const awl_dropout_args *d);
int awl_tensor_layernorm_backward(awl_tensor *dx, awl_tensor *dweight, awl_tensor *dbias,
                                  awl_tensor *dy, awl_tensor *x, awl_tensor *weight,
                                  awl_tensor *mean, awl_tensor *rstd, awl_tensor *dx_add,
                                  awl_tensor *dx_copy);
/* logits (..., V); targets, loss, lse and dloss of numel / V elements
 * (dloss may be a broadcast vector). */
int awl_tensor_cross_entropy_forward(awl_tensor *loss, awl_tensor *lse, awl_tensor *logits,
                                     awl_tensor *targets, int ignore_index);
int awl_tensor_cross_entropy_backward(awl_tensor *dlogits, awl_tensor *dloss, awl_tensor *logits,
                                      awl_tensor *lse, awl_tensor *targets, int ignore_index);
/* Both at once (the backend's cross_entropy_forward_backward): loss and lse
 * as the forward writes them, dlogits as the backward would from dloss. */
int awl_tensor_cross_entropy_forward_backward(awl_tensor *loss, awl_tensor *lse,
                                              awl_tensor *dlogits, awl_tensor *dloss,
                                              awl_tensor *logits, awl_tensor *targets,
                                              int ignore_index);
/* q, k, v, out and their gradients (B, H, T, D) with a contiguous last axis
 * (any strides along B, H, T); lse (B, H, T) float32. */
int awl_tensor_attention_forward(awl_tensor *out, awl_tensor *lse, awl_tensor *q, awl_tensor *k,
                                 awl_tensor *v, const awl_attention_args *args);
int awl_tensor_attention_backward(awl_tensor *dq, awl_tensor *dk, awl_tensor *dv, awl_tensor *dout,
                                  awl_tensor *q, awl_tensor *k, awl_tensor *v, awl_tensor *out,
                                  awl_tensor *lse, const awl_attention_args *args);
/* out (M, N) = a (M, K) @ b (K, N) + bias (N). */
int awl_tensor_matmul_bias(awl_tensor *out, awl_tensor *a, awl_tensor *b, awl_tensor *bias);
/* pre (M, N) = a (M, K) @ b (K, N) + bias (N) (bias may be NULL) and out =
 * gelu(pre), in the product where the backend has it (backend.h). */
int awl_tensor_matmul_bias_gelu(awl_tensor *out, awl_tensor *pre, awl_tensor *a, awl_tensor *b,
                                awl_tensor *bias);
/* out (M, N) float32 = a (M, K) @ b (K, N) with a and b bfloat16, the
 * float32 sums not rounded to bfloat16 (backend.h's matmul_wide); and, where
 * a_row_sums is not NULL, a_row_sums (M) float32 = the sums of a's rows in
 * the same call (AWL_ERR_UNSUPPORTED where the backend cannot give them:
 * call again without). */
int awl_tensor_matmul_wide(awl_tensor *out, awl_tensor *a_row_sums, awl_tensor *a, awl_tensor *b);
/* out (M, N) = (a (M, K) @ b (K, N)) * gelu'(pre (M, N)). */
int awl_tensor_matmul_gelu_backward(awl_tensor *out, awl_tensor *a, awl_tensor *b, awl_tensor *pre);
int awl_tensor_gelu_backward(awl_tensor *dx, awl_tensor *dy, awl_tensor *x);
/* out = in with draw d's dropout mask applied (common/dropout.h), out and in
 * of one shape and dtype, out contiguous; 0 < d->p < 1. A bfloat16 out of a
 * float32 in is the dropout of in cast to bfloat16, in one pass where the
 * backend has it (backend.h), else AWL_ERR_UNSUPPORTED. */
int awl_tensor_dropout(awl_tensor *out, awl_tensor *in, const awl_dropout_args *d);
/* out = x + h with draw d's dropout mask applied to h (NULL: none), h cast
 * to out's dtype; out and x of one dtype, all three of one shape and
 * contiguous; 0 < d->p < 1 where d is given. */
int awl_tensor_dropout_add(awl_tensor *out, awl_tensor *x, awl_tensor *h,
                           const awl_dropout_args *d);
/* out = x + h with draw d's dropout mask applied to the sum; h's shape is
 * x's last axes (h repeats over the others); out, x, h of one dtype and
 * contiguous; 0 < d->p < 1. */
int awl_tensor_add_dropout(awl_tensor *out, awl_tensor *x, awl_tensor *h,
                           const awl_dropout_args *d);
/* One AdamW step over params[0..n) with their grads and moments, all of
 * params[0]'s device and dtype. casts: NULL, or n contiguous bfloat16
 * tensors of the parameters' sizes on their device, which get the new
 * values rounded to bfloat16 (backend.h's awl_adamw_args.casts; args's own
 * casts field is ignored). */
int awl_tensor_adamw_step(int n, awl_tensor *const *params, awl_tensor *const *grads,
                          awl_tensor *const *m, awl_tensor *const *v, awl_tensor *const *casts,
                          const float *weight_decay, const awl_adamw_args *args);
/* out (a float64 scalar) = the sum of the squares of every element of
 * xs[0..n), all of xs[0]'s device and dtype. */
int awl_tensor_sum_squares(int n, awl_tensor *const *xs, awl_tensor *out);
/* xs[i] *= factor in place for i < n, all of xs[0]'s device and dtype. */
int awl_tensor_scale(int n, awl_tensor *const *xs, double factor);
/* outs[i] = xs[i] converted to dtype (new contiguous tensors owned by the
 * current scope, the bits of awl_tensor_cast) for i < n, all of xs[0]'s
 * device: one backend cast_many call where the device has it for the
 * dtypes, a copy per tensor otherwise. On failure no outs are left. */
int awl_tensor_cast_many(int n, awl_tensor *const *xs, awl_dtype dtype, awl_tensor **outs);

/* Whether the device computes kernel (op, dtype): awl_backend_supports for
 * the device's backend; false when device does not parse (no error is
 * recorded). */
bool awl_device_supports(const char *device, awl_kernel kernel, int op, awl_dtype dtype);

/* ---- for tools and tests that drive a backend directly -------------------------- */

/* Library code above tensor/ never does (scripts/check_layers.sh). */

/* The view of t that kernels receive. */
awl_view awl_tensor_view(const awl_tensor *t);
/* t's backend and device index. */
const awl_backend *awl_tensor_backend(const awl_tensor *t);
int awl_tensor_device_index(const awl_tensor *t);
/* Whether two tensors live on the same device. */
bool awl_same_device(const awl_tensor *a, const awl_tensor *b);
/* Checks that two tensors live on the same device; records an error naming
 * `op` otherwise. */
int awl_check_same_device(const char *op, const awl_tensor *a, const awl_tensor *b);
/* A new, uninitialised tensor on the same device as `like`. */
awl_tensor *awl_tensor_new_on(const awl_tensor *like, int ndim, const int64_t *shape,
                              awl_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
