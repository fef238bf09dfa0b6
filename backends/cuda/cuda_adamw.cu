/*
 * backends/cuda/cuda_adamw.cu - one AdamW step over many parameters.
 *
 * A GPT has a few dozen to a few hundred parameter tensors, many of them
 * tiny (biases, LayerNorm weights): one launch per tensor would cost more in
 * launch gaps than in work. So the tensors go, up to ADAM_MAX at a time, into
 * a table passed by value as the kernel's argument (about 1.4 KB, well under
 * the 4 KB parameter limit): blockIdx.y picks the tensor, blockIdx.x strides
 * over its elements, 4 floats per load where all four arrays are 16-byte
 * aligned. A 124M-parameter model takes 5 launches with no host-device
 * copies and no synchronisation.
 *
 * The arithmetic is the CPU backend's, operation for operation, with every
 * product and sum explicitly rounded (__fmul_rn, __fadd_rn) so the compiler
 * cannot contract them into FMAs: the same inputs give bit-identical updates
 * on both backends. With t = args->step:
 *   p = p (1 - lr wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 */
#include <math.h>

#include "backends/cuda/cuda_common.cuh"

namespace
{

const int ADAM_MAX = 32;
const int ADAM_THREADS = 256;

struct adam_table {
    float *p[ADAM_MAX];
    const float *g[ADAM_MAX];
    float *m[ADAM_MAX];
    float *v[ADAM_MAX];
    int64_t numel[ADAM_MAX];
    float decay[ADAM_MAX];
    float b1, b2, step_size, inv_bc2_sqrt, eps;
};

__device__ __forceinline__ void adam_one(const adam_table &t, float decay, float &p, float g,
                                         float &m, float &v)
{
    float pe = __fmul_rn(p, decay);
    float me = __fadd_rn(__fmul_rn(t.b1, m), __fmul_rn(1.0f - t.b1, g));
    float ve = __fadd_rn(__fmul_rn(t.b2, v), __fmul_rn(__fmul_rn(1.0f - t.b2, g), g));
    m = me;
    v = ve;
    float denom = __fadd_rn(__fmul_rn(sqrtf(ve), t.inv_bc2_sqrt), t.eps);
    p = __fsub_rn(pe, __fdiv_rn(__fmul_rn(t.step_size, me), denom));
}

__global__ void adamw_kernel(adam_table t)
{
    int k = blockIdx.y;
    float *p = t.p[k], *m = t.m[k], *v = t.v[k];
    const float *g = t.g[k];
    int64_t n = t.numel[k], step = (int64_t)gridDim.x * blockDim.x;
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (((uintptr_t)p | (uintptr_t)m | (uintptr_t)v | (uintptr_t)g) % 16 == 0) {
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
        }
        done = nv * 4;
    }
    for (int64_t i = done + first; i < n; i += step)
        adam_one(t, t.decay[k], p[i], g[i], m[i], v[i]);
}

bool plain_f32(const awl_view *v, int64_t n)
{
    return v->dtype == AWL_F32 && awl_view_numel(v) == n && awl_view_is_contiguous(v);
}

} // namespace

int awlc_adamw_step(int n, const awl_view *params, const awl_view *grads, const awl_view *m,
                    const awl_view *v, const float *weight_decay, const awl_adamw_args *args)
{
    for (int i = 0; i < n; i++) {
        int64_t c = awl_view_numel(&params[i]);
        if (!plain_f32(&params[i], c) || !plain_f32(&grads[i], c) || !plain_f32(&m[i], c) ||
            !plain_f32(&v[i], c))
            return AWL_ERR_UNSUPPORTED;
    }
    if (n == 0) return AWL_OK;
    AWLC_TRY_STATUS(awlc_enter(params[0].data));
    const double t = (double)args->step;
    adam_table tab;
    tab.b1 = args->beta1;
    tab.b2 = args->beta2;
    tab.eps = args->eps;
    tab.step_size = (float)(args->lr / (1.0 - pow(args->beta1, t)));
    tab.inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(args->beta2, t)));
    for (int start = 0; start < n; start += ADAM_MAX) {
        int count = n - start < ADAM_MAX ? n - start : ADAM_MAX;
        int64_t most = 1;
        for (int j = 0; j < count; j++) {
            int i = start + j;
            tab.p[j] = awlc_ptr<float>(&params[i]);
            tab.g[j] = awlc_ptr<float>(&grads[i]);
            tab.m[j] = awlc_ptr<float>(&m[i]);
            tab.v[j] = awlc_ptr<float>(&v[i]);
            tab.numel[j] = awl_view_numel(&params[i]);
            tab.decay[j] = 1.0f - args->lr * weight_decay[i];
            if (tab.numel[j] > most) most = tab.numel[j];
        }
        unsigned gx = awlc_grid_for((most + 3) / 4, ADAM_THREADS);
        adamw_kernel<<<dim3(gx, count), ADAM_THREADS>>>(tab);
        AWLC_TRY_STATUS(awlc_check_launch("adamw_step"));
    }
    return AWL_OK;
}
