/*
 * tests/test_backend_fused.c - the backend conformance suite for the
 * optional fused kernels (softmax, layer norm, cross-entropy, attention with
 * and without dropout, AdamW, GELU backward, dropout), each against float64 loops written from the
 * definitions; tests/helpers/backend_harness.h says how. A kernel a backend
 * lacks, or refuses for a dtype, is skipped, except that the CPU backend
 * must run them all in float32.
 *
 *     AWL_TEST_BACKEND=cuda CK_FORK=no ./build/test_backend_fused
 */
#include "tests/helpers/backend_harness.h"

/* ---- fused kernels ------------------------------------------------------------------ */

/* True when an optional kernel ran; false (skip the check) when the backend
 * lacks it or refuses the dtype. The CPU backend must run float32. */
static bool fused_ran(bool present, int rc, awl_dtype dt)
{
    if (!present) return false;
    if (rc == AWL_ERR_UNSUPPORTED) {
        ck_assert_msg(strcmp(B->name, "cpu") != 0 || dt != AWL_F32,
                      "the cpu backend must run its fused kernels in float32");
        return false;
    }
    ck_assert_int_eq(rc, AWL_OK);
    return true;
}

/* Row r of a contiguous (rows, n) tensor's host mirror, as doubles. */
static void row_of(const tt *t, int64_t r, int64_t n, double *out)
{
    for (int64_t j = 0; j < n; j++) out[j] = host_get(t->host, t->v.dtype, t->v.offset + r * n + j);
}

START_TEST(test_softmax)
{
    const int64_t shapes[2][2] = {{6, 37}, {64, 1000}};
    for (int dt = 0; dt < 2; dt++)
        for (int log_ = 0; log_ < 2; log_++)
            for (int si = 0; si < 2; si++) {
                const int64_t *shape = shapes[si], rows = shape[0], n = shape[1];
                tt x = tt_input(dt, 2, shape, L_CONTIG, GEN_ANY);
                host_set(x.host, dt, 0, 100.0); /* exp(100) overflows float32 */
                tt_upload(&x);
                tt y = tt_new(dt, 2, shape, L_CONTIG), yref = tt_new(dt, 2, shape, L_CONTIG);
                tt dy = tt_input(dt, 2, shape, L_CONTIG, GEN_ANY);
                tt dx = tt_new(dt, 2, shape, L_CONTIG);
                double *ref = malloc((size_t)(rows * n) * sizeof *ref);
                double *xr = malloc((size_t)n * sizeof *xr), *g = malloc((size_t)n * sizeof *g);
                for (int64_t r = 0; r < rows; r++) {
                    row_of(&x, r, n, xr);
                    double m = -INFINITY, s = 0;
                    for (int64_t j = 0; j < n; j++) m = fmax(m, xr[j]);
                    for (int64_t j = 0; j < n; j++) s += exp(xr[j] - m);
                    for (int64_t j = 0; j < n; j++)
                        ref[r * n + j] = log_ ? xr[j] - m - log(s) : exp(xr[j] - m) / s;
                }
                int rc = B->softmax_forward ? B->softmax_forward(&y.v, &x.v, log_) : 0;
                if (fused_ran(B->softmax_forward, rc, dt))
                    expect_out(&y, ref, tol_for(dt), "softmax");

                /* Backward from the reference output, rounded to dtype. */
                for (int64_t i = 0; i < rows * n; i++) host_set(yref.host, dt, i, ref[i]);
                tt_upload(&yref);
                for (int64_t r = 0; r < rows; r++) {
                    row_of(&yref, r, n, xr);
                    row_of(&dy, r, n, g);
                    double s = 0;
                    for (int64_t j = 0; j < n; j++) s += log_ ? g[j] : g[j] * xr[j];
                    for (int64_t j = 0; j < n; j++)
                        ref[r * n + j] = log_ ? g[j] - exp(xr[j]) * s : xr[j] * (g[j] - s);
                }
                rc = B->softmax_backward ? B->softmax_backward(&dx.v, &dy.v, &yref.v, log_) : 0;
                if (fused_ran(B->softmax_backward, rc, dt))
                    expect_out(&dx, ref, tol_for(dt), "softmax_backward");
                free(ref);
                free(xr);
                free(g);
                tt_free(&x);
                tt_free(&y);
                tt_free(&yref);
                tt_free(&dy);
                tt_free(&dx);
            }
}
END_TEST

static void layernorm_case(int64_t rows, int64_t C, bool affine)
{
    const int64_t shape[2] = {rows, C};
    const double eps = 1e-5;
    tt x = tt_input(AWL_F32, 2, shape, L_CONTIG, GEN_ANY);
    tt w = tt_input(AWL_F32, 1, &C, L_CONTIG, GEN_ANY),
       b = tt_input(AWL_F32, 1, &C, L_CONTIG, GEN_ANY);
    tt out = tt_new(AWL_F32, 2, shape, L_CONTIG);
    tt mean = tt_new(AWL_F32, 1, &rows, L_CONTIG), rstd = tt_new(AWL_F32, 1, &rows, L_CONTIG);
    double *ref = malloc((size_t)(rows * C) * sizeof *ref), *xr = malloc((size_t)C * sizeof *xr);
    double *mref = malloc((size_t)rows * sizeof *mref), *rref = malloc((size_t)rows * sizeof *rref);
    for (int64_t r = 0; r < rows; r++) {
        row_of(&x, r, C, xr);
        double mu = 0, var = 0;
        for (int64_t j = 0; j < C; j++) mu += xr[j] / (double)C;
        for (int64_t j = 0; j < C; j++) var += (xr[j] - mu) * (xr[j] - mu) / (double)C;
        mref[r] = mu;
        rref[r] = 1 / sqrt(var + eps);
        for (int64_t j = 0; j < C; j++) {
            double v = (xr[j] - mu) * rref[r];
            ref[r * C + j] = affine ? v * tt_at(&w, &j) + tt_at(&b, &j) : v;
        }
    }
    int rc = B->layernorm_forward
                 ? B->layernorm_forward(&out.v, &mean.v, &rstd.v, &x.v, affine ? &w.v : NULL,
                                        affine ? &b.v : NULL, eps)
                 : 0;
    if (!fused_ran(B->layernorm_forward, rc, AWL_F32)) goto done;
    expect_out(&out, ref, 1e-5, "layernorm out");
    expect_out(&mean, mref, 1e-5, "layernorm mean");
    expect_out(&rstd, rref, 1e-5, "layernorm rstd");

    /* Backward with the saved statistics as the kernel stored them. */
    tt dy = tt_input(AWL_F32, 2, shape, L_CONTIG, GEN_ANY),
       dx = tt_new(AWL_F32, 2, shape, L_CONTIG);
    tt dw = tt_new(AWL_F32, 1, &C, L_CONTIG), db = tt_new(AWL_F32, 1, &C, L_CONTIG);
    double *dwref = calloc((size_t)C, sizeof *dwref), *dbref = calloc((size_t)C, sizeof *dbref);
    double *g = malloc((size_t)C * sizeof *g), *xhat = malloc((size_t)C * sizeof *xhat);
    for (int64_t r = 0; r < rows; r++) {
        row_of(&x, r, C, xr);
        row_of(&dy, r, C, g);
        double mu = ((float *)mean.host)[r], rs = ((float *)rstd.host)[r], a = 0, bb = 0;
        for (int64_t j = 0; j < C; j++) {
            xhat[j] = (xr[j] - mu) * rs;
            dwref[j] += g[j] * xhat[j];
            dbref[j] += g[j];
            double gj = affine ? g[j] * tt_at(&w, &j) : g[j];
            a += gj / (double)C;
            bb += gj * xhat[j] / (double)C;
        }
        for (int64_t j = 0; j < C; j++) {
            double gj = affine ? g[j] * tt_at(&w, &j) : g[j];
            ref[r * C + j] = rs * (gj - a - xhat[j] * bb);
        }
    }
    rc = B->layernorm_backward(&dx.v, affine ? &dw.v : NULL, affine ? &db.v : NULL, &dy.v, &x.v,
                               affine ? &w.v : NULL, &mean.v, &rstd.v);
    if (fused_ran(B->layernorm_backward, rc, AWL_F32)) {
        expect_out(&dx, ref, 1e-5, "layernorm dx");
        if (affine) {
            expect_out(&dw, dwref, 1e-5, "layernorm dweight");
            expect_out(&db, dbref, 1e-5, "layernorm dbias");
        }
    }
    free(dwref);
    free(dbref);
    free(g);
    free(xhat);
    tt_free(&dy);
    tt_free(&dx);
    tt_free(&dw);
    tt_free(&db);
done:
    free(ref);
    free(xr);
    free(mref);
    free(rref);
    tt_free(&x);
    tt_free(&w);
    tt_free(&b);
    tt_free(&out);
    tt_free(&mean);
    tt_free(&rstd);
}

START_TEST(test_layernorm)
{
    layernorm_case(7, 33, true);
    layernorm_case(5, 16, false);
    layernorm_case(300, 64, true);
}
END_TEST

START_TEST(test_cross_entropy)
{
    const int ignore = -100;
    const int64_t sizes[2][2] = {{9, 11}, {64, 1000}};
    for (int si = 0; si < 2; si++)
        for (int bcast = 0; bcast < 2; bcast++) {
            const int64_t N = sizes[si][0], V = sizes[si][1], shape[2] = {N, V};
            tt x = tt_input(AWL_F32, 2, shape, L_CONTIG, GEN_ANY);
            tt t = index_input(1, &N, bcast ? L_SLICED : L_CONTIG, V);
            host_set(t.host, AWL_I32, view_off(&t.v, (int64_t[]){2}), ignore);
            tt_upload(&t);
            tt loss = tt_new(AWL_F32, 1, &N, L_CONTIG), lse = tt_new(AWL_F32, 1, &N, L_CONTIG);
            double *lref = malloc((size_t)N * sizeof *lref),
                   *zref = malloc((size_t)N * sizeof *zref);
            double *xr = malloc((size_t)V * sizeof *xr);
            for (int64_t i = 0; i < N; i++) {
                row_of(&x, i, V, xr);
                double m = -INFINITY, s = 0;
                for (int64_t j = 0; j < V; j++) m = fmax(m, xr[j]);
                for (int64_t j = 0; j < V; j++) s += exp(xr[j] - m);
                zref[i] = m + log(s);
                int ti = (int)tt_at(&t, &i);
                lref[i] = ti == ignore ? 0 : zref[i] - xr[ti];
            }
            int rc = B->cross_entropy_forward
                         ? B->cross_entropy_forward(&loss.v, &lse.v, &x.v, &t.v, ignore)
                         : 0;
            if (fused_ran(B->cross_entropy_forward, rc, AWL_F32)) {
                expect_out(&loss, lref, 1e-5, "cross_entropy loss");
                expect_out(&lse, zref, 1e-5, "cross_entropy lse");
                /* dloss per row, or one value broadcast (the gradient of a mean). */
                tt dl = tt_input(AWL_F32, 1, &N, bcast ? L_BCAST : L_CONTIG, GEN_ANY);
                tt dx = tt_new(AWL_F32, 2, shape, L_CONTIG);
                double *ref = malloc((size_t)(N * V) * sizeof *ref);
                for (int64_t i = 0; i < N; i++) {
                    row_of(&x, i, V, xr);
                    int ti = (int)tt_at(&t, &i);
                    double z = ((float *)lse.host)[i], gi = tt_at(&dl, &i);
                    for (int64_t j = 0; j < V; j++)
                        ref[i * V + j] = ti == ignore ? 0 : gi * (exp(xr[j] - z) - (j == ti));
                }
                rc = B->cross_entropy_backward(&dx.v, &dl.v, &x.v, &lse.v, &t.v, ignore);
                if (fused_ran(B->cross_entropy_backward, rc, AWL_F32))
                    expect_out(&dx, ref, 1e-5, "cross_entropy dlogits");
                free(ref);
                tt_free(&dl);
                tt_free(&dx);
            }
            free(lref);
            free(zref);
            free(xr);
            tt_free(&x);
            tt_free(&t);
            tt_free(&loss);
            tt_free(&lse);
        }
}
END_TEST

/* q, k or v (which = 0, 1, 2) as a (B, H, T, D) view of a (B, T, 3, H, D)
 * buffer, the way a fused qkv projection lays them out. */
static awl_view qkv_view(const tt *buf, const int64_t *s, int which)
{
    const int64_t Bn = s[0], H = s[1], T = s[2], D = s[3];
    awl_view v = buf->v;
    v.ndim = 4;
    const int64_t shape[4] = {Bn, H, T, D}, strides[4] = {T * 3 * H * D, D, 3 * H * D, 1};
    memcpy(v.shape, shape, sizeof shape);
    memcpy(v.strides, strides, sizeof strides);
    v.offset = buf->v.offset + which * H * D;
    return v;
}

/* A (B, H, T, D) view transposing a (B, T, H, D) buffer: how attention's
 * output goes back to (B, T, C) without a copy. */
static tt heads_transposed(const int64_t *s)
{
    const int64_t bthd[4] = {s[0], s[2], s[1], s[3]};
    tt t = tt_new(AWL_F32, 4, bthd, L_CONTIG);
    memcpy(t.v.shape, s, 4 * sizeof *s);
    t.v.strides[1] = s[3];
    t.v.strides[2] = s[1] * s[3];
    return t;
}

/* drop: NULL, or the dropout the kernels get; the reference multiplies
 * weight (b, h, t, j) by M = 1 / (1 - p) or 0 as common/dropout.h says. */
static void attention_case(const int64_t *s, bool causal, const awl_dropout_args *drop)
{
    const uint32_t threshold = drop ? awl_dropout_threshold(drop->p) : 0;
    const int64_t Bn = s[0], H = s[1], T = s[2], D = s[3], n = Bn * H * T * D;
    const int64_t qkv_shape[5] = {Bn, T, 3, H, D}, bht[3] = {Bn, H, T};
    const double scale = 1 / sqrt((double)D);
    tt qkv = tt_input(AWL_F32, 5, qkv_shape, L_CONTIG, GEN_ANY);
    awl_view qv[3];
    for (int w = 0; w < 3; w++) qv[w] = qkv_view(&qkv, s, w);
    tt out = heads_transposed(s), lse = tt_new(AWL_F32, 3, bht, L_CONTIG);
    tt dout = heads_transposed(s), dqkv = tt_new(AWL_F32, 5, qkv_shape, L_CONTIG);
    fill_view(&dout, &dout.v, GEN_ANY);
    awl_view dv3[3];
    for (int w = 0; w < 3; w++) dv3[w] = qkv_view(&dqkv, s, w);
    double *oref = malloc((size_t)n * sizeof *oref),
           *lref = malloc((size_t)(Bn * H * T) * sizeof *lref);
    double *dref[3];
    for (int w = 0; w < 3; w++) dref[w] = calloc((size_t)n, sizeof(double));
    double *P = malloc((size_t)(T * T) * sizeof *P), *dP = malloc((size_t)(T * T) * sizeof *dP),
           *M = malloc((size_t)(T * T) * sizeof *M);
#define QKV(w, b, h, t, d) at(&qkv, &qv[w], (int64_t[]){b, h, t, d})
#define DOUT(b, h, t, d) tt_at(&dout, (int64_t[]){b, h, t, d})
#define AT4(b, h, t, d) ((((b)*H + (h)) * T + (t)) * D + (d))
    for (int64_t b = 0; b < Bn; b++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < T; j++)
                    M[t * T + j] =
                        !drop ? 1.0
                        : awl_dropout_keep(drop->seed, drop->offset,
                                           awl_attention_dropout_index(b, h, t, j, H, T, T),
                                           threshold)
                            ? awl_dropout_scale(drop->p)
                            : 0.0;
            for (int64_t t = 0; t < T; t++) {
                int64_t valid = causal ? t + 1 : T;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < T; j++) {
                    double sc = 0;
                    for (int64_t d = 0; d < D; d++) sc += QKV(0, b, h, t, d) * QKV(1, b, h, j, d);
                    P[t * T + j] = j < valid ? sc * scale : -INFINITY;
                    m = fmax(m, P[t * T + j]);
                }
                for (int64_t j = 0; j < T; j++) sum += exp(P[t * T + j] - m);
                for (int64_t j = 0; j < T; j++) P[t * T + j] = exp(P[t * T + j] - m) / sum;
                lref[(b * H + h) * T + t] = m + log(sum);
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < T; j++)
                        o += P[t * T + j] * M[t * T + j] * QKV(2, b, h, j, d);
                    oref[AT4(b, h, t, d)] = o;
                }
            }
            /* dv = (M P)^T dO; dP = M (dO v^T); dS = P (dP - rowsum(P dP));
             * dq = scale dS k; dk = scale dS^T q. */
            for (int64_t t = 0; t < T; t++) {
                double delta = 0;
                for (int64_t j = 0; j < T; j++) {
                    double g = 0;
                    for (int64_t d = 0; d < D; d++) g += DOUT(b, h, t, d) * QKV(2, b, h, j, d);
                    dP[t * T + j] = M[t * T + j] * g;
                    delta += P[t * T + j] * dP[t * T + j];
                }
                for (int64_t j = 0; j < T; j++) {
                    double ds = P[t * T + j] * (dP[t * T + j] - delta) * scale;
                    for (int64_t d = 0; d < D; d++) {
                        dref[2][AT4(b, h, j, d)] += P[t * T + j] * M[t * T + j] * DOUT(b, h, t, d);
                        dref[0][AT4(b, h, t, d)] += ds * QKV(1, b, h, j, d);
                        dref[1][AT4(b, h, j, d)] += ds * QKV(0, b, h, t, d);
                    }
                }
            }
        }
#undef QKV
#undef DOUT
#undef AT4
    int rc = B->attention_forward
                 ? B->attention_forward(&out.v, &lse.v, &qv[0], &qv[1], &qv[2], scale, causal, drop)
                 : 0;
    if (fused_ran(B->attention_forward, rc, AWL_F32)) {
        expect_out(&out, oref, 1e-5, "attention out");
        expect_out(&lse, lref, 1e-5, "attention lse");
        rc = B->attention_backward(&dv3[0], &dv3[1], &dv3[2], &dout.v, &qv[0], &qv[1], &qv[2],
                                   &out.v, &lse.v, scale, causal, drop);
        if (fused_ran(B->attention_backward, rc, AWL_F32)) {
            tt_download(&dqkv);
            check_guards_of(&dqkv, dv3, 3, "attention dqkv");
            expect_view(&dqkv, &dv3[0], dref[0], 1e-5, "attention dq");
            expect_view(&dqkv, &dv3[1], dref[1], 1e-5, "attention dk");
            expect_view(&dqkv, &dv3[2], dref[2], 1e-5, "attention dv");
        }
    }
    for (int w = 0; w < 3; w++) free(dref[w]);
    free(oref);
    free(lref);
    free(P);
    free(dP);
    free(M);
    tt_free(&qkv);
    tt_free(&out);
    tt_free(&lse);
    tt_free(&dout);
    tt_free(&dqkv);
}

START_TEST(test_attention)
{
    const int64_t small[4] = {2, 3, 7, 4}, larger[4] = {2, 2, 64, 16}, ragged[4] = {1, 2, 37, 20};
    /* dropout 0.3; with T = 7 and 37 rows of weights start inside a
     * Philox block */
    const awl_dropout_args drop = {0.3, 0x1234abcdull, 5};
    for (int d = 0; d < 2; d++)
        for (int causal = 0; causal < 2; causal++) {
            attention_case(small, causal, d ? &drop : NULL);
            attention_case(larger, causal, d ? &drop : NULL);
            attention_case(ragged, causal, d ? &drop : NULL);
        }
}
END_TEST

START_TEST(test_adamw)
{
    if (!B->adamw_step) return;
    const int64_t sizes[3] = {5, 1000, 40000};
    const float wd[3] = {0.1f, 0.0f, 0.1f};
    const awl_adamw_args args = {1e-2f, 0.9f, 0.95f, 1e-8f, 3};
    tt p[3], g[3], m[3], v[3];
    awl_view pv[3], gv[3], mv[3], vv[3];
    double *ref[3][3];
    const double bc1 = 1 - pow(args.beta1, 3), bc2 = 1 - pow(args.beta2, 3);
    for (int i = 0; i < 3; i++) {
        p[i] = tt_input(AWL_F32, 1, &sizes[i], L_CONTIG, GEN_ANY);
        g[i] = tt_input(AWL_F32, 1, &sizes[i], L_CONTIG, GEN_ANY);
        m[i] = tt_input(AWL_F32, 1, &sizes[i], L_CONTIG, GEN_ANY);
        v[i] = tt_input(AWL_F32, 1, &sizes[i], L_CONTIG, GEN_POS);
        pv[i] = p[i].v, gv[i] = g[i].v, mv[i] = m[i].v, vv[i] = v[i].v;
        for (int k = 0; k < 3; k++) ref[i][k] = malloc((size_t)sizes[i] * sizeof(double));
        for (int64_t e = 0; e < sizes[i]; e++) {
            double pe = tt_at(&p[i], &e), ge = tt_at(&g[i], &e);
            double me = args.beta1 * tt_at(&m[i], &e) + (1 - args.beta1) * ge;
            double ve = args.beta2 * tt_at(&v[i], &e) + (1 - args.beta2) * ge * ge;
            pe *= 1 - (double)args.lr * wd[i];
            pe -= args.lr / bc1 * me / (sqrt(ve / bc2) + args.eps);
            ref[i][0][e] = pe, ref[i][1][e] = me, ref[i][2][e] = ve;
        }
    }
    int rc = B->adamw_step(3, pv, gv, mv, vv, wd, &args);
    if (fused_ran(true, rc, AWL_F32))
        for (int i = 0; i < 3; i++) {
            expect_out(&p[i], ref[i][0], 1e-5, "adamw param");
            expect_out(&m[i], ref[i][1], 1e-5, "adamw m");
            expect_out(&v[i], ref[i][2], 1e-5, "adamw v");
        }
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 3; k++) free(ref[i][k]);
        tt_free(&p[i]);
        tt_free(&g[i]);
        tt_free(&m[i]);
        tt_free(&v[i]);
    }
}
END_TEST

/* GELU backward: dx = dy * gelu'(x), against the derivative of the tanh
 * form in float64, below and above the parallel threshold. */
START_TEST(test_gelu_backward)
{
    if (!B->gelu_backward) return;
    const int64_t sizes[2] = {37, 50000};
    for (int c = 0; c < 2; c++) {
        tt x = tt_input(AWL_F32, 1, &sizes[c], L_CONTIG, GEN_ANY);
        tt dy = tt_input(AWL_F32, 1, &sizes[c], L_CONTIG, GEN_ANY);
        tt dx = tt_new(AWL_F32, 1, &sizes[c], L_CONTIG);
        double *ref = malloc((size_t)sizes[c] * sizeof *ref);
        const double k = 0.7978845608028654, a = 0.044715;
        for (int64_t e = 0; e < sizes[c]; e++) {
            double xe = tt_at(&x, &e), t = tanh(k * (xe + a * xe * xe * xe));
            double slope = 0.5 * (1 + t) + 0.5 * xe * (1 - t * t) * k * (1 + 3 * a * xe * xe);
            ref[e] = tt_at(&dy, &e) * slope;
        }
        int rc = B->gelu_backward(&dx.v, &dy.v, &x.v);
        if (fused_ran(true, rc, AWL_F32)) expect_out(&dx, ref, 1e-5, "gelu_backward");
        free(ref);
        tt_free(&x);
        tt_free(&dy);
        tt_free(&dx);
    }
}
END_TEST

/* Dropout without a mask: out = in * M, M = 1 / (1 - p) where
 * common/dropout.h keeps element e of out (row-major) and 0 where it drops;
 * strided and broadcast inputs, a transposed output, a stream starting at
 * an odd offset; about 1 - p of a large tensor kept. */
START_TEST(test_dropout)
{
    if (!B->dropout) return;
    const int64_t shapes[2][2] = {{1, 37}, {300, 129}};
    const awl_dropout_args d = {0.3, 0x9e3779b97f4a7c15ull, 7};
    const uint32_t threshold = awl_dropout_threshold(d.p);
    const float scale = (float)awl_dropout_scale(d.p);
    for (int c = 0; c < 2; c++)
        for (int L = L_CONTIG; L <= L_BCAST; L++) {
            const int64_t R = shapes[c][0], C = shapes[c][1], n = R * C;
            tt in = tt_input(AWL_F32, 2, shapes[c], (enum layout)L, GEN_ANY);
            tt out = tt_new(AWL_F32, 2, shapes[c], L == L_PERM ? L_PERM : L_CONTIG);
            double *ref = malloc((size_t)n * sizeof *ref);
            int64_t kept = 0;
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < C; j++) {
                    bool keep =
                        awl_dropout_keep(d.seed, d.offset, (uint64_t)(r * C + j), threshold);
                    kept += keep;
                    ref[r * C + j] =
                        keep ? (double)((float)tt_at(&in, (int64_t[]){r, j}) * scale) : 0;
                }
            int rc = B->dropout(&out.v, &in.v, &d);
            if (fused_ran(true, rc, AWL_F32)) expect_out(&out, ref, 1e-6, "dropout");
            if (n > 10000)
                ck_assert_msg(fabs((double)kept / n - 0.7) < 0.01, "kept %lld of %lld",
                              (long long)kept, (long long)n);
            free(ref);
            tt_free(&in);
            tt_free(&out);
        }
}
END_TEST

int main(void)
{
    const backend_test tests[] = {
        {"fused", test_softmax},   {"fused", test_layernorm}, {"fused", test_cross_entropy},
        {"fused", test_attention}, {"fused", test_adamw},     {"fused", test_gelu_backward},
        {"fused", test_dropout},
    };
    return backend_tests_main("backend_fused", tests, sizeof tests / sizeof tests[0]);
}
