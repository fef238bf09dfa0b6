/*
 * backends/cpu/cpu_internal.h - private pieces shared by the CPU backend's files.
 *
 * The CPU backend is split by concept: the table and settings
 * (cpu_backend.c), memory (cpu_memory.c), the strided iterator (cpu_iter.c),
 * element-wise ops (cpu_elementwise.c), reductions (cpu_reduce.c), matmul
 * (cpu_matmul.c), indexing and random numbers (cpu_index.c), and the fused
 * kernels (cpu_fused.c, cpu_attention.c); the dropout masks' Philox
 * blocks, many at a time, are cpu_philox.h's. This header holds what more
 * than one of them needs: the iterator that walks up to four same-shaped
 * strided views at once, the parallel-size thresholds, and the
 * declarations the table is built from.
 *
 * The iterator is the heart of every element-wise kernel. It drops size-1
 * axes, merges adjacent axes that are contiguous with each other in every
 * operand (so a contiguous tensor of any rank becomes one flat axis, and a
 * broadcast row (1, C) against (N, C) stays two axes), and then hands a typed
 * "segment" function runs along the last axis: n elements, a pointer and an
 * element stride per operand. A segment function tests for unit strides and
 * runs a loop the compiler vectorises; otherwise a plain strided loop. The flat
 * element range is split evenly between OpenMP threads only when it is larger
 * than a grain, so small ops never pay for a parallel region.
 */
#ifndef AWL_BACKENDS_CPU_INTERNAL_H
#define AWL_BACKENDS_CPU_INTERNAL_H

#include <stdint.h>

#include "backends/backend.h"

/* Below this many elements a cheap element-wise op runs on one thread: an
 * OpenMP region costs about a microsecond, 32K adds cost a few. */
#define CPU_GRAIN_CHEAP 32768
/* Ops that call exp/tanh/log per element (or Philox) pay off earlier. */
#define CPU_GRAIN_COSTLY 4096

#define CPU_MAX_OPERANDS 4

/* Several same-shaped strided views walked together. Operand 0 is the output
 * by convention. Strides are in elements; ndim >= 1 even for a scalar. */
typedef struct cpu_iter {
    int ndim;
    int nop;
    int64_t numel;
    int64_t shape[AWL_MAX_DIMS];
    int64_t strides[CPU_MAX_OPERANDS][AWL_MAX_DIMS];
    char *base[CPU_MAX_OPERANDS];
    int64_t elsize[CPU_MAX_OPERANDS];
} cpu_iter;

/* A run of n elements along the iterator's last axis: ptr[k] points at the
 * first element of operand k, stride[k] is its element stride. `flat` is the
 * row-major index of the run's first element (random numbers need it). ctx is
 * the caller's, passed through unchanged. */
typedef void (*cpu_segment_fn)(int64_t n, int64_t flat, char *const *ptr, const int64_t *stride,
                               const void *ctx);

/* Sets up `it` over views[0..nop): every view has views[0]'s shape (callers
 * express broadcasting and gather offsets through strides). */
void awl_cpu_iter_init(cpu_iter *it, int nop, const awl_view *const *views);

/* Calls fn over every element exactly once, in parallel when numel > grain.
 * Row-major element order within each thread's contiguous flat range. */
void awl_cpu_iter_run(const cpu_iter *it, int64_t grain, cpu_segment_fn fn, const void *ctx);

/* Calls fn over the flat element range [begin, end) on the calling thread. */
void awl_cpu_iter_walk(const cpu_iter *it, int64_t begin, int64_t end, cpu_segment_fn fn,
                       const void *ctx);

/* How many threads a job of `work` units should use: 1 below `grain`, never
 * more than OpenMP's current maximum. */
int awl_cpu_threads_for(int64_t work, int64_t grain);

/* The team a parallel region opens for a job split between nt threads: all
 * of OpenMP's threads when nt > 1, and the work goes to the first nt of
 * them (the others go straight to the region's closing barrier). libgomp
 * ends the threads that a region leaves unused (a 4-thread region after a
 * 16-thread one ends 12) and creates them again for the next larger
 * region: with the team sized to each job, a gpt2-124m decoding step on 16
 * threads created 143 threads, and a cpu-medium training step 152. So
 * every region of more than one thread is written
 *
 *     #pragma omp parallel for num_threads(awl_cpu_team(nt)) \
 *         schedule(static, awl_cpu_chunk(n, nt))
 *
 * (n iterations in nt chunks, one per thread), or, for a region that splits
 * the work itself, with num_threads(awl_cpu_team(nt)) and nothing for the
 * threads numbered nt and up. A 1-thread region never touches the team. */
int awl_cpu_team(int nt);

/* Iterations per chunk when n iterations go to nt threads: at most nt
 * chunks (at least 1 iteration, as OpenMP requires). */
static inline int64_t awl_cpu_chunk(int64_t n, int nt)
{
    const int64_t c = nt > 1 ? (n + nt - 1) / nt : n;
    return c > 0 ? c : 1;
}

/* Address of a view's first element. */
static inline char *cpu_view_ptr(const awl_view *v)
{
    return (char *)v->data + v->offset * (int64_t)awl_dtype_size(v->dtype);
}

/* Double -> int32 the way every kernel stores an integer result: NaN gives 0,
 * out-of-range values saturate (a plain cast would be undefined). */
static inline int32_t cpu_double_to_i32(double d)
{
    if (d != d) return 0;
    if (d >= 2147483647.0) return INT32_MAX;
    if (d <= -2147483648.0) return INT32_MIN;
    return (int32_t)d;
}

/* Reads element `i` (a pointer offset in elements) of any dtype as double. */
static inline double cpu_load(awl_dtype dtype, const char *p, int64_t i)
{
    switch (dtype) {
    case AWL_F32: return ((const float *)p)[i];
    case AWL_F64: return ((const double *)p)[i];
    case AWL_I32: return ((const int32_t *)p)[i];
    case AWL_BF16: return awl_bf16_to_float(((const awl_bf16 *)p)[i]);
    default: return 0;
    }
}

/* Writes d into element `i` of any dtype (rounded or saturated). */
static inline void cpu_store(awl_dtype dtype, char *p, int64_t i, double d)
{
    switch (dtype) {
    case AWL_F32: ((float *)p)[i] = (float)d; break;
    case AWL_F64: ((double *)p)[i] = d; break;
    case AWL_I32: ((int32_t *)p)[i] = cpu_double_to_i32(d); break;
    case AWL_BF16: ((awl_bf16 *)p)[i] = awl_float_to_bf16((float)d); break;
    default: break;
    }
}

/* ---- the table's entries, by file ---- */

/* cpu_memory.c: the backend interface's memory functions; free takes the
 * nbytes that alloc was given. */
void *awl_cpu_alloc(int device, size_t nbytes);
void awl_cpu_free(int device, void *ptr, size_t nbytes);
size_t awl_cpu_memory_reserved(int device);
void awl_cpu_empty_cache(int device);

/* cpu_peak.c: the FMA peak of the cores in use, measured once and cached */
double awl_cpu_peak_flops(int device, awl_dtype dtype, bool fast_fp32, char *source, size_t size);

/* cpu_elementwise.c */
int awl_cpu_fill(const awl_view *out, double value);
int awl_cpu_copy(const awl_view *out, const awl_view *in);
int awl_cpu_unary(awl_unary_op op, const awl_view *out, const awl_view *in, double alpha);
int awl_cpu_binary(awl_binary_op op, const awl_view *out, const awl_view *a, const awl_view *b);
int awl_cpu_where(const awl_view *out, const awl_view *cond, const awl_view *a, const awl_view *b);

/* cpu_reduce.c */
int awl_cpu_reduce(awl_reduce_op op, const awl_view *out, const awl_view *in);

/* cpu_matmul.c */
int awl_cpu_matmul(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate);
int awl_cpu_matmul_bias(const awl_view *out, const awl_view *a, const awl_view *b,
                        const awl_view *bias);
int awl_cpu_matmul_bias_gelu(const awl_view *out, const awl_view *pre, const awl_view *a,
                             const awl_view *b, const awl_view *bias);
int awl_cpu_matmul_gelu_backward(const awl_view *out, const awl_view *a, const awl_view *b,
                                 const awl_view *pre);
/* Loads OpenBLAS once (cpu_blas.c); an error naming `caller` when it cannot
 * be loaded. Call it on the thread that reports errors, before any gemm. */
int awl_cpu_blas_load(const char *caller);
/* y (inc incy) = op(A) x (inc incx), A rows x cols row-major (lda), op(A)
 * A^T when trans: cblas_?gemv, which the matmul takes for a product with
 * one row or one column (a decoding step's), where ?gemm would first pack
 * the whole weight matrix. Call after awl_cpu_blas_load. */
void awl_cpu_blas_gemv(awl_dtype dtype, bool trans, int rows, int cols, const void *a, int lda,
                       const void *x, int incx, double beta, void *y, int incy);

/* cpu_index.c */
int awl_cpu_index_select(const awl_view *out, const awl_view *src, const awl_view *idx);
int awl_cpu_index_add(const awl_view *dst, const awl_view *idx, const awl_view *src);
int awl_cpu_gather(const awl_view *out, const awl_view *in, int axis, const awl_view *idx);
int awl_cpu_scatter_add(const awl_view *out, int axis, const awl_view *idx, const awl_view *src);
int awl_cpu_random(const awl_view *out, awl_random_kind kind, uint64_t seed, uint64_t offset,
                   double a, double b);
int awl_cpu_dropout(const awl_view *out, const awl_view *in, const awl_dropout_args *args);

/* cpu_fused.c */
int awl_cpu_softmax_forward(const awl_view *out, const awl_view *in, bool log);
int awl_cpu_softmax_backward(const awl_view *dx, const awl_view *dy, const awl_view *y, bool log);
int awl_cpu_layernorm_forward(const awl_view *out, const awl_view *mean, const awl_view *rstd,
                              const awl_view *x, const awl_view *weight, const awl_view *bias,
                              double eps);
int awl_cpu_layernorm_backward(const awl_view *dx, const awl_view *dweight, const awl_view *dbias,
                               const awl_view *dy, const awl_view *x, const awl_view *weight,
                               const awl_view *mean, const awl_view *rstd, const awl_view *dx_add,
                               const awl_view *dx_copy);
int awl_cpu_cross_entropy_forward(const awl_view *loss, const awl_view *lse, const awl_view *logits,
                                  const awl_view *targets, int ignore_index);
int awl_cpu_cross_entropy_forward_backward(const awl_view *loss, const awl_view *lse,
                                           const awl_view *dlogits, const awl_view *dloss,
                                           const awl_view *logits, const awl_view *targets,
                                           int ignore_index);
int awl_cpu_cross_entropy_backward(const awl_view *dlogits, const awl_view *dloss,
                                   const awl_view *logits, const awl_view *lse,
                                   const awl_view *targets, int ignore_index);
int awl_cpu_gelu_backward(const awl_view *dx, const awl_view *dy, const awl_view *x);
int awl_cpu_add_dropout(const awl_view *out, const awl_view *x, const awl_view *h,
                        const awl_dropout_args *args);
int awl_cpu_dropout_add(const awl_view *out, const awl_view *x, const awl_view *h,
                        const awl_dropout_args *args);
int awl_cpu_adamw_step(int n, const awl_view *params, const awl_view *grads, const awl_view *m,
                       const awl_view *v, const float *weight_decay, const awl_adamw_args *args);
int awl_cpu_sum_squares(int n, const awl_view *xs, const awl_view *out);
int awl_cpu_scale(int n, const awl_view *xs, double factor);

/* cpu_attention.c */
int awl_cpu_attention_forward(const awl_view *out, const awl_view *lse, const awl_view *q,
                              const awl_view *k, const awl_view *v, double scale, bool causal,
                              const awl_dropout_args *dropout);
int awl_cpu_attention_backward(const awl_view *dq, const awl_view *dk, const awl_view *dv,
                               const awl_view *dout, const awl_view *q, const awl_view *k,
                               const awl_view *v, const awl_view *out, const awl_view *lse,
                               double scale, bool causal, const awl_dropout_args *dropout);

#endif
