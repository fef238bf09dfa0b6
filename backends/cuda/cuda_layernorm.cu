/*
 * backends/cuda/cuda_layernorm.cu - LayerNorm forward and backward.
 *
 * One warp per row (rows of C, a GPT's C being 128 to 1024): the warp reads
 * the row with 16-byte loads where aligned and reduces with shuffles, so no
 * shared memory or block barrier sits on the forward path. The mean and the
 * biased variance are two passes over the row (the second hits L1), which is
 * as exact as Welford and simpler. The float32 mean and rstd that are saved
 * are also the ones used to normalise, as in the CPU backend, so forward and
 * backward agree exactly.
 *
 * Backward, with xhat = (x - mean) rstd and g = dy * weight:
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)) [+ dx_add],
 *   dweight = sum over rows of dy xhat,  dbias = sum over rows of dy.
 * dweight and dbias must be deterministic, so no atomics: every warp adds its
 * rows into its own slice of shared memory (columns lane, lane + 32, ...), a
 * block then sums its warps in warp order into one partial row of a scratch
 * buffer (LN_BLOCKS x 2C floats), and a second launch sums those partials
 * over blocks in an order fixed by the shapes. The number of blocks is a constant, not a
 * function of the chip, so the result does not depend on the GPU either.
 *
 * Rows that fit (C a multiple of 4 floats / 8 bf16, up to 1024 floats or
 * 2048 bf16 forward, 768 floats or 192 x 8 bf16 backward, 16-byte aligned)
 * take a register path: each lane loads its 16-byte packs of the row once,
 * keeps them in registers for both reductions and the output, and, in the
 * backward, keeps its columns' dweight/dbias partials in registers across
 * all its rows. Other rows take the generic kernels, which re-read the row.
 * dx_add, when given, is the gradient x already has from its other
 * consumers (a residual connection's): read once and added as dx is
 * written, where a separate addition would read dx back and write it again.
 * dx_copy, when given (a float32 x), is dx again rounded to bfloat16, the
 * copy a bfloat16 branch of the residual stream reads
 * (awl_node_offer_grad_copy): half a write more, where a cast kernel would
 * read dx back and write the copy.
 *
 * Dtypes: float32 and bfloat16 (x, out, weight, bias, dy, dx of one dtype;
 * arithmetic in float), and a float32 x with a bfloat16 out (forward) or dy
 * (backward): a LayerNorm feeding a matmul under autocast, whose output is
 * rounded to bfloat16 on the way out instead of by a cast kernel after it,
 * and whose gradient arrives in bfloat16 (the forward's bits are those of
 * the float32 kernel then a cast: the rounding happens once either way; the
 * backward widens dy exactly and computes the float32 kernel's formula,
 * equal to it to float32 rounding, since the compiler may contract the two
 * instantiations' multiply-adds differently). mean and rstd are float32 by contract, too coarse for
 * float64 gradient checks, so float64 is AWL_ERR_UNSUPPORTED and composed.
 */
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"

namespace
{

const int LN_WARPS = 8;    /* rows in flight per block of the forward */
/* Blocks of the backward, each a partial row: one wave on an H100 or H200
 * (132 SMs), where the register path fits one block an SM, so that every
 * SM starts and ends its block once (docs/cuda.md). */
const int LN_BLOCKS = 132;
const size_t LN_SMEM = 48 * 1024;

struct ln_vecs {
    const void *w, *b;
    int64_t sw, sb;
    float *mean, *rstd;
    int64_t sm, sr;
};

template <typename T, typename TO>
__global__ void ln_fwd_kernel(TO *out, int64_t so, const T *x, int64_t sx, int64_t rows, int64_t C,
                              float eps, ln_vecs v)
{
    awlc_await_previous_kernel();
    int lane = threadIdx.x % AWLC_WARP, nw = blockDim.x / AWLC_WARP;
    const T *w = (const T *)v.w, *b = (const T *)v.b;
    for (int64_t r = (int64_t)blockIdx.x * nw + threadIdx.x / AWLC_WARP; r < rows;
         r += (int64_t)gridDim.x * nw) {
        const T *xr = x + r * sx;
        float s = 0;
        awlc_row_visit_by(xr, C, lane, AWLC_WARP, [&](int64_t, T a) { s += awlc_cast<float>(a); });
        float mu = awlc_warp_sum(s) / (float)C;
        float ss = 0;
        awlc_row_visit_by(xr, C, lane, AWLC_WARP, [&](int64_t, T a) {
            float d = awlc_cast<float>(a) - mu;
            ss += d * d;
        });
        ss = awlc_warp_sum(ss);
        float m = mu, rs = 1.0f / sqrtf(ss / (float)C + eps);
        if (lane == 0) {
            v.mean[r * v.sm] = m;
            v.rstd[r * v.sr] = rs;
        }
        TO *y = out + r * so;
        for (int64_t j = lane; j < C; j += AWLC_WARP) {
            float a = (awlc_cast<float>(xr[j]) - m) * rs;
            if (w) a *= awlc_cast<float>(w[j * v.sw]);
            if (b) a += awlc_cast<float>(b[j * v.sb]);
            y[j] = awlc_cast<TO>(a);
        }
    }
}

/* The register path: a row of C = 32 * NP * V elements at most (V per
 * 16-byte pack), every pack loaded once into the lane that owns it; lane l
 * owns packs l, l + 32, ... of every row. Needs 16-byte aligned rows and
 * unit-stride weight and bias (out's packs are V elements of TO: 8 bytes
 * for a bfloat16 out of a float32 x). */
/* The rest of a row on the register path, once the lane's packs are in
 * xv (s: the lane's sum of them): mean and rstd (saved), then out = (x -
 * mean) rstd weight + bias, weight and bias of x's dtype T. */
template <typename T, typename TO, int NP>
__device__ __forceinline__ void ln_reg_row(TO *out, int64_t so, int64_t r, int64_t C, float eps,
                                           const ln_vecs &v, const float (&xv)[NP][16 / sizeof(T)],
                                           float s)
{
    const int V = 16 / sizeof(T);
    typedef awlc_pack<T, V> P;
    typedef awlc_pack<TO, V> PO;
    int lane = threadIdx.x % AWLC_WARP, np = (int)(C / V);
    float m = awlc_warp_sum(s) / (float)C, ss = 0;
#pragma unroll
    for (int j = 0; j < NP; j++)
#pragma unroll
        for (int e = 0; e < V; e++) {
            float d = lane + AWLC_WARP * j < np ? xv[j][e] - m : 0.0f;
            ss += d * d;
        }
    float rs = 1.0f / sqrtf(awlc_warp_sum(ss) / (float)C + eps);
    if (lane == 0) {
        v.mean[r * v.sm] = m;
        v.rstd[r * v.sr] = rs;
    }
    PO *yr = (PO *)(out + r * so);
#pragma unroll
    for (int j = 0; j < NP; j++) {
        int p = lane + AWLC_WARP * j;
        if (p >= np) continue;
        P w, b;
        PO o;
        if (v.w) w = ((const P *)v.w)[p];
        if (v.b) b = ((const P *)v.b)[p];
#pragma unroll
        for (int e = 0; e < V; e++) {
            float a = (xv[j][e] - m) * rs;
            if (v.w) a *= awlc_cast<float>(w.v[e]);
            if (v.b) a += awlc_cast<float>(b.v[e]);
            o.v[e] = awlc_cast<TO>(a);
        }
        yr[p] = o;
    }
}

template <typename T, typename TO, int NP>
__global__ void __launch_bounds__(256)
    ln_fwd_reg_kernel(TO *out, int64_t so, const T *x, int64_t sx, int64_t rows, int64_t C,
                      float eps, ln_vecs v)
{
    awlc_await_previous_kernel();
    const int V = 16 / sizeof(T);
    typedef awlc_pack<T, V> P;
    int lane = threadIdx.x % AWLC_WARP, nw = blockDim.x / AWLC_WARP;
    int np = (int)(C / V);
    for (int64_t r = (int64_t)blockIdx.x * nw + threadIdx.x / AWLC_WARP; r < rows;
         r += (int64_t)gridDim.x * nw) {
        const P *xr = (const P *)(x + r * sx);
        float xv[NP][V];
        float s = 0;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int p = lane + AWLC_WARP * j;
            P pk;
            if (p < np) pk = xr[p];
#pragma unroll
            for (int e = 0; e < V; e++) {
                xv[j][e] = p < np ? awlc_cast<float>(pk.v[e]) : 0.0f;
                s += xv[j][e];
            }
        }
        ln_reg_row<T, TO, NP>(out, so, r, C, eps, v, xv, s);
    }
}

/* dropout_add then the register path's LayerNorm, in one pass over rows
 * of a contiguous float32 x and a float32 or bfloat16 h: each lane's
 * packs of sum = x + keep h scale are computed as dropout_add4_kernel
 * computes them (4 elements, one Philox block: block r C / 4 + p of the
 * row-major order, C a multiple of 4), written to sum, and normalised
 * from registers as ln_fwd_reg_kernel normalises the packs it loads: the
 * same bits as the two kernels one after the other, without reading sum
 * back. */
template <typename TH, typename TO, int NP>
__global__ void __launch_bounds__(256)
    dropout_add_ln_kernel(float *sum, TO *out, const float *x, const TH *h, int64_t rows, int64_t C,
                          float eps, ln_vecs v, uint64_t seed, uint64_t offset, uint32_t threshold,
                          bool drop, float scale)
{
    awlc_await_previous_kernel();
    const int V = 4;
    typedef awlc_pack<float, V> P;
    typedef awlc_pack<TH, V> PH;
    int lane = threadIdx.x % AWLC_WARP, nw = blockDim.x / AWLC_WARP;
    int np = (int)(C / V);
    for (int64_t r = (int64_t)blockIdx.x * nw + threadIdx.x / AWLC_WARP; r < rows;
         r += (int64_t)gridDim.x * nw) {
        const P *xr = (const P *)(x + r * C);
        const PH *hr = (const PH *)(h + r * C);
        P *sr = (P *)(sum + r * C);
        float xv[NP][V];
        float s = 0;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int p = lane + AWLC_WARP * j;
            P a, o;
            PH b;
            if (p < np) {
                a = xr[p];
                b = hr[p];
            }
            unsigned keep =
                drop && p < np
                    ? awl_dropout_block_bits(
                          awl_philox4x32(seed, offset + (uint64_t)(r * (C / V) + p)), threshold)
                    : 15u;
#pragma unroll
            for (int e = 0; e < V; e++) {
                float c = p < np ? a.v[e] : 0.0f;
                if (keep >> e & 1u) c += (p < np ? awlc_cast<float>(b.v[e]) : 0.0f) * scale;
                o.v[e] = c;
                xv[j][e] = c;
                s += c;
            }
            if (p < np) sr[p] = o;
        }
        ln_reg_row<float, TO, NP>(out, C, r, C, eps, v, xv, s);
    }
}

/* Backward on the register path: dy and x of a row in registers, the
 * warp's dweight/dbias partials too (a lane always owns the same columns),
 * written to shared memory once at the end. dy's packs are V elements of
 * TG (8 bytes for a bfloat16 dy of a float32 x). */
template <typename T, typename TG, int NP>
__global__ void __launch_bounds__(256)
    ln_bwd_reg_kernel(T *dx, int64_t sdx, const TG *dy, int64_t sdy, const T *x, int64_t sx,
                      int64_t rows, int64_t C, ln_vecs v, float *partial, const T *dadd,
                      int64_t sda, awl_bf16 *dcopy, int64_t sdc)
{
    awlc_await_previous_kernel();
    const int V = 16 / sizeof(T);
    typedef awlc_pack<T, V> P;
    typedef awlc_pack<TG, V> PG;
    extern __shared__ float acc[];
    int lane = threadIdx.x % AWLC_WARP, warp = threadIdx.x / AWLC_WARP;
    int nw = blockDim.x / AWLC_WARP, np = (int)(C / V);
    float w[NP][V], dw[NP][V], db[NP][V];
#pragma unroll
    for (int j = 0; j < NP; j++) {
        int p = lane + AWLC_WARP * j;
        P pk;
        if (v.w && p < np) pk = ((const P *)v.w)[p];
#pragma unroll
        for (int e = 0; e < V; e++) {
            w[j][e] = v.w && p < np ? awlc_cast<float>(pk.v[e]) : 1.0f;
            dw[j][e] = db[j][e] = 0.0f;
        }
    }
    /* The next row's dy, x, mean and rstd are loaded before this row is
     * worked on, so that each warp has two rows' loads in flight: the
     * registers above allow one block (8 warps) an SM, too few rows at a
     * time to cover the memory's latency (0.42 of the copy rate with one,
     * docs/cuda.md). */
    const int64_t step = (int64_t)gridDim.x * nw;
    int64_t r = (int64_t)blockIdx.x * nw + warp;
    PG na[NP];
    P nb[NP];
    float nm = 0.0f, nrs = 0.0f;
    auto load_row = [&](int64_t row) {
        const PG *gr = (const PG *)(dy + row * sdy);
        const P *xr = (const P *)(x + row * sx);
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int p = lane + AWLC_WARP * j;
            if (p < np) {
                na[j] = gr[p];
                nb[j] = xr[p];
            }
        }
        nm = v.mean[row * v.sm];
        nrs = v.rstd[row * v.sr];
    };
    if (r < rows) load_row(r);
    for (; r < rows; r += step) {
        PG ra[NP];
        P rb[NP];
#pragma unroll
        for (int j = 0; j < NP; j++) {
            ra[j] = na[j];
            rb[j] = nb[j];
        }
        const float m = nm, rs = nrs;
        if (r + step < rows) load_row(r + step);
        float g[NP][V], xh[NP][V], sg = 0, sgx = 0;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int p = lane + AWLC_WARP * j;
            const PG &a = ra[j];
            const P &b = rb[j];
#pragma unroll
            for (int e = 0; e < V; e++) {
                float d = p < np ? awlc_cast<float>(a.v[e]) : 0.0f;
                xh[j][e] = p < np ? (awlc_cast<float>(b.v[e]) - m) * rs : 0.0f;
                g[j][e] = d * w[j][e];
                sg += g[j][e];
                sgx += g[j][e] * xh[j][e];
                dw[j][e] += d * xh[j][e];
                db[j][e] += d;
            }
        }
        /* the gradient to add is loaded before the warp's sums, which
         * cover its latency */
        P add[NP];
        if (dadd) {
            const P *ar = (const P *)(dadd + r * sda);
#pragma unroll
            for (int j = 0; j < NP; j++)
                if (lane + AWLC_WARP * j < np) add[j] = ar[lane + AWLC_WARP * j];
        }
        float am = awlc_warp_sum(sg) / (float)C, bm = awlc_warp_sum(sgx) / (float)C;
        P *outr = (P *)(dx + r * sdx);
        typedef awlc_pack<awl_bf16, V> PC; /* dx_copy's: 8 bytes for a float32 dx */
        PC *copyr = dcopy ? (PC *)(dcopy + r * sdc) : NULL;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            int p = lane + AWLC_WARP * j;
            if (p >= np) continue;
            P o;
            PC oc;
#pragma unroll
            for (int e = 0; e < V; e++) {
                float d = rs * (g[j][e] - am - xh[j][e] * bm);
                o.v[e] = awlc_cast<T>(dadd ? d + awlc_cast<float>(add[j].v[e]) : d);
                oc.v[e] = awlc_cast<awl_bf16>(awlc_cast<float>(o.v[e]));
            }
            outr[p] = o;
            if (copyr) copyr[p] = oc;
        }
    }
    if (!partial) return;
#pragma unroll
    for (int j = 0; j < NP; j++) {
        int p = lane + AWLC_WARP * j;
        if (p >= np) continue;
#pragma unroll
        for (int e = 0; e < V; e++) {
            acc[(size_t)warp * 2 * C + p * V + e] = dw[j][e];
            acc[(size_t)warp * 2 * C + C + p * V + e] = db[j][e];
        }
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < 2 * C; j += blockDim.x) {
        float s = 0;
        for (int k = 0; k < nw; k++) s += acc[(size_t)k * 2 * C + j];
        partial[(size_t)blockIdx.x * 2 * C + j] = s;
    }
}

template <typename T, typename TG>
__global__ void ln_bwd_kernel(T *dx, int64_t sdx, const TG *dy, int64_t sdy, const T *x, int64_t sx,
                              int64_t rows, int64_t C, ln_vecs v, float *partial, const T *dadd,
                              int64_t sda, awl_bf16 *dcopy, int64_t sdc)
{
    awlc_await_previous_kernel();
    extern __shared__ float acc[]; /* [warp][2][C]: dweight then dbias */
    int lane = threadIdx.x % AWLC_WARP, warp = threadIdx.x / AWLC_WARP;
    int nw = blockDim.x / AWLC_WARP;
    const T *w = (const T *)v.w;
    float *mine = partial ? acc + (size_t)warp * 2 * C : NULL;
    if (mine)
        for (int64_t j = lane; j < 2 * C; j += AWLC_WARP) mine[j] = 0.0f;
    __syncwarp(); /* lanes zeroed columns that other lanes own below */
    for (int64_t r = (int64_t)blockIdx.x * nw + warp; r < rows; r += (int64_t)gridDim.x * nw) {
        const TG *g = dy + r * sdy;
        const T *xr = x + r * sx;
        float m = v.mean[r * v.sm], rs = v.rstd[r * v.sr];
        float sg = 0, sgx = 0;
        for (int64_t j = lane; j < C; j += AWLC_WARP) {
            float d = awlc_cast<float>(g[j]), xh = (awlc_cast<float>(xr[j]) - m) * rs;
            float gj = w ? d * awlc_cast<float>(w[j * v.sw]) : d;
            sg += gj;
            sgx += gj * xh;
            if (mine) {
                mine[j] += d * xh;
                mine[C + j] += d;
            }
        }
        float a = awlc_warp_sum(sg) / (float)C, bb = awlc_warp_sum(sgx) / (float)C;
        T *d_out = dx + r * sdx;
        awl_bf16 *c_out = dcopy ? dcopy + r * sdc : NULL;
        const T *add = dadd ? dadd + r * sda : NULL;
        for (int64_t j = lane; j < C; j += AWLC_WARP) {
            float d = awlc_cast<float>(g[j]), xh = (awlc_cast<float>(xr[j]) - m) * rs;
            float gj = w ? d * awlc_cast<float>(w[j * v.sw]) : d;
            float o = rs * (gj - a - xh * bb);
            T out = awlc_cast<T>(add ? o + awlc_cast<float>(add[j]) : o);
            d_out[j] = out;
            if (c_out) c_out[j] = awlc_cast<awl_bf16>(awlc_cast<float>(out));
        }
    }
    if (!partial) return;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < 2 * C; j += blockDim.x) {
        float s = 0;
        for (int k = 0; k < nw; k++) s += acc[(size_t)k * 2 * C + j];
        partial[(size_t)blockIdx.x * 2 * C + j] = s;
    }
}

/* dweight[j], dbias[j] = sums of the blocks' partials, in a fixed order:
 * block (32, 16) on 32 of the 2C partial columns; thread y sums blocks
 * y, y + 16, ..., then thread 0 of each column adds the 16 sums in y order.
 * (One thread per column summing all blocks is 512 dependent loads deep.) */
const int PS_Y = 16;

template <typename T>
__global__ void ln_sum_partials(const float *partial, int nblocks, int64_t C, T *dw, int64_t sdw,
                                T *db, int64_t sdb)
{
    awlc_await_previous_kernel();
    __shared__ float part[PS_Y][AWLC_WARP + 1];
    int64_t j = (int64_t)blockIdx.x * AWLC_WARP + threadIdx.x;
    float s = 0;
    if (j < 2 * C)
        for (int k = threadIdx.y; k < nblocks; k += PS_Y) s += partial[(size_t)k * 2 * C + j];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || j >= 2 * C) return;
    for (int y = 1; y < PS_Y; y++) s += part[y][threadIdx.x];
    if (j < C) {
        if (dw) dw[j * sdw] = awlc_cast<T>(s);
    } else if (db) {
        db[(j - C) * sdb] = awlc_cast<T>(s);
    }
}

/* Row starts of a (rows, C) view all 16-byte aligned. */
bool reg_aligned(const awl_view *v, int64_t row_stride)
{
    size_t es = awl_dtype_size(v->dtype);
    return (((uintptr_t)v->data + (uintptr_t)(v->offset * (int64_t)es)) & 15u) == 0 &&
           (row_stride * (int64_t)es) % 16 == 0;
}

/* Packs per lane (1, 2, 3, 4, 6 or 8) when the register path applies: C a
 * multiple of the 16-byte pack and at most 256 packs, x's rows, weight and
 * bias 16-byte aligned with unit stride; else 0. */
template <typename T> int reg_packs(int64_t C, const awl_view *x, int64_t sx, const ln_vecs &v)
{
    const int64_t V = 16 / sizeof(T);
    if (C % V != 0 || C / V > 8 * AWLC_WARP || !reg_aligned(x, sx)) return 0;
    if ((v.w && (v.sw != 1 || ((uintptr_t)v.w & 15u))) ||
        (v.b && (v.sb != 1 || ((uintptr_t)v.b & 15u))))
        return 0;
    int np = (int)((C / V + AWLC_WARP - 1) / AWLC_WARP);
    return np == 5 ? 6 : np == 7 ? 8 : np;
}

/* Views shared by forward and backward; AWL_ERR_UNSUPPORTED when a layout
 * or dtype is not handled. */
int ln_setup(const awl_view *x, const awl_view *mean, const awl_view *rstd, const awl_view *weight,
             const awl_view *bias, int64_t *rows, int64_t *C, int64_t *sx, ln_vecs *v)
{
    if ((x->dtype != AWL_F32 && x->dtype != AWL_BF16) || !awlc_rows_of(x, rows, C, sx) ||
        mean->dtype != AWL_F32 || rstd->dtype != AWL_F32 || !awlc_vector_of(mean, *rows, &v->sm) ||
        !awlc_vector_of(rstd, *rows, &v->sr))
        return AWL_ERR_UNSUPPORTED;
    v->mean = awlc_ptr<float>(mean);
    v->rstd = awlc_ptr<float>(rstd);
    v->w = v->b = NULL;
    v->sw = v->sb = 0;
    size_t es = awl_dtype_size(x->dtype);
    if (weight) {
        if (weight->dtype != x->dtype || !awlc_vector_of(weight, *C, &v->sw))
            return AWL_ERR_UNSUPPORTED;
        v->w = (const char *)weight->data + weight->offset * es;
    }
    if (bias) {
        if (bias->dtype != x->dtype || !awlc_vector_of(bias, *C, &v->sb))
            return AWL_ERR_UNSUPPORTED;
        v->b = (const char *)bias->data + bias->offset * es;
    }
    return AWL_OK;
}

bool same_rows(const awl_view *v, awl_dtype dt, int64_t rows, int64_t C, int64_t *stride)
{
    int64_t r, c;
    return v->dtype == dt && awlc_rows_of(v, &r, &c, stride) && r == rows && c == C;
}

/* The forward for x of T and out of TO: the register path where it applies,
 * else the generic kernel. */
template <typename T, typename TO>
int ln_forward_as(const awl_view *out, int64_t so, const awl_view *x, int64_t sx, int64_t rows,
                  int64_t C, float eps, const ln_vecs &v)
{
    unsigned grid = (unsigned)std::min<int64_t>((rows + LN_WARPS - 1) / LN_WARPS, 1 << 30);
    int np = reg_packs<T>(C, x, sx, v) && reg_aligned(out, so) ? reg_packs<T>(C, x, sx, v) : 0;
    TO *o = awlc_ptr<TO>(out);
    const T *xp = awlc_ptr<T>(x);
    const unsigned th = LN_WARPS * AWLC_WARP;
#define LN_FWD_ARGS o, so, xp, sx, rows, C, eps, v
    switch (np) {
    case 1: awlc_launch(ln_fwd_reg_kernel<T, TO, 1>, grid, th, 0, LN_FWD_ARGS); break;
    case 2: awlc_launch(ln_fwd_reg_kernel<T, TO, 2>, grid, th, 0, LN_FWD_ARGS); break;
    case 3: awlc_launch(ln_fwd_reg_kernel<T, TO, 3>, grid, th, 0, LN_FWD_ARGS); break;
    case 4: awlc_launch(ln_fwd_reg_kernel<T, TO, 4>, grid, th, 0, LN_FWD_ARGS); break;
    case 6: awlc_launch(ln_fwd_reg_kernel<T, TO, 6>, grid, th, 0, LN_FWD_ARGS); break;
    case 8: awlc_launch(ln_fwd_reg_kernel<T, TO, 8>, grid, th, 0, LN_FWD_ARGS); break;
    default: awlc_launch(ln_fwd_kernel<T, TO>, grid, th, 0, LN_FWD_ARGS);
    }
#undef LN_FWD_ARGS
    return awlc_check_launch("layernorm_forward");
}

/* The backward for x and dx of T and dy of TG, then dweight and dbias (T)
 * from the blocks' partials. */
template <typename T, typename TG>
int ln_backward_as(const awl_view *dx, int64_t sdx, const awl_view *dy, int64_t sdy,
                   const awl_view *x, int64_t sx, int64_t rows, int64_t C, const ln_vecs &v,
                   int warps, int nblocks, size_t smem, float *partial, const awl_view *dweight,
                   int64_t sdw, const awl_view *dbias, int64_t sdb, const awl_view *dx_add,
                   int64_t sda, const awl_view *dx_copy, int64_t sdc)
{
    /* Five register rows of NP * V floats each: past 24 the compiler
     * spills, so wider rows take the generic kernel. */
    int np = reg_packs<T>(C, x, sx, v) && reg_aligned(dx, sdx) && reg_aligned(dy, sdy) &&
                     (!dx_add || reg_aligned(dx_add, sda)) &&
                     (!dx_copy || reg_aligned(dx_copy, sdc))
                 ? reg_packs<T>(C, x, sx, v)
                 : 0;
    if (np * (int)(16 / sizeof(T)) > 24) np = 0;
    T *d = awlc_ptr<T>(dx);
    const TG *gy = awlc_ptr<TG>(dy);
    const T *xp = awlc_ptr<T>(x), *add = dx_add ? awlc_ptr<T>(dx_add) : NULL;
    awl_bf16 *copy = dx_copy ? awlc_ptr<awl_bf16>(dx_copy) : NULL;
    const unsigned th = warps * AWLC_WARP;
#define LN_BWD_ARGS d, sdx, gy, sdy, xp, sx, rows, C, v, partial, add, sda, copy, sdc
    switch (np) {
    case 1: awlc_launch(ln_bwd_reg_kernel<T, TG, 1>, nblocks, th, smem, LN_BWD_ARGS); break;
    case 2: awlc_launch(ln_bwd_reg_kernel<T, TG, 2>, nblocks, th, smem, LN_BWD_ARGS); break;
    case 3: awlc_launch(ln_bwd_reg_kernel<T, TG, 3>, nblocks, th, smem, LN_BWD_ARGS); break;
    case 4: awlc_launch(ln_bwd_reg_kernel<T, TG, 4>, nblocks, th, smem, LN_BWD_ARGS); break;
    case 6: awlc_launch(ln_bwd_reg_kernel<T, TG, 6>, nblocks, th, smem, LN_BWD_ARGS); break;
    default: awlc_launch(ln_bwd_kernel<T, TG>, nblocks, th, smem, LN_BWD_ARGS);
    }
#undef LN_BWD_ARGS
    AWLC_TRY_STATUS(awlc_check_launch("layernorm_backward"));
    if (!partial) return AWL_OK;
    unsigned gs = (unsigned)((2 * C + AWLC_WARP - 1) / AWLC_WARP);
    awlc_launch(ln_sum_partials<T>, gs, dim3(AWLC_WARP, PS_Y), 0, partial, nblocks, C,
                dweight ? awlc_ptr<T>(dweight) : NULL, sdw, dbias ? awlc_ptr<T>(dbias) : NULL, sdb);
    return awlc_check_launch("layernorm_backward partials");
}

/* A bfloat16 out (or dy) of a float32 x: autocast's LayerNorm feeding a
 * matmul. */
bool rounds_to_bf16(const awl_view *x, const awl_view *other)
{
    return x->dtype == AWL_F32 && other->dtype == AWL_BF16;
}

} // namespace

int awlc_layernorm_forward(const awl_view *out, const awl_view *mean, const awl_view *rstd,
                           const awl_view *x, const awl_view *weight, const awl_view *bias,
                           double eps)
{
    int64_t rows, C, sx, so;
    ln_vecs v;
    const bool mixed = rounds_to_bf16(x, out);
    if (ln_setup(x, mean, rstd, weight, bias, &rows, &C, &sx, &v) != AWL_OK ||
        !same_rows(out, mixed ? AWL_BF16 : x->dtype, rows, C, &so))
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(out->data));
    if (rows == 0 || C == 0) return AWL_OK;
    const float e = (float)eps;
    auto run = mixed                ? ln_forward_as<float, awl_bf16>
               : x->dtype == AWL_F32 ? ln_forward_as<float, float>
                                     : ln_forward_as<awl_bf16, awl_bf16>;
    return run(out, so, x, sx, rows, C, e, v);
}

int awlc_dropout_add_layernorm(const awl_view *sum, const awl_view *out, const awl_view *mean,
                               const awl_view *rstd, const awl_view *x, const awl_view *h,
                               const awl_view *weight, const awl_view *bias, double eps,
                               const awl_dropout_args *dropout)
{
    int64_t rows, C, sx, ss, so, sh;
    ln_vecs v;
    /* x and sum float32; h float32 or bfloat16 (autocast's branch); out
     * float32 or bfloat16 (autocast's LayerNorm feeding a matmul) */
    if (x->dtype != AWL_F32 ||
        ln_setup(x, mean, rstd, weight, bias, &rows, &C, &sx, &v) != AWL_OK ||
        !same_rows(sum, AWL_F32, rows, C, &ss) || (h->dtype != AWL_F32 && h->dtype != AWL_BF16) ||
        !same_rows(h, h->dtype, rows, C, &sh) ||
        (out->dtype != AWL_F32 && out->dtype != AWL_BF16) ||
        !same_rows(out, out->dtype, rows, C, &so))
        return AWL_ERR_UNSUPPORTED;
    /* the register path only, on contiguous rows (the Philox blocks follow
     * the row-major order) */
    const int np = reg_packs<float>(C, x, sx, v);
    if (np == 0 || sx != C || ss != C || sh != C || so != C || !reg_aligned(sum, ss) ||
        !reg_aligned(out, so) || !reg_aligned(h, sh))
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(out->data));
    if (rows == 0) return AWL_OK;
    unsigned grid = (unsigned)std::min<int64_t>((rows + LN_WARPS - 1) / LN_WARPS, 1 << 30);
    const unsigned th = LN_WARPS * AWLC_WARP;
    const bool drop = dropout && dropout->p > 0.0;
    const uint64_t seed = drop ? dropout->seed : 0, offset = drop ? dropout->offset : 0;
    const uint32_t threshold = drop ? awl_dropout_threshold(dropout->p) : 0;
    const float scale = drop ? (float)awl_dropout_scale(dropout->p) : 1.0f;
    auto launch = [&](auto htag, auto otag) -> int {
        typedef decltype(htag) TH;
        typedef decltype(otag) TO;
        float *sp = awlc_ptr<float>(sum);
        TO *op = awlc_ptr<TO>(out);
        const float *xp = awlc_ptr<float>(x);
        const TH *hp = awlc_ptr<TH>(h);
        const float e = (float)eps;
#define DAL_ARGS sp, op, xp, hp, rows, C, e, v, seed, offset, threshold, drop, scale
        switch (np) {
        case 1: awlc_launch(dropout_add_ln_kernel<TH, TO, 1>, grid, th, 0, DAL_ARGS); break;
        case 2: awlc_launch(dropout_add_ln_kernel<TH, TO, 2>, grid, th, 0, DAL_ARGS); break;
        case 3: awlc_launch(dropout_add_ln_kernel<TH, TO, 3>, grid, th, 0, DAL_ARGS); break;
        case 4: awlc_launch(dropout_add_ln_kernel<TH, TO, 4>, grid, th, 0, DAL_ARGS); break;
        case 6: awlc_launch(dropout_add_ln_kernel<TH, TO, 6>, grid, th, 0, DAL_ARGS); break;
        default: awlc_launch(dropout_add_ln_kernel<TH, TO, 8>, grid, th, 0, DAL_ARGS); break;
        }
#undef DAL_ARGS
        return awlc_check_launch("dropout_add_layernorm");
    };
    const bool h16 = h->dtype == AWL_BF16, o16 = out->dtype == AWL_BF16;
    return h16 ? (o16 ? launch(awl_bf16(), awl_bf16()) : launch(awl_bf16(), float()))
               : (o16 ? launch(float(), awl_bf16()) : launch(float(), float()));
}

int awlc_layernorm_backward(const awl_view *dx, const awl_view *dweight, const awl_view *dbias,
                            const awl_view *dy, const awl_view *x, const awl_view *weight,
                            const awl_view *mean, const awl_view *rstd, const awl_view *dx_add,
                            const awl_view *dx_copy)
{
    int64_t rows, C, sx, sdx, sdy, sdw = 0, sdb = 0, sda = 0, sdc = 0;
    ln_vecs v;
    const bool mixed = rounds_to_bf16(x, dy);
    if (ln_setup(x, mean, rstd, weight, NULL, &rows, &C, &sx, &v) != AWL_OK ||
        !same_rows(dx, x->dtype, rows, C, &sdx) ||
        !same_rows(dy, mixed ? AWL_BF16 : x->dtype, rows, C, &sdy) ||
        (dx_add && !same_rows(dx_add, x->dtype, rows, C, &sda)) ||
        (dx_copy && (x->dtype != AWL_F32 || !same_rows(dx_copy, AWL_BF16, rows, C, &sdc))) ||
        (dweight && (dweight->dtype != x->dtype || !awlc_vector_of(dweight, C, &sdw))) ||
        (dbias && (dbias->dtype != x->dtype || !awlc_vector_of(dbias, C, &sdb))))
        return AWL_ERR_UNSUPPORTED;
    bool partials = dweight || dbias;
    int warps = partials ? (int)std::min<int64_t>(8, (int64_t)(LN_SMEM / (8 * (size_t)C))) : 8;
    if (warps < 1) return AWL_ERR_UNSUPPORTED; /* C > 6144: composed instead */
    AWLC_TRY_STATUS(awlc_enter(dx->data));
    if (rows == 0 || C == 0) {
        int st = AWL_OK;
        if (dweight) st = awlc_fill(dweight, 0.0);
        if (st == AWL_OK && dbias) st = awlc_fill(dbias, 0.0);
        return st;
    }
    int nblocks = (int)std::min<int64_t>((rows + warps - 1) / warps, LN_BLOCKS);
    size_t smem = partials ? (size_t)warps * 2 * C * sizeof(float) : 0;
    size_t pbytes = (size_t)nblocks * 2 * C * sizeof(float);
    float *partial = NULL;
    if (partials) {
        partial = (float *)awlc_scratch_alloc(pbytes);
        if (!partial) return AWL_ERR_OOM;
    }
    /* the kernels' one signature, by the dtypes: x (and dx), then dy */
    auto run = mixed                ? ln_backward_as<float, awl_bf16>
               : x->dtype == AWL_F32 ? ln_backward_as<float, float>
                                     : ln_backward_as<awl_bf16, awl_bf16>;
    int st = run(dx, sdx, dy, sdy, x, sx, rows, C, v, warps, nblocks, smem, partial, dweight, sdw,
                 dbias, sdb, dx_add, sda, dx_copy, sdc);
    if (partial) awlc_scratch_free(partial, pbytes);
    return st;
}
