/*
 * tests/test_ops_matmul.c - the differentiable matrix product.
 *
 * Forward against a triple loop (with NumPy's 1-D promotion and batch
 * broadcasting written out), in float32 and float64, on contiguous,
 * transposed, sliced and batch-broadcast operands; gradients by finite
 * differences on the same cases, which covers the engine summing batch
 * gradients back to a broadcast operand and the folded (B*T, K) path of a
 * batched activation times a weight matrix. The backend's product with a
 * bias (a linear layer's forward) against the product and an add. Products
 * with a long inner dimension, which the CPU splits along K, on 1 to 5
 * threads; float32 products around the CPU's own tile sizes.
 */
#include <stdlib.h>
#include <string.h>

#include "helpers/gradcheck.h"

/* One product: the operands' shapes and how each is laid out. */
typedef struct mm_case {
    int na, nb;
    int64_t sa[4], sb[4];
    int la, lb; /* awl_gc_layout numbers */
    int n_out;
    int64_t out[4];
} mm_case;

static const mm_case cases[] = {
    {2, 2, {3, 4}, {4, 5}, 0, 0, 2, {3, 5}},
    {2, 2, {3, 4}, {4, 5}, 1, 1, 2, {3, 5}},       /* both transposed views */
    {2, 2, {3, 4}, {4, 5}, 2, 1, 2, {3, 5}},       /* sliced @ transposed */
    {3, 2, {2, 3, 4}, {4, 5}, 0, 2, 3, {2, 3, 5}}, /* batch @ matrix (folded dB) */
    {3, 2, {2, 3, 4}, {4, 5}, 1, 0, 3, {2, 3, 5}},
    {2, 3, {3, 4}, {2, 4, 5}, 0, 1, 3, {2, 3, 5}},          /* matrix @ batch */
    {3, 3, {2, 3, 4}, {2, 4, 5}, 3, 0, 3, {2, 3, 5}},       /* batch-broadcast view @ batch */
    {4, 3, {2, 1, 3, 4}, {3, 4, 2}, 0, 2, 4, {2, 3, 3, 2}}, /* batch axes broadcast */
    {1, 2, {4}, {4, 5}, 0, 1, 1, {5}},                      /* vector @ matrix */
    {2, 1, {3, 4}, {4}, 1, 2, 1, {3}},                      /* matrix @ vector */
    {1, 1, {4}, {4}, 2, 0, 0, {0}},                         /* dot product */
    {1, 3, {4}, {2, 4, 5}, 0, 0, 2, {2, 5}},                /* vector @ batch */
    {3, 1, {2, 3, 4}, {4}, 0, 0, 2, {2, 3}},                /* batch @ vector */
    /* a few rows @ a transposed view, a linear layer's weight: the CPU's
     * product for up to 8 rows (rows in fours and a remainder) */
    {2, 2, {7, 37}, {37, 33}, 0, 1, 2, {7, 33}},
    {2, 2, {8, 64}, {64, 20}, 2, 1, 2, {8, 20}},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* out = a @ b by loops, NumPy semantics; out is row-major of the result. */
static void reference(const double *a, int na, const int64_t *sa, const double *b, int nb,
                      const int64_t *sb, double *out)
{
    /* promoted shapes */
    int64_t pa[4], pb[4];
    int ma = na == 1 ? 2 : na, mb = nb == 1 ? 2 : nb;
    if (na == 1) {
        pa[0] = 1;
        pa[1] = sa[0];
    } else {
        memcpy(pa, sa, (size_t)na * sizeof *pa);
    }
    if (nb == 1) {
        pb[0] = sb[0];
        pb[1] = 1;
    } else {
        memcpy(pb, sb, (size_t)nb * sizeof *pb);
    }
    int64_t M = pa[ma - 2], K = pa[ma - 1], N = pb[mb - 1];
    int ba = ma - 2, bb = mb - 2, nbatch = ba > bb ? ba : bb;
    int64_t batch[4], idx[4] = {0}, count = 1;
    for (int d = 0; d < nbatch; d++) {
        int ia = d - (nbatch - ba), ib = d - (nbatch - bb);
        int64_t x = ia >= 0 ? pa[ia] : 1, y = ib >= 0 ? pb[ib] : 1;
        batch[d] = x > y ? x : y;
        count *= batch[d];
    }
    for (int64_t t = 0; t < count; t++) {
        int64_t offa = 0, offb = 0;
        for (int d = 0; d < nbatch; d++) {
            int ia = d - (nbatch - ba), ib = d - (nbatch - bb);
            if (ia >= 0) offa = offa * pa[ia] + (pa[ia] == 1 ? 0 : idx[d]);
            if (ib >= 0) offb = offb * pb[ib] + (pb[ib] == 1 ? 0 : idx[d]);
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += a[(offa * M + i) * K + k] * b[(offb * K + k) * N + j];
                out[(t * M + i) * N + j] = s;
            }
        for (int d = nbatch - 1; d >= 0; d--) {
            if (++idx[d] < batch[d]) break;
            idx[d] = 0;
        }
    }
}

START_TEST(test_matmul_forward)
{
    awl_gc_begin(20);
    static const awl_dtype types[] = {AWL_F32, AWL_F64};
    for (int t = 0; t < 2; t++) {
        for (int c = 0; c < N_CASES; c++) {
            const mm_case *mc = &cases[c];
            awl_tensor *a = awl_gc_layout(mc->la, mc->na, mc->sa, types[t]);
            awl_tensor *b = awl_gc_layout(mc->lb, mc->nb, mc->sb, types[t]);
            awl_tensor *y = awl_matmul(a, b);
            ck_assert_msg(y, "case %d: %s", c, awl_last_error());
            ck_assert_msg(awl_gc_has_shape(y, mc->n_out, mc->out), "case %d: shape", c);
            double *av = awl_gc_values(a), *bv = awl_gc_values(b), *yv = awl_gc_values(y);
            int64_t n = awl_numel(y);
            double *want = malloc((size_t)n * sizeof *want);
            reference(av, mc->na, mc->sa, bv, mc->nb, mc->sb, want);
            char what[64];
            snprintf(what, sizeof what, "matmul case %d %s", c, awl_dtype_name(types[t]));
            double tol = types[t] == AWL_F64 ? 1e-12 : 1e-5;
            ck_assert(awl_gc_allclose(yv, want, n, tol, tol, what));
            free(av);
            free(bv);
            free(yv);
            free(want);
        }
    }
    ck_assert(awl_gc_end());
}
END_TEST

static awl_tensor *call_matmul(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_matmul(in[0], in[1]);
}

START_TEST(test_matmul_gradcheck)
{
    awl_gc_begin(21);
    for (int c = 0; c < N_CASES; c++) {
        const mm_case *mc = &cases[c];
        awl_tensor *in[2] = {awl_gc_layout(mc->la, mc->na, mc->sa, AWL_F64),
                             awl_gc_layout(mc->lb, mc->nb, mc->sb, AWL_F64)};
        char name[32];
        snprintf(name, sizeof name, "matmul case %d", c);
        ck_assert_msg(awl_gradcheck(call_matmul, NULL, 2, in, name), "%s", name);
    }
    ck_assert(awl_gc_end());
}
END_TEST

/* Only one operand requiring grad: the other's gradient is not computed and
 * the right one is saved. */
START_TEST(test_matmul_one_side)
{
    awl_gc_begin(22);
    awl_tensor *w = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(4, 5)), true);
    awl_tensor *x = awl_gc_randn(AWL_SHAPE(2, 3, 4));
    awl_tensor *y = awl_matmul(x, w);
    ck_assert_int_eq(awl_backward(awl_sum_all(y)), 0);
    ck_assert(awl_gc_has_shape(w->grad, AWL_SHAPE(4, 5)));
    /* d sum(x @ w) / dw[k][j] = sum over the batch rows of x[..., k] */
    double *xv = awl_gc_values(x), *gv = awl_gc_values(w->grad), want[20];
    for (int k = 0; k < 4; k++) {
        double s = 0;
        for (int r = 0; r < 6; r++) s += xv[r * 4 + k];
        for (int j = 0; j < 5; j++) want[k * 5 + j] = s;
    }
    ck_assert(awl_gc_allclose(gv, want, 20, 1e-12, 1e-12, "dW"));
    ck_assert(x->grad == NULL);
    free(xv);
    free(gv);
    awl_clear_grad(w);
    ck_assert(awl_gc_end());
}
END_TEST

/* out = a @ b + bias through the CPU's bias epilogue, against
 * awl_matmul and awl_add: row bands (m >= n), column bands (m < n), one row
 * (a matrix-vector product), no inner dimension, and the layouts the
 * epilogue cannot write in place (a transposed output, a strided bias). */
START_TEST(test_matmul_bias)
{
    if (strcmp(awl_gc_device(), "cpu") != 0) return; /* CUDA's is test_cuda's and awl-check's */
    awl_gc_begin(23);
    static const struct {
        int64_t m, k, n;
        int la, lb;          /* awl_gc_layout numbers of a and b */
        bool out_t, bias_sliced;
    } mb[] = {
        {300, 48, 96, 0, 1, false, false}, {20, 64, 300, 0, 0, false, false},
        {1, 64, 50, 0, 1, false, false},   {5, 0, 7, 0, 0, false, false},
        {40, 16, 30, 2, 0, true, false},   {40, 16, 30, 0, 1, false, true},
        {6, 40, 50, 0, 1, false, false},
        {40, 64, 640, 0, 1, false, false}, /* bands of columns, each with its part of the bias */
    };
    static const awl_dtype types[] = {AWL_F32, AWL_F64};
    for (int t = 0; t < 2; t++)
        for (int c = 0; c < (int)(sizeof mb / sizeof mb[0]); c++) {
            awl_dtype dt = types[t];
            awl_tensor *a = awl_gc_layout(mb[c].la, 2, (int64_t[]){mb[c].m, mb[c].k}, dt);
            awl_tensor *b = awl_gc_layout(mb[c].lb, 2, (int64_t[]){mb[c].k, mb[c].n}, dt);
            awl_tensor *bias = awl_gc_layout(mb[c].bias_sliced ? 2 : 0, 1, (int64_t[]){mb[c].n}, dt);
            awl_tensor *out = mb[c].out_t
                                  ? awl_tensor_transpose(awl_zeros(AWL_SHAPE(mb[c].n, mb[c].m), dt, "cpu"), 0, 1)
                                  : awl_zeros(AWL_SHAPE(mb[c].m, mb[c].n), dt, "cpu");
            ck_assert_msg(awl_fused_available(AWL_KERNEL_MATMUL_BIAS, a), "the CPU has a bias epilogue");
            ck_assert_msg(awl_tensor_matmul_bias(out, a, b, bias) == AWL_OK, "case %d: %s", c,
                          awl_last_error());
            double *got = awl_gc_values(out), *want = awl_gc_values(awl_add(awl_matmul(a, b), bias));
            char what[64];
            snprintf(what, sizeof what, "matmul_bias case %d %s", c, awl_dtype_name(dt));
            double tol = dt == AWL_F64 ? 1e-12 : 1e-5;
            ck_assert(awl_gc_allclose(got, want, mb[c].m * mb[c].n, tol, tol, what));
            free(got);
            free(want);
        }
    ck_assert(awl_gc_end());
}
END_TEST

/* Products whose inner dimension is much longer than the output's sides (a
 * weight's gradient), which the CPU splits along K between threads and
 * then sums the slices: against the triple loop on 1 to 5 threads, with a
 * transposed, a sliced and a plain operand, accumulating onto what out
 * holds, and with a bias; the same bits twice with the same thread count. */
START_TEST(test_matmul_split_k)
{
    if (strcmp(awl_gc_device(), "cpu") != 0) return;
    awl_gc_begin(24);
    static const struct {
        int64_t m, k, n;
        int la, lb;
        bool accumulate, bias;
    } sk[] = {
        {24, 1024, 40, 1, 0, false, false}, /* X^T dY, as a weight's gradient */
        {40, 700, 24, 2, 1, true, false},   /* a slice of K that is not a multiple of 16 */
        {33, 520, 17, 0, 0, false, true},
    };
    static const awl_dtype types[] = {AWL_F32, AWL_F64};
    const int threads = awl_get_num_threads();
    for (int t = 0; t < 2; t++)
        for (int c = 0; c < (int)(sizeof sk / sizeof sk[0]); c++)
            for (int nt = 1; nt <= 5; nt++) {
                awl_set_num_threads(nt);
                awl_dtype dt = types[t];
                const int64_t m = sk[c].m, k = sk[c].k, n = sk[c].n;
                awl_tensor *a = awl_gc_layout(sk[c].la, 2, (int64_t[]){m, k}, dt);
                awl_tensor *b = awl_gc_layout(sk[c].lb, 2, (int64_t[]){k, n}, dt);
                awl_tensor *bias = awl_gc_layout(0, 1, (int64_t[]){n}, dt);
                awl_tensor *start = awl_gc_layout(0, 2, (int64_t[]){m, n}, dt);
                double *av = awl_gc_values(a), *bv = awl_gc_values(b), *sv = awl_gc_values(start);
                double *biasv = awl_gc_values(bias), *want = malloc((size_t)(m * n) * sizeof *want);
                reference(av, 2, (int64_t[]){m, k}, bv, 2, (int64_t[]){k, n}, want);
                for (int64_t i = 0; i < m * n; i++)
                    want[i] += sk[c].accumulate ? sv[i] : sk[c].bias ? biasv[i % n] : 0.0;
                double *got[2];
                for (int run = 0; run < 2; run++) {
                    awl_tensor *out = awl_tensor_clone(start);
                    int st = sk[c].bias ? awl_tensor_matmul_bias(out, a, b, bias)
                                        : awl_tensor_matmul_out(out, a, b, sk[c].accumulate);
                    ck_assert_msg(st == AWL_OK, "case %d: %s", c, awl_last_error());
                    got[run] = awl_gc_values(out);
                }
                char what[80];
                snprintf(what, sizeof what, "split-K case %d %s, %d threads", c, awl_dtype_name(dt),
                         nt);
                /* float32: sums of up to 1024 products, each rounded */
                double tol = dt == AWL_F64 ? 1e-12 : 2e-4;
                ck_assert(awl_gc_allclose(got[0], want, m * n, tol, tol, what));
                ck_assert_msg(memcmp(got[0], got[1], (size_t)(m * n) * sizeof(double)) == 0,
                              "%s: two runs differ", what);
                free(got[0]);
                free(got[1]);
                free(av);
                free(bv);
                free(sv);
                free(biasv);
                free(want);
            }
    awl_set_num_threads(threads);
    ck_assert(awl_gc_end());
}
END_TEST

/* An m x k operand of float32 laid out as layout says: 0 contiguous, 1 a
 * transposed view of a k x m tensor, 2 the first k columns of an m x
 * (k + 3) tensor (rows farther apart than their length). */
static awl_tensor *tile_operand(int layout, int64_t m, int64_t k)
{
    if (layout == 1) return awl_transpose(awl_gc_randn_dtype(2, (int64_t[]){k, m}, AWL_F32), 0, 1);
    if (layout == 2) return awl_slice(awl_gc_randn_dtype(2, (int64_t[]){m, k + 3}, AWL_F32), 1, 0, k, 1);
    return awl_gc_randn_dtype(2, (int64_t[]){m, k}, AWL_F32);
}

/* float32 products at the sizes where the CPU's own product on AVX-512
 * (backends/cpu/cpu_gemm.c) changes course: rows around its 12-row tiles
 * and in more than one block of rows, columns around its 32-column panels
 * and in more than one block of 480, K in one block of up to 384 steps and
 * in two and three of one length, rows of A 4 KB apart; each operand
 * contiguous, transposed or a slice; written and
 * accumulated; on 1 and 2 threads (two runs on 2 threads give the same
 * bits). Against the float64 products of the same values. (Without
 * AVX-512 these go to OpenBLAS, and the test holds just the same.) */
START_TEST(test_matmul_tiles)
{
    if (strcmp(awl_gc_device(), "cpu") != 0) return;
    awl_gc_begin(25);
    static const int64_t shapes[][3] = {
        {24, 32, 1},
        {29, 64, 17},
        {36, 30, 256},
        {47, 96, 257},
        {100, 400, 384},
        {61, 128, 513},
        /* columns in blocks of 480 and 40, K in three blocks of 257, 257 and 256 */
        {29, 520, 770},
        /* on one thread, two blocks of rows */
        {1601, 64, 40},
        /* a contiguous A's rows 4 KB apart, copied tile by tile; then in two blocks of rows */
        {40, 64, 1024},
        {1560, 32, 1024},
    };
    const int threads = awl_get_num_threads();
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int la = 0; la < 3; la++)
            for (int lb = 0; lb < 3; lb++)
                for (int acc = 0; acc < 2; acc++) {
                    const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                    awl_tensor *a = tile_operand(la, m, k), *b = tile_operand(lb, k, n);
                    awl_tensor *start = awl_gc_randn_dtype(2, (int64_t[]){m, n}, AWL_F32);
                    ck_assert(a && b && start);
                    double *av = awl_gc_values(a), *bv = awl_gc_values(b), *sv = awl_gc_values(start);
                    double *want = malloc((size_t)(m * n) * sizeof *want);
                    reference(av, 2, (int64_t[]){m, k}, bv, 2, (int64_t[]){k, n}, want);
                    for (int64_t i = 0; i < m * n && acc; i++) want[i] += sv[i];
                    /* runs on 1, 2 and again 2 threads */
                    double *got[3];
                    for (int run = 0; run < 3; run++) {
                        awl_set_num_threads(run ? 2 : 1);
                        awl_tensor *out = awl_tensor_clone(start);
                        ck_assert_msg(awl_tensor_matmul_out(out, a, b, acc) == AWL_OK, "%s",
                                      awl_last_error());
                        got[run] = awl_gc_values(out);
                    }
                    char what[96];
                    snprintf(what, sizeof what, "(%lld, %lld) @ (%lld, %lld), layouts %d %d%s",
                             (long long)m, (long long)k, (long long)k, (long long)n, la, lb,
                             acc ? ", accumulated" : "");
                    for (int run = 0; run < 2; run++)
                        ck_assert(awl_gc_allclose(got[run], want, m * n, 2e-4, 2e-4, what));
                    ck_assert_msg(memcmp(got[1], got[2], (size_t)(m * n) * sizeof(double)) == 0,
                                  "%s: two runs on 2 threads differ", what);
                    for (int run = 0; run < 3; run++) free(got[run]);
                    free(av);
                    free(bv);
                    free(sv);
                    free(want);
                }
    awl_set_num_threads(threads);
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("ops_matmul", test_matmul_forward, test_matmul_gradcheck,
                            test_matmul_one_side, test_matmul_bias, test_matmul_split_k, test_matmul_tiles);
}
