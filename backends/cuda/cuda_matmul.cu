/*
 * backends/cuda/cuda_matmul.cu - (batched) matrix products through cuBLAS.
 *
 * cuBLAS is column-major; awl's views are strided. A (rows, cols) matrix
 * with strides (s_row, s_col) is a column-major matrix when s_row == 1 (its
 * leading dimension is s_col), and the transpose of one when s_col == 1
 * (leading dimension s_row). So a transposed view is passed as CUBLAS_OP_T
 * in place, never copied. The output must be a plain column-major matrix for
 * cuBLAS; a row-major output C is written as C^T = B^T A^T, the usual
 * operand swap, and a column-major one as C = A B.
 *
 * Batch dimensions are coalesced across out, a and b; the innermost one
 * becomes the stride of cublasGemmStridedBatchedEx (stride 0 broadcasts an
 * operand over the batch), and any outer ones that do not merge are looped on
 * the host. Only a view that cuBLAS cannot describe at all (a zero or odd
 * stride inside a matrix) is first copied into a contiguous scratch buffer.
 *
 * A float32 product that is one matrix (no batch) with sides the kernel
 * takes (M and N multiples of 128, K of 32, 16-byte aligned rows) runs on
 * awl's own tensor-core kernel instead (cuda_gemm_tf32x3.cu: 3xTF32, at
 * least as accurate as sgemm and faster), unless the "fp32_matmul" setting
 * is "sgemm". Other float32 products use CUBLAS_COMPUTE_32F, or
 * CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores with TF32 inputs) once
 * set_matmul_fast_fp32(true) asked for it;
 * bfloat16 multiplies on tensor cores and accumulates in float32; float64
 * uses CUBLAS_COMPUTE_64F. `accumulate` is beta = 1. One cuBLAS handle per
 * device, created on first use, works on the default stream like the rest of
 * the backend.
 *
 * A linear layer's product with its bias (matmul_bias) goes through
 * cuBLASLt instead, whose bias epilogue adds the bias as the product is
 * written: no pass to broadcast the bias into the output first, and no read
 * of it back (beta = 0).
 *
 * The two libraries are opened with dlopen when the first handle is made,
 * not linked: linked, they are mapped and relocated into every process of
 * a CUDA build at start, CPU runs included (150 MB more resident memory for
 * a CPU training run); opened on first use, a process that never multiplies
 * on a GPU never loads them. Their headers give the types; `api` holds the
 * functions this file calls, looked up once.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <mutex>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_gemm_tf32x3.cuh"

namespace
{

/* The functions used, with the library (0: cuBLASLt, 1: cuBLAS) that has
 * them; cublasGemmStridedBatchedEx, which C++ overloads, apart. */
#define BLAS_FUNCTIONS(X)                                                                          \
    X(0, cublasLtCreate)                                                                           \
    X(0, cublasLtMatmul)                                                                           \
    X(0, cublasLtMatmulAlgoGetHeuristic)                                                           \
    X(0, cublasLtMatmulDescCreate)                                                                 \
    X(0, cublasLtMatmulDescDestroy)                                                                \
    X(0, cublasLtMatmulDescSetAttribute)                                                           \
    X(0, cublasLtMatmulPreferenceCreate)                                                           \
    X(0, cublasLtMatmulPreferenceDestroy)                                                          \
    X(0, cublasLtMatmulPreferenceSetAttribute)                                                     \
    X(0, cublasLtMatrixLayoutCreate)                                                               \
    X(0, cublasLtMatrixLayoutDestroy)                                                              \
    X(1, cublasCreate_v2)                                                                          \
    X(1, cublasGetStatusString)

typedef cublasStatus_t (*gemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void *, const void *, cudaDataType, int, long long,
                                  const void *, cudaDataType, int, long long, const void *, void *,
                                  cudaDataType, int, long long, int, cublasComputeType_t,
                                  cublasGemmAlgo_t);

struct blas_api {
#define BLAS_MEMBER(lib, fn) decltype(&::fn) fn;
    BLAS_FUNCTIONS(BLAS_MEMBER)
#undef BLAS_MEMBER
    gemm_fn cublasGemmStridedBatchedEx;
};

blas_api api;
bool api_loaded;

std::mutex handle_mu;
cublasHandle_t handles[AWLC_MAX_DEVICES];
bool fast_fp32 = false;
bool use_tf32x3 = true; /* the "fp32_matmul" setting: "3xtf32" (true) or "sgemm" */

#define BLAS_STR2(x) #x
#define BLAS_STR(x) BLAS_STR2(x)

/* Opens a library by its soname (that of the cuBLAS these headers are
 * from: the loader's search path, then the toolkit's directory the build
 * names in AWL_CUBLAS_DIR) or else its unversioned name. */
void *open_lib(const char *soname, const char *plain)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
#ifdef AWL_CUBLAS_DIR
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", AWL_CUBLAS_DIR, soname);
    if (!lib) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
#endif
    return lib ? lib : dlopen(plain, RTLD_NOW | RTLD_LOCAL);
}

/* Opens the libraries and fills api; under handle_mu. */
int load_api(void)
{
    if (api_loaded) return AWL_OK;
    static const char *const names[2][2] = {
        {"libcublasLt.so." BLAS_STR(CUBLAS_VER_MAJOR), "libcublasLt.so"},
        {"libcublas.so." BLAS_STR(CUBLAS_VER_MAJOR), "libcublas.so"}};
    void *lib[2];
    for (int l = 0; l < 2; l++) {
        lib[l] = open_lib(names[l][0], names[l][1]);
        if (!lib[l])
            return awl_error(AWL_ERR_DEVICE, "awl_cuda matmul: cannot open %s: %s", names[l][0],
                             dlerror());
    }
#define BLAS_LOOKUP(l, fn)                                                                         \
    api.fn = (decltype(api.fn))dlsym(lib[l], #fn);                                                 \
    if (!api.fn)                                                                                   \
        return awl_error(AWL_ERR_DEVICE, "awl_cuda matmul: %s has no %s", names[l][0], #fn);
    BLAS_FUNCTIONS(BLAS_LOOKUP)
    BLAS_LOOKUP(1, cublasGemmStridedBatchedEx)
#undef BLAS_LOOKUP
    api_loaded = true;
    return AWL_OK;
}

int blas_fail(cublasStatus_t st, const char *what)
{
    return awl_error(AWL_ERR_DEVICE, "awl_cuda matmul: %s: %s", what,
                     api.cublasGetStatusString(st));
}

int get_handle(cublasHandle_t *out)
{
    int device = 0;
    AWLC_TRY(cudaGetDevice(&device), "cudaGetDevice");
    std::lock_guard<std::mutex> lock(handle_mu);
    AWLC_TRY_STATUS(load_api());
    if (!handles[device]) {
        cublasStatus_t st = api.cublasCreate_v2(&handles[device]);
        if (st != CUBLAS_STATUS_SUCCESS) {
            handles[device] = NULL;
            return blas_fail(st, "cublasCreate");
        }
    }
    *out = handles[device];
    return AWL_OK;
}

/* How cuBLAS reads a logical (rows, cols) matrix stored with strides
 * (s_row, s_col). */
struct operand {
    bool ok;
    cublasOperation_t op;
    int64_t ld;
};

operand describe(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col)
{
    int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
    operand o = {false, CUBLAS_OP_N, 0};
    int64_t ld = cols == 1 ? r1 : s_col;
    if ((rows == 1 || s_row == 1) && ld >= r1 && ld <= INT_MAX) {
        o.ok = true;
        o.ld = ld;
        return o;
    }
    ld = rows == 1 ? c1 : s_row;
    if ((cols == 1 || s_col == 1) && ld >= c1 && ld <= INT_MAX) {
        o.ok = true;
        o.op = CUBLAS_OP_T;
        o.ld = ld;
    }
    return o;
}

/* A scratch buffer laid out like v with its matrices contiguous (row-major)
 * and, when keep_broadcast, its zero-stride batch dimensions still zero;
 * filled from v when copy_in. */
struct scratch_view {
    awl_view v;
    size_t bytes;
};

int make_dense(const awl_view *src, scratch_view *s, bool keep_broadcast, bool copy_in)
{
    s->v = *src;
    s->v.offset = 0;
    int64_t stride = 1;
    for (int d = src->ndim - 1; d >= 0; d--) {
        bool broadcast = keep_broadcast && d < src->ndim - 2 && src->strides[d] == 0;
        s->v.strides[d] = broadcast ? 0 : stride;
        if (!broadcast) stride *= src->shape[d];
    }
    s->bytes = (size_t)stride * awl_dtype_size(src->dtype);
    s->v.data = awlc_scratch_alloc(s->bytes);
    if (!s->v.data) return AWL_ERR_OOM;
    int st = copy_in ? awlc_copy(&s->v, src) : AWL_OK;
    if (st != AWL_OK) {
        awlc_scratch_free(s->v.data, s->bytes);
        s->v.data = NULL;
    }
    return st;
}

struct gemm_plan {
    cudaDataType_t type;
    cublasComputeType_t compute;
    size_t esize;
};

int plan_for(awl_dtype dt, gemm_plan *p)
{
    switch (dt) {
    case AWL_F32:
        *p = {CUDA_R_32F, fast_fp32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, 4};
        return AWL_OK;
    case AWL_F64: *p = {CUDA_R_64F, CUBLAS_COMPUTE_64F, 8}; return AWL_OK;
    case AWL_BF16: *p = {CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2}; return AWL_OK;
    default:
        return awl_error(AWL_ERR_INVALID, "awl_cuda matmul: dtype %s is not a float dtype",
                         awl_dtype_name(dt));
    }
}

/* A float32 out (M, N) = a (M, K) @ b (K, N) [+ out] [+ bias (N)] on the
 * 3xTF32 kernel, out row-major or (without a bias) column-major, batch
 * dimensions all 1; AWL_ERR_UNSUPPORTED where the kernel does not take it
 * (the caller then goes to cuBLAS). */
int tf32x3_matmul(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate,
                  const awl_view *bias)
{
    int nd = out->ndim;
    if (out->dtype != AWL_F32 || fast_fp32 || !use_tf32x3 || (bias && bias->ndim != 1))
        return AWL_ERR_UNSUPPORTED;
    for (int d = 0; d < nd - 2; d++)
        if (out->shape[d] != 1) return AWL_ERR_UNSUPPORTED;
    const float *pa = (const float *)a->data + a->offset, *pb = (const float *)b->data + b->offset;
    const int64_t *so = out->strides + nd - 2, *sa = a->strides + nd - 2, *sb = b->strides + nd - 2;
    awlc_tf32x3_args g = {};
    g.out = (float *)out->data + out->offset;
    g.K = a->shape[nd - 1];
    g.accumulate = accumulate;
    g.passes = 3;
    if (so[1] == 1) { /* row-major: out = a b */
        g.ldo = so[0], g.M = out->shape[nd - 2], g.N = out->shape[nd - 1];
        g.x = pa, g.xs_m = sa[0], g.xs_k = sa[1];
        g.y = pb, g.ys_k = sb[0], g.ys_n = sb[1];
        if (bias) {
            if (bias->strides[0] != 1 && g.N > 1) return AWL_ERR_UNSUPPORTED;
            g.bias = (const float *)bias->data + bias->offset;
        }
    } else if (so[0] == 1 && !bias) { /* column-major: out^T = b^T a^T, row-major */
        g.ldo = so[1], g.M = out->shape[nd - 1], g.N = out->shape[nd - 2];
        g.x = pb, g.xs_m = sb[1], g.xs_k = sb[0];
        g.y = pa, g.ys_k = sa[1], g.ys_n = sa[0];
    } else {
        return AWL_ERR_UNSUPPORTED;
    }
    if (!awlc_tf32x3_takes(&g)) return AWL_ERR_UNSUPPORTED;
    int splits = awlc_tf32x3_splits(&g, awlc_sm_count());
    size_t bytes = awlc_tf32x3_workspace_bytes(&g, splits);
    float *ws = bytes ? (float *)awlc_scratch_alloc(bytes) : NULL;
    if (bytes && !ws) return AWL_ERR_OOM;
    cudaError_t e = awlc_tf32x3_gemm(&g, splits, ws, 0);
    if (ws) awlc_scratch_free(ws, bytes);
    return e == cudaSuccess ? AWL_OK : awlc_fail(e, "matmul (3xTF32 kernel)");
}

/* out, a, b all representable: runs the products, looping outer batch dims. */
int run_gemm(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate)
{
    int nd = out->ndim;
    int own = tf32x3_matmul(out, a, b, accumulate, NULL);
    if (own != AWL_ERR_UNSUPPORTED) return own;
    int64_t M = out->shape[nd - 2], N = out->shape[nd - 1], K = a->shape[nd - 1];
    gemm_plan plan = {CUDA_R_32F, CUBLAS_COMPUTE_32F, 4};
    AWLC_TRY_STATUS(plan_for(out->dtype, &plan));
    cublasHandle_t h;
    AWLC_TRY_STATUS(get_handle(&h));

    /* Row-major out (the usual case): C^T = B^T A^T; else C = A B. */
    operand oc = describe(N, M, out->strides[nd - 1], out->strides[nd - 2]);
    bool swapped = oc.ok && oc.op == CUBLAS_OP_N;
    operand o1, o2;
    int64_t m, n;
    const awl_view *x1, *x2;
    if (swapped) {
        m = N, n = M, x1 = b, x2 = a;
        o1 = describe(N, K, b->strides[nd - 1], b->strides[nd - 2]);
        o2 = describe(K, M, a->strides[nd - 1], a->strides[nd - 2]);
    } else {
        oc = describe(M, N, out->strides[nd - 2], out->strides[nd - 1]);
        m = M, n = N, x1 = a, x2 = b;
        o1 = describe(M, K, a->strides[nd - 2], a->strides[nd - 1]);
        o2 = describe(K, N, b->strides[nd - 2], b->strides[nd - 1]);
    }
    if (!oc.ok || oc.op != CUBLAS_OP_N || !o1.ok || !o2.ok)
        return awl_error(AWL_ERR_INVALID, "awl_cuda matmul: internal: layout not representable");
    if (m > INT_MAX || n > INT_MAX || K > INT_MAX)
        return awl_error(AWL_ERR_INVALID, "awl_cuda matmul: dimension over 2^31");

    /* Batch dims: coalesce out/x1/x2 together; innermost goes to cuBLAS. */
    awl_view bo = *out, b1 = *x1, b2 = *x2;
    bo.ndim = b1.ndim = b2.ndim = nd - 2;
    const awl_view *views[3] = {&bo, &b1, &b2};
    awlc_layout<3> L;
    int64_t batches = awlc_coalesce<3>(&L, views);
    int inner = L.ndim - 1;
    int64_t count = L.ndim ? L.shape[inner] : 1;
    int64_t so = L.ndim ? L.stride[0][inner] : 0, s1 = L.ndim ? L.stride[1][inner] : 0,
            s2 = L.ndim ? L.stride[2][inner] : 0;
    int64_t outer = batches / (count ? count : 1);

    float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
    double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
    const void *alpha = plan.type == CUDA_R_64F ? (const void *)&alpha_d : (const void *)&alpha_f;
    const void *beta = plan.type == CUDA_R_64F ? (const void *)&beta_d : (const void *)&beta_f;
    for (int64_t ob = 0; ob < outer; ob++) {
        int64_t offs[3] = {0, 0, 0}, q = ob;
        for (int d = inner - 1; d >= 0; d--) {
            int64_t c = q % L.shape[d];
            q /= L.shape[d];
            for (int k = 0; k < 3; k++) offs[k] += c * L.stride[k][d];
        }
        char *pc = (char *)out->data + (out->offset + offs[0]) * plan.esize;
        const char *p1 = (const char *)x1->data + (x1->offset + offs[1]) * plan.esize;
        const char *p2 = (const char *)x2->data + (x2->offset + offs[2]) * plan.esize;
        cublasStatus_t st = api.cublasGemmStridedBatchedEx(
            h, o1.op, o2.op, (int)m, (int)n, (int)K, alpha, p1, plan.type, (int)o1.ld, s1, p2,
            plan.type, (int)o2.ld, s2, beta, pc, plan.type, (int)oc.ld, so, (int)count,
            plan.compute, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(st, "cublasGemmStridedBatchedEx");
    }
    return AWL_OK;
}

bool representable(const awl_view *v, int64_t rows, int64_t cols)
{
    int nd = v->ndim;
    return describe(rows, cols, v->strides[nd - 2], v->strides[nd - 1]).ok;
}

} // namespace

void awlc_set_matmul_fast_fp32(bool on) { fast_fp32 = on; }

int awlc_matmul_set_fp32(const char *value)
{
    if (value && (strcmp(value, "3xtf32") == 0 || strcmp(value, "sgemm") == 0)) {
        use_tf32x3 = strcmp(value, "3xtf32") == 0;
        return AWL_OK;
    }
    return awl_error(AWL_ERR_INVALID, "awl_cuda: fp32_matmul setting '%s' is not 3xtf32 or sgemm",
                     value ? value : "(null)");
}

bool awlc_matmul_fast_fp32(void) { return fast_fp32; }

int awlc_matmul(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    int nd = out->ndim;
    int64_t M = out->shape[nd - 2], N = out->shape[nd - 1], K = a->shape[nd - 1];
    if (awl_view_numel(out) == 0) return AWL_OK;
    if (K == 0) return accumulate ? AWL_OK : awlc_fill(out, 0.0);

    scratch_view ta = {}, tb = {}, tc = {};
    const awl_view *pa = a, *pb = b, *pc = out;
    int st = AWL_OK;
    if (!representable(a, M, K)) {
        st = make_dense(a, &ta, true, true);
        pa = &ta.v;
    }
    if (st == AWL_OK && !representable(b, K, N)) {
        st = make_dense(b, &tb, true, true);
        pb = &tb.v;
    }
    /* The output must be a plain matrix: row-major or column-major with
     * non-overlapping batches. */
    operand oc = describe(M, N, out->strides[nd - 2], out->strides[nd - 1]);
    bool out_ok = oc.ok && oc.op == CUBLAS_OP_N;
    oc = describe(N, M, out->strides[nd - 1], out->strides[nd - 2]);
    out_ok = out_ok || (oc.ok && oc.op == CUBLAS_OP_N);
    for (int d = 0; d < nd - 2; d++)
        if (out->shape[d] > 1 && out->strides[d] == 0) out_ok = false;
    if (st == AWL_OK && !out_ok) {
        st = make_dense(out, &tc, false, accumulate);
        pc = &tc.v;
    }
    if (st == AWL_OK) st = run_gemm(pc, pa, pb, accumulate);
    if (st == AWL_OK && pc != out) st = awlc_copy(out, pc);
    if (ta.v.data) awlc_scratch_free(ta.v.data, ta.bytes);
    if (tb.v.data) awlc_scratch_free(tb.v.data, tb.bytes);
    if (tc.v.data) awlc_scratch_free(tc.v.data, tc.bytes);
    return st;
}

/* ---- out = a @ b + bias: cuBLASLt's bias epilogue --------------------------------- */

namespace
{

cublasLtHandle_t lt_handles[AWLC_MAX_DEVICES];
const size_t LT_WORKSPACE = (size_t)32 << 20;

int lt_fail(cublasStatus_t st, const char *what)
{
    return awl_error(AWL_ERR_DEVICE, "awl_cuda matmul_bias: %s: %s", what,
                     api.cublasGetStatusString(st));
}

int get_lt_handle(cublasLtHandle_t *out, int *device)
{
    AWLC_TRY(cudaGetDevice(device), "cudaGetDevice");
    std::lock_guard<std::mutex> lock(handle_mu);
    AWLC_TRY_STATUS(load_api());
    if (!lt_handles[*device]) {
        cublasStatus_t st = api.cublasLtCreate(&lt_handles[*device]);
        if (st != CUBLAS_STATUS_SUCCESS) {
            lt_handles[*device] = NULL;
            return lt_fail(st, "cublasLtCreate");
        }
    }
    *out = lt_handles[*device];
    return AWL_OK;
}

/* The algorithm cuBLASLt's heuristic picked for one problem, remembered so
 * that a training step does not ask again for each of its linear layers. */
struct lt_key {
    int device;
    cudaDataType_t type, out_type; /* the operands'; the output's (and bias's) */
    cublasComputeType_t compute;
    cublasOperation_t op1, op2;
    int64_t m, n, k, ld1, ld2, ldc;
    int align[3]; /* bytes, of the two operands and the output */
    cublasLtEpilogue_t epilogue;
    int align_aux; /* bytes, of the GELU epilogues' pre-activation (0: none) */
};

struct lt_plan {
    lt_key key;
    cublasLtMatmulAlgo_t algo;
};

const int LT_PLANS = 64;
lt_plan lt_plans[LT_PLANS];
int lt_count, lt_next; /* plans held; the slot the next one takes */

/* Largest power of two up to 256 dividing the address. */
int alignment(const void *p)
{
    int a = 256;
    while (a > 1 && ((uintptr_t)p & (uintptr_t)(a - 1))) a /= 2;
    return a;
}

struct lt_problem {
    lt_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t l1, l2, lc;
};

void lt_destroy(lt_problem *p)
{
    if (p->desc) api.cublasLtMatmulDescDestroy(p->desc);
    if (p->l1) api.cublasLtMatrixLayoutDestroy(p->l1);
    if (p->l2) api.cublasLtMatrixLayoutDestroy(p->l2);
    if (p->lc) api.cublasLtMatrixLayoutDestroy(p->lc);
}

#define LT_TRY(call, what)                                                                         \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) return lt_fail(st_, what);                               \
    } while (0)

/* The descriptors of p's product, its epilogue reading bias and writing or
 * reading aux (each NULL where the epilogue has none), aux laid out as the
 * output. */
int lt_describe(lt_problem *p, const void *bias, const void *aux)
{
    const lt_key &k = p->key;
    cublasLtEpilogue_t epi = k.epilogue;
    LT_TRY(api.cublasLtMatmulDescCreate(&p->desc, k.compute, CUDA_R_32F), "desc");
    LT_TRY(api.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &k.op1,
                                              sizeof k.op1),
           "transa");
    LT_TRY(api.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &k.op2,
                                              sizeof k.op2),
           "transb");
    LT_TRY(api.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                              sizeof epi),
           "epilogue");
    if (bias)
        LT_TRY(api.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias),
               "bias pointer");
    if (aux) {
        int64_t ld = k.ldc;
        LT_TRY(api.cublasLtMatmulDescSetAttribute(
                   p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
               "aux pointer");
        LT_TRY(api.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                  &ld, sizeof ld),
               "aux ld");
    }
    bool n1 = k.op1 == CUBLAS_OP_N, n2 = k.op2 == CUBLAS_OP_N;
    LT_TRY(api.cublasLtMatrixLayoutCreate(&p->l1, k.type, n1 ? k.m : k.k, n1 ? k.k : k.m, k.ld1),
           "a");
    LT_TRY(api.cublasLtMatrixLayoutCreate(&p->l2, k.type, n2 ? k.k : k.n, n2 ? k.n : k.k, k.ld2),
           "b");
    LT_TRY(api.cublasLtMatrixLayoutCreate(&p->lc, k.out_type, k.m, k.n, k.ldc), "c");
    return AWL_OK;
}

/* The cached algorithm for p, asking the heuristic on a miss. AWL_OK,
 * AWL_ERR_UNSUPPORTED when no algorithm fits, or an error. */
int lt_algo(cublasLtHandle_t h, const lt_problem *p, cublasLtMatmulAlgo_t *algo)
{
    {
        std::lock_guard<std::mutex> lock(handle_mu);
        for (int i = 0; i < lt_count; i++)
            if (memcmp(&lt_plans[i].key, &p->key, sizeof p->key) == 0) {
                *algo = lt_plans[i].algo;
                return AWL_OK;
            }
    }
    cublasLtMatmulPreference_t pref;
    LT_TRY(api.cublasLtMatmulPreferenceCreate(&pref), "preference");
    uint64_t ws = LT_WORKSPACE;
    uint32_t al[3] = {(uint32_t)p->key.align[0], (uint32_t)p->key.align[1],
                      (uint32_t)p->key.align[2]};
    api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws);
    api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al[0], sizeof al[0]);
    api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al[1], sizeof al[1]);
    api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al[2], sizeof al[2]);
    api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al[2], sizeof al[2]);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st = api.cublasLtMatmulAlgoGetHeuristic(h, p->desc, p->l1, p->l2, p->lc, p->lc,
                                                           pref, 1, &result, &found);
    api.cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) return AWL_ERR_UNSUPPORTED;
    *algo = result.algo;
    std::lock_guard<std::mutex> lock(handle_mu);
    lt_plans[lt_next] = {p->key, result.algo}; /* the oldest goes when full */
    lt_next = (lt_next + 1) % LT_PLANS;
    if (lt_count < LT_PLANS) lt_count++;
    return AWL_OK;
}

/* out (M, N) row-major = a (M, K) @ b (K, N) through one of cuBLASLt's
 * epilogues: as run_gemm's swapped form, C^T = B^T A^T, whose rows are
 * out's columns, so the epilogue's bias (one value per row of the
 * column-major C) is out's bias per column, and aux (the GELU epilogues'
 * pre-activation, NULL for the others) is laid out as out. BGRADB's bias
 * is an output instead: the sums over K of cuBLAS's B, which is a, one per
 * row of a (M values). out may be wider than a and b (float32 from
 * bfloat16: matmul_wide); the bias is out's dtype. Cases outside the simple
 * one (batched, float64, a layout or alignment cuBLASLt refuses) are
 * AWL_ERR_UNSUPPORTED: the caller then composes. */
int lt_matmul(const awl_view *out, const awl_view *a, const awl_view *b, const awl_view *bias,
              const awl_view *aux, cublasLtEpilogue_t epilogue)
{
    if (out->ndim != 2 || a->ndim != 2 || b->ndim != 2 || (bias && bias->ndim != 1))
        return AWL_ERR_UNSUPPORTED;
    int64_t M = out->shape[0], N = out->shape[1], K = a->shape[1];
    int64_t bias_n = epilogue == CUBLASLT_EPILOGUE_BGRADB ? M : N;
    if (out->dtype == AWL_F64 || M == 0 || N == 0 || K == 0 || out->strides[1] != 1 ||
        out->strides[0] < N || (bias && bias_n > 1 && bias->strides[0] != 1))
        return AWL_ERR_UNSUPPORTED;
    /* the epilogue's pre-activation: out's layout, rows a multiple of 8 apart */
    if (aux && (aux->strides[1] != 1 || aux->strides[0] != out->strides[0] || aux->strides[0] % 8))
        return AWL_ERR_UNSUPPORTED;
    operand o1 = describe(N, K, b->strides[1], b->strides[0]);
    operand o2 = describe(K, M, a->strides[1], a->strides[0]);
    if (!o1.ok || !o2.ok || M > INT_MAX || N > INT_MAX || K > INT_MAX || out->strides[0] > INT_MAX)
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(out->data));
    gemm_plan plan = {CUDA_R_32F, CUBLAS_COMPUTE_32F, 4}, oplan = plan;
    AWLC_TRY_STATUS(plan_for(a->dtype, &plan));
    AWLC_TRY_STATUS(plan_for(out->dtype, &oplan));
    const char *p1 = (const char *)b->data + b->offset * plan.esize;
    const char *p2 = (const char *)a->data + a->offset * plan.esize;
    char *pc = (char *)out->data + out->offset * oplan.esize;
    const char *pb = bias ? (const char *)bias->data + bias->offset * oplan.esize : NULL;
    char *pa = aux ? (char *)aux->data + aux->offset * oplan.esize : NULL;
    if ((pb && alignment(pb) < 16) || (pa && alignment(pa) < 16)) return AWL_ERR_UNSUPPORTED;
    cublasLtHandle_t h;
    lt_problem p = {};
    AWLC_TRY_STATUS(get_lt_handle(&h, &p.key.device));
    p.key.type = plan.type;
    p.key.out_type = oplan.type;
    p.key.compute = plan.compute;
    p.key.op1 = o1.op;
    p.key.op2 = o2.op;
    p.key.m = N;
    p.key.n = M;
    p.key.k = K;
    p.key.ld1 = o1.ld;
    p.key.ld2 = o2.ld;
    p.key.ldc = out->strides[0];
    p.key.align[0] = alignment(p1);
    p.key.align[1] = alignment(p2);
    p.key.align[2] = alignment(pc);
    p.key.epilogue = epilogue;
    p.key.align_aux = pa ? alignment(pa) : 0;
    int st = lt_describe(&p, pb, pa);
    cublasLtMatmulAlgo_t algo;
    if (st == AWL_OK) st = lt_algo(h, &p, &algo);
    void *ws = st == AWL_OK ? awlc_scratch_alloc(LT_WORKSPACE) : NULL;
    if (st == AWL_OK && !ws) st = AWL_ERR_OOM;
    if (st == AWL_OK) {
        float one = 1.0f, zero = 0.0f;
        cublasStatus_t s = api.cublasLtMatmul(h, p.desc, &one, p1, p.l1, p2, p.l2, &zero, pc, p.lc,
                                              pc, p.lc, &algo, ws, LT_WORKSPACE, 0);
        if (s != CUBLAS_STATUS_SUCCESS) st = lt_fail(s, "cublasLtMatmul");
    }
    if (ws) awlc_scratch_free(ws, LT_WORKSPACE);
    lt_destroy(&p);
    return st;
}

} // namespace

/* ---- a bias's gradient: the column sums of a bfloat16 dY ------------------------- */

namespace
{

/* sums[m] (float32) = sum over k of a[m, k], for a bfloat16 a whose m axis
 * has unit stride: a = dY^T, dY a (K rows, M columns) row-major gradient, so
 * the sums are dY's column sums, a linear layer's bias gradient. cuBLASLt's
 * BGRADB epilogue gives the same sums, but as a kernel of its own after the
 * product that reads dY again at about 1.9 TB/s: 1.42 ms of a gpt2-124m
 * bf16 step on an H100, where these two kernels take 1.13 ms (docs/cuda.md).
 *
 * column_sums_part: a block of (32, 8) threads takes 256 columns (each
 * thread 8 neighbours, one 16-byte load a row) and a chunk of the rows,
 * its 8 row lanes each summing every 8th row of the chunk; the lanes are
 * added in shared memory, and the block writes one partial sum per column.
 * column_sums_finish adds a column's partials the same way (8 lanes, each
 * every 8th chunk). The chunks depend on M and K alone, so the sums are the
 * same on every run: as many as make about SUM_BLOCKS blocks (four an SM of
 * an H100 or H200, 132 SMs), but no more than K / SUM_MIN_ROWS rounded up. */
const int SUM_COLS = 256, SUM_LANES = 8, SUM_MIN_ROWS = 64, SUM_BLOCKS = 528;

__global__ void column_sums_part(const awl_bf16 *a, int64_t ld, int64_t M, int64_t K, int64_t chunk,
                                 float *part)
{
    awlc_await_previous_kernel();
    __shared__ float lanes[SUM_LANES][SUM_COLS];
    const int64_t c0 = (int64_t)blockIdx.x * SUM_COLS + threadIdx.x * 8;
    const int64_t k1 = min(K, (int64_t)(blockIdx.y + 1) * chunk);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (c0 < M) {
#pragma unroll 4
        for (int64_t k = (int64_t)blockIdx.y * chunk + threadIdx.y; k < k1; k += SUM_LANES) {
            awlc_pack<awl_bf16, 8> p =
                *reinterpret_cast<const awlc_pack<awl_bf16, 8> *>(a + k * ld + c0);
#pragma unroll
            for (int j = 0; j < 8; j++) acc[j] += awlc_cast<float>(p.v[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) lanes[threadIdx.y][threadIdx.x * 8 + j] = acc[j];
    __syncthreads();
    const int t = threadIdx.y * 32 + threadIdx.x;
    const int64_t c = (int64_t)blockIdx.x * SUM_COLS + t;
    if (c < M) {
        float sum = lanes[0][t];
        for (int y = 1; y < SUM_LANES; y++) sum += lanes[y][t];
        part[(int64_t)blockIdx.y * M + c] = sum;
    }
}

__global__ void column_sums_finish(const float *part, int64_t M, int chunks, float *sums,
                                   int64_t s_sums)
{
    awlc_await_previous_kernel();
    __shared__ float lanes[SUM_LANES][32];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float sum = 0;
    if (c < M)
        for (int i = threadIdx.y; i < chunks; i += SUM_LANES) sum += part[(int64_t)i * M + c];
    lanes[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < M) {
        for (int y = 1; y < SUM_LANES; y++) sum += lanes[y][threadIdx.x];
        sums[c * s_sums] = sum;
    }
}

/* Whether column_sums takes (sums, a): a bfloat16 (M, K) with unit stride
 * along M, M a multiple of 8, its columns 16-byte aligned; float32 sums. */
bool column_sums_take(const awl_view *sums, const awl_view *a)
{
    if (a->dtype != AWL_BF16 || sums->dtype != AWL_F32 || a->ndim != 2 || sums->ndim != 1 ||
        a->shape[0] == 0 || sums->shape[0] != a->shape[0] || a->strides[0] != 1 ||
        a->shape[0] % 8 || a->strides[1] % 8 || a->shape[1] < 1)
        return false;
    const char *p = (const char *)a->data + a->offset * 2;
    return alignment(p) >= 16;
}

int column_sums(const awl_view *sums, const awl_view *a)
{
    const int64_t M = a->shape[0], K = a->shape[1], ld = a->strides[1];
    const int64_t col_blocks = (M + SUM_COLS - 1) / SUM_COLS;
    int64_t chunks = std::max<int64_t>(
        1, std::min((K + SUM_MIN_ROWS - 1) / SUM_MIN_ROWS, SUM_BLOCKS / col_blocks));
    const int64_t chunk = (K + chunks - 1) / chunks;
    chunks = (K + chunk - 1) / chunk;
    const size_t bytes = (size_t)(chunks * M) * sizeof(float);
    float *part = (float *)awlc_scratch_alloc(bytes);
    if (!part) return AWL_ERR_OOM;
    awlc_launch(column_sums_part, dim3((unsigned)col_blocks, (unsigned)chunks), dim3(32, SUM_LANES),
                0, awlc_ptr<awl_bf16>(a), ld, M, K, chunk, part);
    int st = awlc_check_launch("matmul_wide (bias gradient)");
    if (st == AWL_OK) {
        awlc_launch(column_sums_finish, (unsigned)((M + 31) / 32), dim3(32, SUM_LANES), 0, part, M,
                    (int)chunks, awlc_ptr<float>(sums), sums->strides[0]);
        st = awlc_check_launch("matmul_wide (bias gradient)");
    }
    awlc_scratch_free(part, bytes);
    return st;
}

} // namespace

/* ---- out (float32) = a @ b (bfloat16): mixed precision's weight gradients ---------- */

/* One product of 2-D views, out row-major: cuBLAS with bfloat16 inputs and a
 * float32 C, the sums (float32 accumulators, as every bfloat16 product
 * here) stored without rounding to bfloat16. Anything else is declined and
 * the framework rounds instead (a bfloat16 product, then a cast). With
 * a_row_sums, a's rows are summed too: by column_sums after the product
 * where it takes them (a linear layer's dY^T), else by cuBLASLt's BGRADB
 * epilogue (lt_matmul), or the call is declined. */
int awlc_matmul_wide(const awl_view *out, const awl_view *a_row_sums, const awl_view *a,
                     const awl_view *b)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    if (out->ndim != 2 || a->ndim != 2 || b->ndim != 2) return AWL_ERR_UNSUPPORTED;
    if (a_row_sums) {
        if (!column_sums_take(a_row_sums, a))
            return lt_matmul(out, a, b, a_row_sums, NULL, CUBLASLT_EPILOGUE_BGRADB);
        int st = awlc_matmul_wide(out, NULL, a, b);
        return st == AWL_OK ? column_sums(a_row_sums, a) : st;
    }
    int64_t M = out->shape[0], N = out->shape[1], K = a->shape[1];
    if (M == 0 || N == 0) return AWL_OK;
    if (K == 0) return awlc_fill(out, 0.0);
    /* row-major out: C^T (N x M) = B^T A^T, as run_gemm's usual case */
    operand oc = describe(N, M, out->strides[1], out->strides[0]);
    operand o1 = describe(N, K, b->strides[1], b->strides[0]);
    operand o2 = describe(K, M, a->strides[1], a->strides[0]);
    if (!oc.ok || oc.op != CUBLAS_OP_N || !o1.ok || !o2.ok || M > INT_MAX || N > INT_MAX ||
        K > INT_MAX)
        return AWL_ERR_UNSUPPORTED;
    cublasHandle_t h;
    AWLC_TRY_STATUS(get_handle(&h));
    const float alpha = 1.0f, beta = 0.0f;
    const char *pb = (const char *)b->data + b->offset * 2,
               *pa = (const char *)a->data + a->offset * 2;
    char *pc = (char *)out->data + out->offset * 4;
    cublasStatus_t st = api.cublasGemmStridedBatchedEx(
        h, o1.op, o2.op, (int)N, (int)M, (int)K, &alpha, pb, CUDA_R_16BF, (int)o1.ld, 0, pa,
        CUDA_R_16BF, (int)o2.ld, 0, &beta, pc, CUDA_R_32F, (int)oc.ld, 0, 1, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? AWL_OK : blas_fail(st, "matmul_wide");
}

/* out (M, N) = a (M, K) @ b (K, N) + bias (N), the bias added as the
 * product is written (CUBLASLT_EPILOGUE_BIAS). */
int awlc_matmul_bias(const awl_view *out, const awl_view *a, const awl_view *b,
                     const awl_view *bias)
{
    if (out->ndim == 2 && a->ndim == 2 && b->ndim == 2) {
        AWLC_TRY_STATUS(awlc_enter(out->data));
        int own = tf32x3_matmul(out, a, b, false, bias);
        if (own != AWL_ERR_UNSUPPORTED) return own;
    }
    return lt_matmul(out, a, b, bias, NULL, CUBLASLT_EPILOGUE_BIAS);
}

/* pre = a @ b (+ bias) and out = gelu(pre) in one product: GELU_AUX(_BIAS)
 * writes out and, as its auxiliary output, pre, which the backward reads. */
int awlc_matmul_bias_gelu(const awl_view *out, const awl_view *pre, const awl_view *a,
                          const awl_view *b, const awl_view *bias)
{
    return lt_matmul(out, a, b, bias, pre,
                     bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX);
}

/* out = (a @ b) * gelu'(pre): DGELU reads pre as its auxiliary input. */
int awlc_matmul_gelu_backward(const awl_view *out, const awl_view *a, const awl_view *b,
                              const awl_view *pre)
{
    return lt_matmul(out, a, b, NULL, pre, CUBLASLT_EPILOGUE_DGELU);
}
