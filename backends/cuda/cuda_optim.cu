/*
 * backends/cuda/cuda_optim.cu - the optimizer's kernels over many tensors:
 * one AdamW step, gradient clipping's sum of squares and scaling, and
 * autocast's casts of the weights to bfloat16.
 *
 * A GPT has a few dozen to a few hundred parameter tensors, many of them
 * tiny (biases, LayerNorm weights): one launch per tensor would cost more in
 * launch gaps than in work. So the tensors go, up to ADAM_MAX at a time, into
 * a table passed by value as the kernel's argument (about 3.6 KB, under the
 * 4 KB parameter limit): each tensor gets a run of blocks in proportion to
 * its size, which stride over its elements, 4 floats per load where the
 * arrays are 16-byte aligned. A 124M-parameter model (148 tensors) takes 3
 * launches with no host-device copies and no synchronisation.
 *
 * The arithmetic is the CPU backend's, operation for operation, with every
 * product and sum explicitly rounded (__fmul_rn, __fadd_rn) so the compiler
 * cannot contract them into FMAs: the same inputs give bit-identical updates
 * on both backends. With t = args->step and g = grad * args->grad_scale:
 *   p = p (1 - lr wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * With args->casts the same pass also writes each new p rounded to
 * bfloat16 (2 bytes more a parameter), which the next bf16 forward reads
 * instead of casting the weights (nn/autocast.c's kept casts).
 */
#include <math.h>

#include "backends/cuda/cuda_common.cuh"

namespace
{

const int ADAM_MAX = 64;

/* One AdamW launch's tensors. Tensor k gets blocks [first_block[k],
 * first_block[k + 1]) of a 1-D grid, as many as its size asks for
 * (blocks_for, as the clipping kernels below), so a bias costs one block
 * and the blocks share the elements evenly. */
struct adam_table {
    float *p[ADAM_MAX];
    const float *g[ADAM_MAX];
    float *m[ADAM_MAX];
    float *v[ADAM_MAX];
    awl_bf16 *c[ADAM_MAX]; /* the parameters' bfloat16 copies (args->casts), or NULL */
    int64_t numel[ADAM_MAX];
    float decay[ADAM_MAX];
    int first_block[ADAM_MAX + 1];
    int count;
    float b1, b2, step_size, inv_bc2_sqrt, eps;
    float grad_scale; /* awl_adamw_args's: each gradient times this first */
};
static_assert(sizeof(adam_table) <= 4096, "a kernel's parameters fit in 4 KB");

__device__ __forceinline__ void adam_one(const adam_table &t, float decay, float &p, float grad,
                                         float &m, float &v)
{
    float g = __fmul_rn(grad, t.grad_scale);
    float pe = __fmul_rn(p, decay);
    float me = __fadd_rn(__fmul_rn(t.b1, m), __fmul_rn(1.0f - t.b1, g));
    float ve = __fadd_rn(__fmul_rn(t.b2, v), __fmul_rn(__fmul_rn(1.0f - t.b2, g), g));
    m = me;
    v = ve;
    float denom = __fadd_rn(__fmul_rn(sqrtf(ve), t.inv_bc2_sqrt), t.eps);
    p = __fsub_rn(pe, __fdiv_rn(__fmul_rn(t.step_size, me), denom));
}

bool plain_f32(const awl_view *v, int64_t n)
{
    return v->dtype == AWL_F32 && awl_view_numel(v) == n && awl_view_is_contiguous(v);
}

/* ---- many tensors, each its own run of blocks ------------------------------------ */

/* Gradient clipping's two kernels take up to MANY_MAX tensors a launch.
 * Tensor k gets blocks [first_block[k], first_block[k + 1]) of the grid, as
 * many as its size asks for (a block per MANY_PER_BLOCK elements, at most
 * MANY_BLOCK_CAP, at least one), and the blocks stride over its groups of
 * four elements. So a bias of 768 costs one block where a 2-D grid sized
 * by the largest tensor would launch hundreds of empty ones, and which
 * thread adds which squares depends on the sizes alone: the sum repeats bit
 * for bit, whatever the device or the tensors' alignment. */
const int MANY_MAX = 128;
const int MANY_THREADS = 256;
const int64_t MANY_PER_BLOCK = 16384;
const int MANY_BLOCK_CAP = 512;

struct many_table {
    float *x[MANY_MAX];
    int64_t numel[MANY_MAX];
    int first_block[MANY_MAX + 1];
    int count;
};

/* The tensor that block b works on, and the block's index among its blocks
 * (a many_table or an adam_table). */
template <typename Table>
__device__ __forceinline__ int tensor_of_block(const Table &t, int b, int *local)
{
    int k = 0, past = t.count; /* first_block[k] <= b < first_block[past] */
    while (past - k > 1) {
        int mid = (k + past) / 2;
        if (t.first_block[mid] <= b)
            k = mid;
        else
            past = mid;
    }
    *local = b - t.first_block[k];
    return k;
}

/* Group j (elements 4j .. 4j + 3) of x, zeros past n; one 16-byte load when
 * the group is whole and x aligned, four loads otherwise: the same values. */
__device__ __forceinline__ float4 load_group(const float *x, int64_t n, int64_t j, bool aligned)
{
    if (aligned && 4 * j + 3 < n) return ((const float4 *)x)[j];
    float4 q;
    q.x = 4 * j < n ? x[4 * j] : 0.0f;
    q.y = 4 * j + 1 < n ? x[4 * j + 1] : 0.0f;
    q.z = 4 * j + 2 < n ? x[4 * j + 2] : 0.0f;
    q.w = 4 * j + 3 < n ? x[4 * j + 3] : 0.0f;
    return q;
}

/* partial[b] = the squares block b of the launch adds (each square exact
 * in float64: a float32 product has at most 48 significant bits). */
__global__ void sum_squares_kernel(many_table t, double *partial)
{
    awlc_await_previous_kernel();
    __shared__ double scratch[32];
    int local, k = tensor_of_block(t, blockIdx.x, &local);
    const float *x = t.x[k];
    const int64_t n = t.numel[k], groups = (n + 3) / 4;
    const int64_t stride = (int64_t)(t.first_block[k + 1] - t.first_block[k]) * blockDim.x;
    const bool aligned = (uintptr_t)x % 16 == 0;
    double s = 0;
    for (int64_t j = (int64_t)local * blockDim.x + threadIdx.x; j < groups; j += stride) {
        float4 q = load_group(x, n, j, aligned);
        s += (double)q.x * q.x;
        s += (double)q.y * q.y;
        s += (double)q.z * q.z;
        s += (double)q.w * q.w;
    }
    s = awlc_block_sum(s, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* *out = the n partial sums, in a fixed order (one block). */
__global__ void sum_partials_kernel(const double *partial, int n, double *out)
{
    awlc_await_previous_kernel();
    __shared__ double scratch[32];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
    s = awlc_block_sum(s, scratch);
    if (threadIdx.x == 0) *out = s;
}

__global__ void scale_kernel(many_table t, float factor)
{
    awlc_await_previous_kernel();
    int local, k = tensor_of_block(t, blockIdx.x, &local);
    float *x = t.x[k];
    const int64_t n = t.numel[k], groups = (n + 3) / 4;
    const int64_t stride = (int64_t)(t.first_block[k + 1] - t.first_block[k]) * blockDim.x;
    const bool aligned = (uintptr_t)x % 16 == 0;
    for (int64_t j = (int64_t)local * blockDim.x + threadIdx.x; j < groups; j += stride) {
        if (aligned && 4 * j + 3 < n) {
            float4 q = ((float4 *)x)[j];
            q.x = __fmul_rn(q.x, factor);
            q.y = __fmul_rn(q.y, factor);
            q.z = __fmul_rn(q.z, factor);
            q.w = __fmul_rn(q.w, factor);
            ((float4 *)x)[j] = q;
        } else {
            for (int64_t e = 4 * j; e < 4 * j + 4 && e < n; e++) x[e] = __fmul_rn(x[e], factor);
        }
    }
}

/* The bfloat16 outputs of a cast_many launch, beside the many_table of its
 * float32 inputs (together 3.6 KB of kernel parameters). */
struct many_bf16 {
    awl_bf16 *y[MANY_MAX];
};

/* Elements 4j .. 4j + 3 of y (8-byte aligned) = q rounded to bfloat16
 * (the copy kernel's rounding), in one 8-byte store. */
__device__ __forceinline__ void put_bf16x4(awl_bf16 *y, int64_t j, float4 q)
{
    awl_bf16 b[4] = {awlc_cast<awl_bf16>(q.x), awlc_cast<awl_bf16>(q.y), awlc_cast<awl_bf16>(q.z),
                     awlc_cast<awl_bf16>(q.w)};
    uint2 packed;
    memcpy(&packed, b, sizeof packed);
    ((uint2 *)y)[j] = packed;
}

/* y[k] = x[k] rounded to bfloat16 (the copy kernel's rounding), four
 * elements a thread: one 16-byte load and one 8-byte store where both are
 * aligned. */
__global__ void cast_bf16_kernel(many_table t, many_bf16 out)
{
    awlc_await_previous_kernel();
    int local, k = tensor_of_block(t, blockIdx.x, &local);
    const float *x = t.x[k];
    awl_bf16 *y = out.y[k];
    const int64_t n = t.numel[k], groups = (n + 3) / 4;
    const int64_t stride = (int64_t)(t.first_block[k + 1] - t.first_block[k]) * blockDim.x;
    const bool aligned = (uintptr_t)x % 16 == 0 && (uintptr_t)y % 8 == 0;
    for (int64_t j = (int64_t)local * blockDim.x + threadIdx.x; j < groups; j += stride) {
        if (aligned && 4 * j + 3 < n) {
            put_bf16x4(y, j, ((const float4 *)x)[j]);
        } else {
            for (int64_t e = 4 * j; e < 4 * j + 4 && e < n; e++) y[e] = awlc_cast<awl_bf16>(x[e]);
        }
    }
}

/* A tensor's blocks: one per MANY_PER_BLOCK elements, at least one, at
 * most cap. */
int blocks_for(int64_t numel, int64_t cap = MANY_BLOCK_CAP)
{
    int64_t b = (numel + MANY_PER_BLOCK - 1) / MANY_PER_BLOCK;
    return b < 1 ? 1 : b > cap ? (int)cap : (int)b;
}

/* An AdamW launch gives a tensor up to ADAM_BLOCK_CAP blocks (a grid's
 * worth several times over: every block of the launch then has about the
 * same work). */
const int64_t ADAM_BLOCK_CAP = 4096;

/* AdamW over the launch's tensors, four elements a thread where all five
 * arrays allow 16-byte (the copy 8-byte) accesses. */
__global__ void adamw_kernel(adam_table t)
{
    awlc_await_previous_kernel();
    int local, k = tensor_of_block(t, blockIdx.x, &local);
    float *p = t.p[k], *m = t.m[k], *v = t.v[k];
    const float *g = t.g[k];
    awl_bf16 *c = t.c[k];
    const int64_t n = t.numel[k];
    const int64_t step = (int64_t)(t.first_block[k + 1] - t.first_block[k]) * blockDim.x;
    const int64_t first = (int64_t)local * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (((uintptr_t)p | (uintptr_t)m | (uintptr_t)v | (uintptr_t)g) % 16 == 0 &&
        (uintptr_t)c % 8 == 0) {
        int64_t nv = n / 4;
        for (int64_t i = first; i < nv; i += step) {
            float4 P = ((float4 *)p)[i], M = ((float4 *)m)[i], Vv = ((float4 *)v)[i];
            float4 G = ((const float4 *)g)[i];
            adam_one(t, t.decay[k], P.x, G.x, M.x, Vv.x);
            adam_one(t, t.decay[k], P.y, G.y, M.y, Vv.y);
            adam_one(t, t.decay[k], P.z, G.z, M.z, Vv.z);
            adam_one(t, t.decay[k], P.w, G.w, M.w, Vv.w);
            ((float4 *)p)[i] = P;
            ((float4 *)m)[i] = M;
            ((float4 *)v)[i] = Vv;
            if (c) put_bf16x4(c, i, P); /* as cast_bf16_kernel writes them */
        }
        done = nv * 4;
    }
    for (int64_t i = done + first; i < n; i += step) {
        adam_one(t, t.decay[k], p[i], g[i], m[i], v[i]);
        if (c) c[i] = awlc_cast<awl_bf16>(p[i]);
    }
}

/* The table of xs[start ..] (up to MANY_MAX tensors); returns its blocks. */
int fill_many(int n, const awl_view *xs, int start, many_table *t)
{
    t->count = n - start < MANY_MAX ? n - start : MANY_MAX;
    t->first_block[0] = 0;
    for (int j = 0; j < t->count; j++) {
        t->x[j] = awlc_ptr<float>(&xs[start + j]);
        t->numel[j] = awl_view_numel(&xs[start + j]);
        t->first_block[j + 1] = t->first_block[j] + blocks_for(t->numel[j]);
    }
    return t->first_block[t->count];
}

bool all_plain_f32(int n, const awl_view *xs)
{
    for (int i = 0; i < n; i++)
        if (!plain_f32(&xs[i], awl_view_numel(&xs[i]))) return false;
    return true;
}

} // namespace

int awlc_sum_squares(int n, const awl_view *xs, const awl_view *out)
{
    if (out->dtype != AWL_F64 || awl_view_numel(out) != 1 || !all_plain_f32(n, xs))
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(out->data));
    int64_t blocks = 0;
    for (int i = 0; i < n; i++) blocks += blocks_for(awl_view_numel(&xs[i]));
    size_t bytes = (size_t)(blocks > 0 ? blocks : 1) * sizeof(double);
    double *partial = (double *)awlc_scratch_alloc(bytes);
    if (!partial) return AWL_ERR_OOM;
    int status = AWL_OK, done = 0;
    for (int start = 0; start < n && status >= 0; start += MANY_MAX) {
        many_table tab;
        int grid = fill_many(n, xs, start, &tab);
        awlc_launch(sum_squares_kernel, grid, MANY_THREADS, 0, tab, partial + done);
        status = awlc_check_launch("sum_squares");
        done += grid;
    }
    if (status >= 0) {
        awlc_launch(sum_partials_kernel, 1, 1024, 0, partial, done, awlc_ptr<double>(out));
        status = awlc_check_launch("sum_squares");
    }
    awlc_scratch_free(partial, bytes);
    return status;
}

int awlc_scale(int n, const awl_view *xs, double factor)
{
    if (!all_plain_f32(n, xs)) return AWL_ERR_UNSUPPORTED;
    if (n == 0) return AWL_OK;
    AWLC_TRY_STATUS(awlc_enter(xs[0].data));
    for (int start = 0; start < n; start += MANY_MAX) {
        many_table tab;
        int grid = fill_many(n, xs, start, &tab);
        awlc_launch(scale_kernel, grid, MANY_THREADS, 0, tab, (float)factor);
        AWLC_TRY_STATUS(awlc_check_launch("scale"));
    }
    return AWL_OK;
}

int awlc_cast_many(int n, const awl_view *outs, const awl_view *xs)
{
    if (!all_plain_f32(n, xs)) return AWL_ERR_UNSUPPORTED;
    for (int i = 0; i < n; i++)
        if (outs[i].dtype != AWL_BF16 || !awl_view_is_contiguous(&outs[i]) ||
            awl_view_numel(&outs[i]) != awl_view_numel(&xs[i]))
            return AWL_ERR_UNSUPPORTED;
    if (n == 0) return AWL_OK;
    AWLC_TRY_STATUS(awlc_enter(xs[0].data));
    for (int start = 0; start < n; start += MANY_MAX) {
        many_table tab;
        many_bf16 out;
        int grid = fill_many(n, xs, start, &tab);
        for (int j = 0; j < tab.count; j++) out.y[j] = awlc_ptr<awl_bf16>(&outs[start + j]);
        awlc_launch(cast_bf16_kernel, grid, MANY_THREADS, 0, tab, out);
        AWLC_TRY_STATUS(awlc_check_launch("cast_many"));
    }
    return AWL_OK;
}

int awlc_adamw_step(int n, const awl_view *params, const awl_view *grads, const awl_view *m,
                    const awl_view *v, const float *weight_decay, const awl_adamw_args *args)
{
    const awl_view *casts = args->casts;
    for (int i = 0; i < n; i++) {
        int64_t c = awl_view_numel(&params[i]);
        if (!plain_f32(&params[i], c) || !plain_f32(&grads[i], c) || !plain_f32(&m[i], c) ||
            !plain_f32(&v[i], c) ||
            (casts && (casts[i].dtype != AWL_BF16 || !awl_view_is_contiguous(&casts[i]) ||
                       awl_view_numel(&casts[i]) != c)))
            return AWL_ERR_UNSUPPORTED;
    }
    if (n == 0) return AWL_OK;
    AWLC_TRY_STATUS(awlc_enter(params[0].data));
    const double t = (double)args->step;
    adam_table tab;
    tab.b1 = args->beta1;
    tab.b2 = args->beta2;
    tab.eps = args->eps;
    tab.grad_scale = args->grad_scale;
    tab.step_size = (float)(args->lr / (1.0 - pow(args->beta1, t)));
    tab.inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(args->beta2, t)));
    for (int start = 0; start < n; start += ADAM_MAX) {
        tab.count = n - start < ADAM_MAX ? n - start : ADAM_MAX;
        tab.first_block[0] = 0;
        for (int j = 0; j < tab.count; j++) {
            int i = start + j;
            tab.p[j] = awlc_ptr<float>(&params[i]);
            tab.g[j] = awlc_ptr<float>(&grads[i]);
            tab.m[j] = awlc_ptr<float>(&m[i]);
            tab.v[j] = awlc_ptr<float>(&v[i]);
            tab.c[j] = casts ? awlc_ptr<awl_bf16>(&casts[i]) : nullptr;
            tab.numel[j] = awl_view_numel(&params[i]);
            tab.decay[j] = 1.0f - args->lr * weight_decay[i];
            tab.first_block[j + 1] = tab.first_block[j] + blocks_for(tab.numel[j], ADAM_BLOCK_CAP);
        }
        awlc_launch(adamw_kernel, tab.first_block[tab.count], MANY_THREADS, 0, tab);
        AWLC_TRY_STATUS(awlc_check_launch("adamw_step"));
    }
    return AWL_OK;
}
