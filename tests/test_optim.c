/*
 * tests/test_optim.c - optimizers, learning-rate schedules, gradient
 * clipping and accumulation.
 *
 * Each optimizer runs 3 steps on tiny parameters whose gradients come from
 * a real backward pass (loss = sum(a * p * p), so grad = 2 a p changes with
 * p), and is compared with the same steps computed here in double precision
 * straight from PyTorch's formulas. float64 parameters must agree to
 * rounding (1e-13): that pins down the order of operations (bias
 * corrections, eps outside the square root, when weight decay applies);
 * float32 ones to float precision, through both the fused AdamW kernel and
 * the composed form. Clipping fused with the step
 * (awl_optimizer_clip_grad_norm) must give the bits of clipping then
 * stepping; those tests run on AWL_TEST_DEVICE (cpu when unset), the others
 * on the CPU.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "helpers/gradcheck.h"
#include "nn/nn.h"
#include "nn/optim.h"
#include "nn/param.h"

#define N_STEPS 3

static void setup(void) { awl_clear_error(); }

/* ---- the tiny problem -------------------------------------------------------------- */

/* Two parameters: "w" (2, 3), decayed by AdamW, and "b" (3), not. */
static const double W0[6] = {0.5, -1.25, 2.0, -0.75, 0.1, 1.5};
static const double B0[3] = {0.3, -0.6, 0.9};
static const double AW[6] = {0.7, 1.3, -0.4, 0.9, 2.1, 0.25};
static const double AB[3] = {1.1, -0.8, 0.45};

typedef struct problem {
    awl_param_list params;
    awl_tensor *w, *b;   /* borrowed from params */
    awl_tensor *aw, *ab; /* owned */
} problem;

static awl_tensor *make(const double *v, int ndim, const int64_t *shape, awl_dtype dtype)
{
    awl_scope_begin();
    awl_tensor *t = awl_keep(awl_tensor_cast(awl_from_data(v, ndim, shape, AWL_F64, "cpu"), dtype));
    awl_scope_end();
    ck_assert_ptr_nonnull(t);
    return t;
}

static void problem_init(problem *pr, awl_dtype dtype)
{
    memset(pr, 0, sizeof *pr);
    awl_tensor *w = awl_requires_grad_(make(W0, AWL_SHAPE(2, 3), dtype), true);
    awl_tensor *b = awl_requires_grad_(make(B0, AWL_SHAPE(3), dtype), true);
    ck_assert_int_eq(awl_param_list_add(&pr->params, "w", w), 0);
    ck_assert_int_eq(awl_param_list_add(&pr->params, "b", b), 0);
    awl_release(w);
    awl_release(b);
    pr->w = w;
    pr->b = b;
    pr->aw = make(AW, AWL_SHAPE(2, 3), dtype);
    pr->ab = make(AB, AWL_SHAPE(3), dtype);
}

static void problem_free(problem *pr)
{
    awl_param_list_clear(&pr->params);
    awl_release(pr->aw);
    awl_release(pr->ab);
}

/* loss = sum(aw * w^2) + sum(ab * b^2), so grad w = 2 aw w, grad b = 2 ab b. */
static void backward(problem *pr)
{
    awl_scope_begin();
    awl_tensor *lw = awl_sum_all(awl_mul(pr->aw, awl_mul(pr->w, pr->w)));
    awl_tensor *lb = awl_sum_all(awl_mul(pr->ab, awl_mul(pr->b, pr->b)));
    ck_assert_int_eq(awl_backward(awl_add(lw, lb)), 0);
    awl_scope_end();
}

static void values(awl_tensor *t, double *out, int n)
{
    ck_assert_int_eq(awl_numel(t), n);
    awl_scope_begin();
    ck_assert_int_eq(awl_to_host(awl_tensor_cast(t, AWL_F64), out, (size_t)n * sizeof *out), 0);
    awl_scope_end();
}

static void expect_close(awl_tensor *t, const double *want, int n, double rtol)
{
    double got[16];
    values(t, got, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= rtol * (1e-3 + fabs(want[i])),
                      "element %d: got %.17g, want %.17g", i, got[i], want[i]);
}

/* ---- references in double, as PyTorch writes them --------------------------------------- */

typedef struct hyper {
    double lr, momentum, beta1, beta2, eps, wd;
    bool nesterov, decoupled;
} hyper;

static void sgd_ref(double *p, const double *a, double *buf, int n, const hyper *h, int step)
{
    for (int i = 0; i < n; i++) {
        double d = 2 * a[i] * p[i] + h->wd * p[i];
        if (h->momentum != 0) {
            buf[i] = step == 1 ? d : h->momentum * buf[i] + d;
            d = h->nesterov ? d + h->momentum * buf[i] : buf[i];
        }
        p[i] -= h->lr * d;
    }
}

static void adam_ref(double *p, const double *a, double *m, double *v, int n, const hyper *h,
                     double wd, int step)
{
    for (int i = 0; i < n; i++) {
        double g = 2 * a[i] * p[i];
        if (h->decoupled)
            p[i] *= 1 - h->lr * wd;
        else
            g += wd * p[i];
        m[i] = h->beta1 * m[i] + (1 - h->beta1) * g;
        v[i] = h->beta2 * v[i] + (1 - h->beta2) * g * g;
        double bc1 = 1 - pow(h->beta1, step), bc2 = 1 - pow(h->beta2, step);
        p[i] -= h->lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + h->eps);
    }
}

/* Runs N_STEPS of opt on pr and of the reference, comparing after each. */
static void run_against_reference(problem *pr, awl_optimizer *opt, const hyper *h, double w_decay,
                                  double b_decay, double rtol, bool sgd)
{
    double w[6], b[3], mw[6] = {0}, mb[3] = {0}, vw[6] = {0}, vb[3] = {0};
    memcpy(w, W0, sizeof w);
    memcpy(b, B0, sizeof b);
    for (int step = 1; step <= N_STEPS; step++) {
        backward(pr);
        ck_assert_int_eq(awl_optimizer_step(opt), 0);
        ck_assert_int_eq(awl_optimizer_zero_grad(opt), 0);
        if (sgd) {
            sgd_ref(w, AW, mw, 6, h, step);
            sgd_ref(b, AB, mb, 3, h, step);
        } else {
            adam_ref(w, AW, mw, vw, 6, h, w_decay, step);
            adam_ref(b, AB, mb, vb, 3, h, b_decay, step);
        }
        expect_close(pr->w, w, 6, rtol);
        expect_close(pr->b, b, 3, rtol);
    }
    ck_assert_int_eq(awl_optimizer_step_count(opt), N_STEPS);
    ck_assert_int_eq(awl_optimizer_param_step(opt, 0), N_STEPS);
    /* the state tensors hold the reference's buffers */
    if (sgd && h->momentum != 0) {
        expect_close(awl_optimizer_state(opt, 0, NULL), mw, 6, rtol);
    } else if (!sgd) {
        expect_close(awl_optimizer_state(opt, 0, NULL), mw, 6, rtol);
        expect_close(awl_optimizer_state(opt, 1, NULL), vw, 6, rtol);
        expect_close(awl_optimizer_state(opt, 3, NULL), vb, 3, rtol);
    }
}

static const awl_dtype dtypes[2] = {AWL_F64, AWL_F32};
static const double tolerances[2] = {1e-13, 2e-6};

/* ---- SGD ---------------------------------------------------------------------------- */

START_TEST(test_sgd)
{
    const hyper cases[] = {
        {.lr = 0.1},
        {.lr = 0.05, .wd = 0.01},
        {.lr = 0.05, .momentum = 0.9, .wd = 0.01},
        {.lr = 0.05, .momentum = 0.8, .nesterov = true},
    };
    for (int d = 0; d < 2; d++) {
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            problem pr;
            problem_init(&pr, dtypes[d]);
            const hyper *h = &cases[c];
            awl_optimizer *opt = awl_sgd_new(&pr.params, h->lr, h->momentum, h->wd);
            ck_assert_ptr_nonnull(opt);
            ck_assert_int_eq(awl_sgd_set_nesterov(opt, h->nesterov), 0);
            ck_assert_int_eq(awl_optimizer_num_states(opt), h->momentum != 0 ? 2 : 0);
            run_against_reference(&pr, opt, h, 0, 0, tolerances[d], true);
            awl_optimizer_free(opt);
            problem_free(&pr);
        }
    }
}
END_TEST

/* ---- Adam and AdamW ------------------------------------------------------------------ */

START_TEST(test_adam)
{
    hyper h = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .wd = 0.05};
    for (int d = 0; d < 2; d++) {
        problem pr;
        problem_init(&pr, dtypes[d]);
        awl_optimizer *opt = awl_adam_new(&pr.params, h.lr, h.beta1, h.beta2, h.eps, h.wd);
        ck_assert_ptr_nonnull(opt);
        ck_assert_str_eq(awl_optimizer_kind_name(opt), "adam");
        run_against_reference(&pr, opt, &h, h.wd, h.wd, tolerances[d], false);
        awl_optimizer_free(opt);
        problem_free(&pr);
    }
}
END_TEST

/* Counts calls of the fused kernel through a copy of the CPU table
 * registered as "cpu" (tensors made while it is registered use it). */
static awl_backend counting_cpu;
static int fused_calls, fused_params;

static int counting_adamw(int n, const awl_view *params, const awl_view *grads, const awl_view *m,
                          const awl_view *v, const float *weight_decay, const awl_adamw_args *args)
{
    fused_calls++;
    fused_params += n;
    return awl_cpu_backend()->adamw_step(n, params, grads, m, v, weight_decay, args);
}

static void adamw_case(awl_dtype dtype, bool fused, bool decay_all, double rtol)
{
    hyper h = {.lr = 0.02, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .wd = 0.1, .decoupled = true};
    counting_cpu = *awl_cpu_backend();
    counting_cpu.adamw_step = counting_adamw;
    ck_assert_int_eq(awl_backend_register(&counting_cpu), 0);
    fused_calls = fused_params = 0;
    bool was = awl_set_fused_kernels(fused);
    problem pr;
    problem_init(&pr, dtype);
    awl_optimizer *opt = awl_adamw_new(&pr.params, h.lr, h.beta1, h.beta2, h.eps, h.wd);
    ck_assert_ptr_nonnull(opt);
    ck_assert_int_eq(awl_adamw_set_decay_all(opt, decay_all), 0);
    run_against_reference(&pr, opt, &h, h.wd, decay_all ? h.wd : 0.0, rtol, false);
    /* one kernel call per step covers both parameters when it can run */
    bool expect_fused = fused && dtype == AWL_F32;
    ck_assert_int_eq(fused_calls, expect_fused ? N_STEPS : 0);
    ck_assert_int_eq(fused_params, expect_fused ? 2 * N_STEPS : 0);
    awl_optimizer_free(opt);
    problem_free(&pr);
    awl_set_fused_kernels(was);
    ck_assert_int_eq(awl_backend_register(awl_cpu_backend()), 0);
}

START_TEST(test_adamw)
{
    adamw_case(AWL_F64, true, false, 1e-13); /* float64: always composed */
    adamw_case(AWL_F32, false, false, 2e-6); /* composed */
    adamw_case(AWL_F32, true, false, 2e-6);  /* fused kernel */
    adamw_case(AWL_F64, true, true, 1e-13);  /* decay on 1-D parameters too */
    adamw_case(AWL_F32, true, true, 2e-6);
}
END_TEST

START_TEST(test_adamw_no_decay_on_1d)
{
    /* with a zero gradient Adam's update is 0, so only decay moves a weight */
    problem pr;
    problem_init(&pr, AWL_F32);
    awl_optimizer *opt = awl_adamw_new(&pr.params, 0.5, 0.9, 0.95, 1e-8, 0.2);
    for (int k = 0; k < 2; k++) {
        awl_scope_begin();
        ck_assert_int_eq(awl_backward(awl_mul_scalar(
                             awl_sum_all(awl_add(awl_sum_all(pr.w), awl_sum_all(pr.b))), 0.0)),
                         0);
        awl_scope_end();
        ck_assert_int_eq(awl_optimizer_step(opt), 0);
        ck_assert_int_eq(awl_optimizer_zero_grad(opt), 0);
    }
    double w[6], b[3];
    for (int i = 0; i < 6; i++) w[i] = W0[i] * 0.9 * 0.9; /* 1 - lr * wd, twice */
    expect_close(pr.w, w, 6, 1e-6);
    memcpy(b, B0, sizeof b);
    expect_close(pr.b, b, 3, 1e-7);
    awl_optimizer_free(opt);
    problem_free(&pr);
}
END_TEST

/* ---- bookkeeping ------------------------------------------------------------------------ */

START_TEST(test_zero_grad_and_accumulation)
{
    problem pr;
    problem_init(&pr, AWL_F64);
    awl_optimizer *opt = awl_sgd_new(&pr.params, 0.1, 0, 0);
    backward(&pr);
    awl_tensor *gw = pr.w->grad;
    ck_assert_ptr_nonnull(gw);
    double once[6], twice[6];
    values(gw, once, 6);
    backward(&pr); /* accumulates */
    values(pr.w->grad, twice, 6);
    for (int i = 0; i < 6; i++) ck_assert_double_eq_tol(twice[i], 2 * once[i], 1e-15);
    ck_assert_int_eq(awl_scale_grads(&pr.params, 0.5), 0); /* mean of 2 micro-batches */
    expect_close(pr.w->grad, once, 6, 1e-15);

    ck_assert_int_eq(awl_optimizer_zero_grad(opt), 0);
    ck_assert_ptr_eq(pr.w->grad, gw); /* the same buffer, kept */
    double zeros[6] = {0};
    expect_close(pr.w->grad, zeros, 6, 0);
    backward(&pr);
    ck_assert_ptr_eq(pr.w->grad, gw); /* accumulated into in place */
    expect_close(pr.w->grad, once, 6, 1e-15);

    ck_assert_int_eq(awl_optimizer_zero_grad_ex(opt, true), 0);
    ck_assert_ptr_null(pr.w->grad);
    ck_assert_ptr_null(pr.b->grad);
    awl_optimizer_free(opt);
    problem_free(&pr);
}
END_TEST

START_TEST(test_skip_params_without_grad)
{
    problem pr;
    problem_init(&pr, AWL_F64);
    awl_optimizer *opt = awl_adamw_new(&pr.params, 0.1, 0.9, 0.95, 1e-8, 0.1);
    awl_scope_begin();
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_mul(pr.w, pr.w))), 0); /* b gets no grad */
    awl_scope_end();
    ck_assert_int_eq(awl_optimizer_step(opt), 0);
    ck_assert_int_eq(awl_optimizer_param_step(opt, 0), 1);
    ck_assert_int_eq(awl_optimizer_param_step(opt, 1), 0);
    expect_close(pr.b, B0, 3, 0);
    ck_assert_str_eq(awl_optimizer_param_name(opt, 1), "b");
    awl_optimizer_free(opt);
    problem_free(&pr);
}
END_TEST

START_TEST(test_state_names_and_duplicates)
{
    problem pr;
    problem_init(&pr, AWL_F32);
    /* a tied weight listed under a second name is one parameter */
    ck_assert_int_eq(awl_param_list_add(&pr.params, "w_tied", pr.w), 0);
    awl_optimizer *opt = awl_adam_new(&pr.params, 1e-3, 0.9, 0.999, 1e-8, 0);
    ck_assert_int_eq(awl_optimizer_num_params(opt), 2);
    ck_assert_int_eq(awl_optimizer_num_states(opt), 4);
    const char *want[4] = {"w.exp_avg", "w.exp_avg_sq", "b.exp_avg", "b.exp_avg_sq"};
    for (int i = 0; i < 4; i++) {
        const char *name;
        awl_tensor *s = awl_optimizer_state(opt, i, &name);
        ck_assert_str_eq(name, want[i]);
        ck_assert(awl_same_shape(s, i < 2 ? pr.w : pr.b));
    }
    ck_assert_ptr_null(awl_optimizer_state(opt, 4, NULL));
    awl_optimizer_free(opt);

    opt = awl_sgd_new(&pr.params, 0.1, 0.9, 0);
    const char *name;
    awl_optimizer_state(opt, 1, &name);
    ck_assert_str_eq(name, "b.momentum_buffer");
    awl_optimizer_free(opt);
    problem_free(&pr);
}
END_TEST

START_TEST(test_lr_and_errors)
{
    problem pr;
    problem_init(&pr, AWL_F32);
    awl_optimizer *opt = awl_adamw_new(&pr.params, 1e-3, 0.9, 0.95, 1e-8, 0.1);
    ck_assert_double_eq(awl_optimizer_get_lr(opt), 1e-3);
    ck_assert_int_eq(awl_optimizer_set_lr(opt, 3e-4), 0);
    ck_assert_double_eq(awl_optimizer_get_lr(opt), 3e-4);
    ck_assert_int_eq(awl_optimizer_set_lr(opt, -1), AWL_ERR_INVALID);
    ck_assert_int_eq(awl_sgd_set_nesterov(opt, true), AWL_ERR_INVALID);
    awl_optimizer_free(opt);

    ck_assert_ptr_null(awl_adamw_new(&pr.params, 1e-3, 1.0, 0.95, 1e-8, 0.1));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "beta1"));
    ck_assert_ptr_null(awl_sgd_new(&pr.params, -0.1, 0, 0));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "learning rate"));
    opt = awl_sgd_new(&pr.params, 0.1, 0, 0);
    ck_assert_int_eq(awl_sgd_set_nesterov(opt, true), AWL_ERR_INVALID);
    ck_assert_int_eq(awl_adamw_set_decay_all(opt, true), AWL_ERR_INVALID);
    awl_optimizer_free(opt);

    awl_param_list empty = {0};
    ck_assert_ptr_null(awl_sgd_new(&empty, 0.1, 0, 0));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "empty"));
    awl_tensor *idx = awl_zeros(AWL_SHAPE(2), AWL_I32, "cpu");
    awl_param_list ints = {0};
    awl_param_list_add(&ints, "idx", idx);
    awl_release(idx);
    ck_assert_ptr_null(awl_adam_new(&ints, 0.1, 0.9, 0.9, 1e-8, 0));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "idx is int32"));
    awl_param_list_clear(&ints);

    /* NULL propagates without a new message */
    awl_clear_error();
    ck_assert_ptr_null(awl_sgd_new(NULL, 0.1, 0, 0));
    ck_assert_int_lt(awl_optimizer_step(NULL), 0);
    ck_assert_int_lt(awl_optimizer_zero_grad(NULL), 0);
    ck_assert_str_eq(awl_last_error(), "");
    awl_optimizer_free(NULL);
    problem_free(&pr);
}
END_TEST

/* ---- learning-rate schedules --------------------------------------------------------------- */

START_TEST(test_lr_schedule)
{
    awl_lr_schedule c = awl_lr_constant(1e-3);
    ck_assert_double_eq(awl_lr_at(&c, 0), 1e-3);
    ck_assert_double_eq(awl_lr_at(&c, 123456), 1e-3);

    awl_lr_schedule s = awl_lr_warmup_cosine(1e-3, 100, 1100, 1e-4);
    ck_assert_double_eq_tol(awl_lr_at(&s, 0), 1e-3 * 1 / 101, 1e-18); /* warmup start */
    ck_assert_double_eq_tol(awl_lr_at(&s, 50), 1e-3 * 51 / 101, 1e-18);
    ck_assert_double_eq_tol(awl_lr_at(&s, 99), 1e-3 * 100 / 101, 1e-18);   /* warmup end */
    ck_assert_double_eq_tol(awl_lr_at(&s, 100), 1e-3, 1e-18);              /* peak */
    ck_assert_double_eq_tol(awl_lr_at(&s, 600), 1e-4 + 0.5 * 9e-4, 1e-15); /* mid-decay */
    double quarter = 1e-4 + 0.5 * (1 + cos(M_PI * 0.25)) * 9e-4;
    ck_assert_double_eq_tol(awl_lr_at(&s, 350), quarter, 1e-15);
    ck_assert_double_eq_tol(awl_lr_at(&s, 1100), 1e-4, 1e-15); /* end of decay */
    ck_assert_double_eq(awl_lr_at(&s, 1101), 1e-4);            /* after decay */
    ck_assert_double_eq(awl_lr_at(&s, 5000), 1e-4);
    for (int64_t it = 101; it <= 1100; it++) /* monotone decay */
        ck_assert(awl_lr_at(&s, it) <= awl_lr_at(&s, it - 1));

    awl_lr_schedule degenerate = awl_lr_warmup_cosine(1e-3, 10, 10, 1e-5);
    ck_assert_double_eq(awl_lr_at(&degenerate, 10), 1e-5);
    ck_assert_double_eq_tol(awl_lr_at(&degenerate, 9), 1e-3 * 10 / 11, 1e-18);
    ck_assert(isnan(awl_lr_at(NULL, 0)));
}
END_TEST

/* ---- clipping ----------------------------------------------------------------------------------
 */

START_TEST(test_clip_grad_norm)
{
    for (int d = 0; d < 2; d++) {
        problem pr;
        problem_init(&pr, dtypes[d]);
        backward(&pr);
        double gw[6], gb[3], sq = 0;
        values(pr.w->grad, gw, 6);
        values(pr.b->grad, gb, 3);
        for (int i = 0; i < 6; i++) sq += gw[i] * gw[i];
        for (int i = 0; i < 3; i++) sq += gb[i] * gb[i];
        double norm = sqrt(sq);

        /* below the limit: the norm, grads untouched */
        ck_assert_double_eq_tol(awl_clip_grad_norm(&pr.params, 2 * norm), norm, 1e-12 * norm);
        expect_close(pr.w->grad, gw, 6, 0);

        /* above it: scaled by max_norm / (norm + 1e-6) */
        double max_norm = 0.5, coef = max_norm / (norm + 1e-6);
        ck_assert_double_eq_tol(awl_clip_grad_norm(&pr.params, max_norm), norm, 1e-12 * norm);
        for (int i = 0; i < 6; i++) gw[i] *= coef;
        for (int i = 0; i < 3; i++) gb[i] *= coef;
        expect_close(pr.w->grad, gw, 6, tolerances[d]);
        expect_close(pr.b->grad, gb, 3, tolerances[d]);
        ck_assert_double_eq_tol(awl_clip_grad_norm(&pr.params, 1e9), max_norm, 1e-5);

        /* a tied weight listed twice counts once */
        ck_assert_int_eq(awl_param_list_add(&pr.params, "w_again", pr.w), 0);
        ck_assert_double_eq_tol(awl_clip_grad_norm(&pr.params, 1e9), max_norm, 1e-5);
        problem_free(&pr);
    }
    ck_assert(awl_clip_grad_norm(NULL, 1.0) < 0);
    awl_param_list none = {0};
    ck_assert_double_eq(awl_clip_grad_norm(&none, 1.0), 0.0);
    ck_assert(awl_clip_grad_norm(&none, -1.0) < 0);
}
END_TEST

/* The fused clipping kernels (backend sum_squares and scale) against the
 * composed form: one call each for all the grads, the same norm to
 * rounding, the same bits when scaling, and the same sum on 1 and 2
 * threads. Counted through a copy of the CPU table registered as "cpu". */
static int squares_calls, squares_tensors, scale_calls, scale_tensors;

static int counting_sum_squares(int n, const awl_view *xs, const awl_view *out)
{
    squares_calls++;
    squares_tensors += n;
    return awl_cpu_backend()->sum_squares(n, xs, out);
}

static int counting_scale(int n, const awl_view *xs, double factor)
{
    scale_calls++;
    scale_tensors += n;
    return awl_cpu_backend()->scale(n, xs, factor);
}

enum { CLIP_TENSORS = 4, CLIP_ELEMENTS = 70001 + 768 + 1 + 2 * 16384 };

/* Four float32 parameters of mixed sizes (one larger than a chunk of the
 * CPU kernel, one of a single element), one listed twice (a tied weight),
 * with seeded random grads; clipped to max_norm (or scaled by `factor`
 * when max_norm < 0). Their grads come back in out, the norm is returned. */
static double clip_run(bool fused, double max_norm, double factor, float *out)
{
    static const int64_t sizes[CLIP_TENSORS] = {70001, 768, 1, 2 * 16384};
    bool was = awl_set_fused_kernels(fused);
    awl_manual_seed(7);
    awl_param_list params = {0};
    awl_tensor *p[CLIP_TENSORS];
    for (int i = 0; i < CLIP_TENSORS; i++) {
        awl_scope_begin();
        p[i] = awl_requires_grad_(awl_keep(awl_zeros(1, &sizes[i], AWL_F32, "cpu")), true);
        p[i]->grad = awl_keep(awl_mul_scalar(awl_randn(1, &sizes[i], AWL_F32, "cpu"), 0.01));
        awl_scope_end();
        ck_assert_ptr_nonnull(p[i]->grad);
        char name[8] = {(char)('a' + i), 0};
        ck_assert_int_eq(awl_param_list_add(&params, name, p[i]), 0);
    }
    ck_assert_int_eq(awl_param_list_add(&params, "a_tied", p[0]), 0);
    double norm = max_norm >= 0 ? awl_clip_grad_norm(&params, max_norm)
                                : (double)awl_scale_grads(&params, factor);
    size_t at = 0;
    for (int i = 0; i < CLIP_TENSORS; i++) {
        ck_assert_int_eq(awl_to_host(p[i]->grad, out + at, (size_t)sizes[i] * sizeof *out), 0);
        at += (size_t)sizes[i];
        awl_release(p[i]);
    }
    awl_param_list_clear(&params);
    awl_set_fused_kernels(was);
    return norm;
}

START_TEST(test_clip_fused_kernels)
{
    counting_cpu = *awl_cpu_backend();
    counting_cpu.sum_squares = counting_sum_squares;
    counting_cpu.scale = counting_scale;
    ck_assert_int_eq(awl_backend_register(&counting_cpu), 0);
    float *composed = malloc(CLIP_ELEMENTS * sizeof *composed);
    float *fused = malloc(CLIP_ELEMENTS * sizeof *fused);

    squares_calls = squares_tensors = scale_calls = scale_tensors = 0;
    double nc = clip_run(false, 0.5, 0, composed);
    ck_assert_int_eq(squares_calls + scale_calls, 0);
    double nf = clip_run(true, 0.5, 0, fused);
    ck_assert_int_eq(squares_calls, 1); /* every grad in one call, the tied one once */
    ck_assert_int_eq(squares_tensors, CLIP_TENSORS);
    ck_assert_int_eq(scale_calls, 1);
    ck_assert_int_eq(scale_tensors, CLIP_TENSORS);
    ck_assert(nc > 0.5); /* so the grads were scaled */
    ck_assert_double_eq_tol(nf, nc, 1e-12 * nc);
    for (int i = 0; i < CLIP_ELEMENTS; i++)
        ck_assert_float_eq_tol(fused[i], composed[i], 1e-6f * fabsf(composed[i]) + 1e-30f);

    /* scaling by one factor: the MUL_SCALAR op's bits */
    ck_assert_int_eq((int)clip_run(false, -1, 0.37, composed), 0);
    ck_assert_int_eq((int)clip_run(true, -1, 0.37, fused), 0);
    ck_assert_int_eq(memcmp(fused, composed, CLIP_ELEMENTS * sizeof *fused), 0);

    /* the sum's bits do not depend on the threads */
    awl_set_num_threads(1);
    double one = clip_run(true, 1e30, 0, fused);
    awl_set_num_threads(2);
    double two = clip_run(true, 1e30, 0, fused);
    ck_assert_int_eq(memcmp(&one, &two, sizeof one), 0);

    free(composed);
    free(fused);
    ck_assert_int_eq(awl_backend_register(awl_cpu_backend()), 0);
}
END_TEST

/* ---- clipping fused with the step ------------------------------------------------------- */

/* Three parameters on AWL_TEST_DEVICE (cpu when unset): "w" (1000) and "e"
 * (4, 37) decayed by AdamW, "b" (5) not; grads drawn from a seeded stream,
 * fresh each step. */
enum { FUSED_CLIP_PARAMS = 3 };
static const int64_t FUSED_CLIP_SIZES[FUSED_CLIP_PARAMS][2] = {{1000, 1}, {4, 37}, {5, 1}};
static const int FUSED_CLIP_NDIM[FUSED_CLIP_PARAMS] = {1, 2, 1};

static awl_optimizer *clip_optimizer(int kind, awl_dtype dtype, awl_param_list *params)
{
    memset(params, 0, sizeof *params);
    static const char *const names[FUSED_CLIP_PARAMS] = {"w", "e", "b"};
    awl_manual_seed(11);
    for (int i = 0; i < FUSED_CLIP_PARAMS; i++) {
        awl_scope_begin();
        awl_tensor *t =
            awl_keep(awl_randn(FUSED_CLIP_NDIM[i], FUSED_CLIP_SIZES[i], dtype, awl_gc_device()));
        awl_scope_end();
        ck_assert_ptr_nonnull(t);
        awl_requires_grad_(t, true);
        ck_assert_int_eq(awl_param_list_add(params, names[i], t), 0);
        awl_release(t);
    }
    awl_optimizer *opt = kind == 0   ? awl_adamw_new(params, 0.02, 0.9, 0.95, 1e-8, 0.1)
                         : kind == 1 ? awl_adam_new(params, 0.01, 0.9, 0.999, 1e-8, 0.05)
                                     : awl_sgd_new(params, 0.05, 0.9, 0.01);
    ck_assert_ptr_nonnull(opt);
    return opt;
}

/* N_STEPS steps with seeded grads, each clipped to max_norm before the step
 * by awl_clip_grad_norm (fused_clip false) or awl_optimizer_clip_grad_norm;
 * the parameters, the optimizer's states and the norms come back in out
 * (as float64), their count is returned. */
static int clip_steps(int kind, awl_dtype dtype, bool fused_clip, double max_norm, double *out)
{
    awl_param_list params;
    awl_optimizer *opt = clip_optimizer(kind, dtype, &params);
    int at = 0;
    for (int step = 0; step < N_STEPS; step++) {
        awl_manual_seed(100 + (uint64_t)step);
        for (int i = 0; i < FUSED_CLIP_PARAMS; i++) {
            awl_tensor *p = params.items[i].tensor;
            awl_scope_begin();
            awl_tensor *g = awl_keep(
                awl_mul_scalar(awl_randn(p->ndim, p->shape, p->dtype, awl_gc_device()), 0.5));
            awl_scope_end();
            ck_assert_ptr_nonnull(g);
            awl_release(p->grad);
            p->grad = g;
        }
        double norm = fused_clip ? awl_optimizer_clip_grad_norm(opt, max_norm)
                                 : awl_clip_grad_norm(&params, max_norm);
        ck_assert(norm >= 0);
        out[at++] = norm;
        ck_assert_int_eq(awl_optimizer_step(opt), 0);
    }
    awl_tensor *list[FUSED_CLIP_PARAMS + 8];
    int n = 0;
    for (int i = 0; i < FUSED_CLIP_PARAMS; i++) list[n++] = params.items[i].tensor;
    for (int i = 0; i < awl_optimizer_num_states(opt); i++)
        list[n++] = awl_optimizer_state(opt, i, NULL);
    for (int i = 0; i < n; i++) {
        int64_t count = awl_numel(list[i]);
        awl_scope_begin();
        ck_assert_int_eq(
            awl_to_host(awl_tensor_cast(list[i], AWL_F64), out + at, (size_t)count * sizeof *out),
            0);
        awl_scope_end();
        at += (int)count;
    }
    awl_optimizer_free(opt);
    awl_param_list_clear(&params);
    return at;
}

/* awl_optimizer_clip_grad_norm then a step gives the bits of
 * awl_clip_grad_norm then a step: AdamW through its fused kernel (the
 * factor an argument) and composed, Adam and SGD (composed), float32 and
 * float64, with the factor below 1 (clipping) and at 1 (max_norm above
 * the norm). */
START_TEST(test_optimizer_clip_fused)
{
    enum { MOST = N_STEPS + 4 * (1000 + 4 * 37 + 5) };
    double *want = malloc(MOST * sizeof *want), *got = malloc(MOST * sizeof *got);
    static const char *const kinds[3] = {"adamw", "adam", "sgd"};
    for (int kind = 0; kind < 3; kind++)
        for (int d = 0; d < 2; d++)
            for (int fused = 0; fused < 2; fused++)
                for (int c = 0; c < 2; c++) {
                    bool was = awl_set_fused_kernels(fused);
                    double max_norm = c ? 1e9 : 0.3;
                    int n = clip_steps(kind, dtypes[d], false, max_norm, want);
                    int m = clip_steps(kind, dtypes[d], true, max_norm, got);
                    awl_set_fused_kernels(was);
                    ck_assert_int_eq(n, m);
                    if (!c) ck_assert(want[0] > max_norm); /* so the factor applied */
                    ck_assert_msg(memcmp(want, got, (size_t)n * sizeof *want) == 0,
                                  "%s, %s, fused kernels %s, max_norm %g: the fused clipping "
                                  "differs from clipping then stepping",
                                  kinds[kind], awl_dtype_name(dtypes[d]), fused ? "on" : "off",
                                  max_norm);
                }
    free(want);
    free(got);
}
END_TEST

/* The factor lives until the next step or zero_grad, and only there: a
 * step after zero_grad and fresh grads is unclipped. Bad input is an error
 * naming the function. */
START_TEST(test_optimizer_clip_lifetime)
{
    awl_param_list a, b;
    awl_optimizer *oa = clip_optimizer(0, AWL_F32, &a), *ob = clip_optimizer(0, AWL_F32, &b);
    for (int i = 0; i < FUSED_CLIP_PARAMS; i++) {
        awl_scope_begin();
        a.items[i].tensor->grad = awl_keep(awl_ones_like(a.items[i].tensor));
        b.items[i].tensor->grad = awl_keep(awl_ones_like(b.items[i].tensor));
        awl_scope_end();
    }
    ck_assert(awl_optimizer_clip_grad_norm(oa, 1e-3) > 1); /* a factor for oa only */
    ck_assert_int_eq(awl_optimizer_zero_grad(oa), 0);      /* and gone */
    ck_assert_int_eq(awl_optimizer_zero_grad(ob), 0);
    for (int i = 0; i < FUSED_CLIP_PARAMS; i++) {
        ck_assert_int_eq(awl_tensor_fill_(a.items[i].tensor->grad, 1.0), 0);
        ck_assert_int_eq(awl_tensor_fill_(b.items[i].tensor->grad, 1.0), 0);
    }
    ck_assert_int_eq(awl_optimizer_step(oa), 0);
    ck_assert_int_eq(awl_optimizer_step(ob), 0);
    for (int i = 0; i < FUSED_CLIP_PARAMS; i++) {
        int64_t n = awl_numel(a.items[i].tensor);
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        ck_assert_int_eq(awl_to_host(a.items[i].tensor, x, (size_t)n * sizeof *x), 0);
        ck_assert_int_eq(awl_to_host(b.items[i].tensor, y, (size_t)n * sizeof *y), 0);
        ck_assert_int_eq(memcmp(x, y, (size_t)n * sizeof *x), 0);
        free(x);
        free(y);
    }
    ck_assert(awl_optimizer_clip_grad_norm(oa, -1.0) < 0);
    ck_assert_ptr_nonnull(
        strstr(awl_last_error(), "awl_optimizer_clip_grad_norm: max_norm -1 must be >= 0"));
    awl_clear_error();
    ck_assert(awl_optimizer_clip_grad_norm(NULL, 1.0) < 0);
    awl_optimizer_free(oa);
    awl_optimizer_free(ob);
    awl_param_list_clear(&a);
    awl_param_list_clear(&b);
}
END_TEST

/* ---- kept casts ------------------------------------------------------------------------ */

/* Whether a and b (one dtype and element count) hold the same bytes. */
static bool same_bytes(awl_tensor *a, awl_tensor *b)
{
    size_t bytes = (size_t)awl_numel(a) * awl_dtype_size(a->dtype);
    ck_assert_int_eq(awl_numel(a), awl_numel(b));
    ck_assert_int_eq(a->dtype, b->dtype);
    char *x = malloc(bytes), *y = malloc(bytes);
    ck_assert_int_eq(awl_to_host(a, x, bytes), 0);
    ck_assert_int_eq(awl_to_host(b, y, bytes), 0);
    bool same = memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return same;
}

static bool shares_storage(awl_tensor *a, awl_tensor *b)
{
    return awl_tensor_view(a).data == awl_tensor_view(b).data;
}

/* awl_optimizer_keep_casts: AdamW's fused step writes each parameter's
 * bfloat16 copy; the parameters come out bit for bit as without; each copy
 * holds the bits of a cast of its parameter; autocast (directly and through
 * its cache) hands out a view of the copy, through which the gradient
 * reaches the parameter; a write to the parameter since the step makes
 * autocast cast again; turning keeping off drops the copies. On
 * AWL_TEST_DEVICE (cpu when unset). */
START_TEST(test_keep_casts)
{
    awl_param_list a, b;
    awl_optimizer *oa = clip_optimizer(0, AWL_F32, &a), *ob = clip_optimizer(0, AWL_F32, &b);
    ck_assert_int_eq(awl_optimizer_keep_casts(oa, AWL_BF16), 0);
    ck_assert_ptr_null(awl_optimizer_kept_cast(oa, 0)); /* none before the first step */
    for (int step = 0; step < N_STEPS; step++) {
        for (int i = 0; i < FUSED_CLIP_PARAMS; i++) {
            awl_tensor *pa = a.items[i].tensor, *pb = b.items[i].tensor;
            awl_scope_begin();
            awl_manual_seed(200 + (uint64_t)(step * FUSED_CLIP_PARAMS + i));
            awl_tensor *g = awl_randn(pa->ndim, pa->shape, AWL_F32, awl_gc_device());
            awl_release(pa->grad);
            awl_release(pb->grad);
            pa->grad = awl_keep(awl_tensor_clone(g));
            pb->grad = awl_keep(awl_tensor_clone(g));
            awl_scope_end();
        }
        ck_assert(awl_optimizer_clip_grad_norm(oa, 2.0) >= 0);
        ck_assert(awl_optimizer_clip_grad_norm(ob, 2.0) >= 0);
        ck_assert_msg(awl_optimizer_step(oa) == 0, "%s", awl_last_error());
        ck_assert_int_eq(awl_optimizer_step(ob), 0);
    }
    awl_dtype before = awl_autocast_set(AWL_BF16);
    for (int i = 0; i < FUSED_CLIP_PARAMS; i++) {
        awl_tensor *p = a.items[i].tensor, *kept = awl_optimizer_kept_cast(oa, i);
        ck_assert_msg(same_bytes(p, b.items[i].tensor), "parameter %d differs with keeping", i);
        ck_assert_ptr_nonnull(kept);
        ck_assert_ptr_null(awl_optimizer_kept_cast(ob, i));
        awl_scope_begin();
        ck_assert_msg(same_bytes(kept, awl_tensor_cast(p, AWL_BF16)), "kept cast %d", i);
        awl_tensor *c = awl_autocast(p);
        ck_assert(c && c->dtype == AWL_BF16 && c->requires_grad && shares_storage(c, kept));
        ck_assert_int_eq(c->ndim, p->ndim);
        ck_assert_int_eq(awl_numel(c), awl_numel(p));
        /* the gradient comes back through the cast's node: sum(c) gives ones */
        awl_tensor *ones = awl_ones_like(p);
        awl_clear_grad(p);
        ck_assert_int_eq(awl_backward(awl_sum_all(awl_cast(c, AWL_F32))), 0);
        ck_assert(p->grad && same_bytes(p->grad, ones));
        awl_scope_end();
    }
    /* the cache takes the kept copies too, and casts what has none */
    awl_scope_begin();
    awl_tensor *other = awl_randn(AWL_SHAPE(7), AWL_F32, awl_gc_device());
    awl_tensor *ts[FUSED_CLIP_PARAMS + 1] = {other};
    for (int i = 0; i < FUSED_CLIP_PARAMS; i++) ts[i + 1] = a.items[i].tensor;
    ck_assert_int_eq(awl_autocast_cache(FUSED_CLIP_PARAMS + 1, ts), 0);
    for (int i = 0; i < FUSED_CLIP_PARAMS; i++) {
        awl_tensor *c = awl_autocast(a.items[i].tensor);
        ck_assert(shares_storage(c, awl_optimizer_kept_cast(oa, i)));
        ck_assert_ptr_eq(awl_autocast(a.items[i].tensor), c);
    }
    awl_tensor *oc = awl_autocast(other);
    ck_assert(oc && oc->dtype == AWL_BF16 && same_bytes(oc, awl_tensor_cast(other, AWL_BF16)));
    awl_autocast_cache_clear();
    awl_scope_end();
    /* a write since the step: cast again, from the new values */
    awl_tensor *p0 = a.items[0].tensor;
    ck_assert_int_eq(awl_tensor_fill_(p0, 0.5), 0);
    awl_scope_begin();
    awl_tensor *c0 = awl_autocast(p0);
    ck_assert(!shares_storage(c0, awl_optimizer_kept_cast(oa, 0)));
    ck_assert(same_bytes(c0, awl_tensor_cast(p0, AWL_BF16)));
    ck_assert(shares_storage(awl_autocast(a.items[1].tensor), awl_optimizer_kept_cast(oa, 1)));
    awl_scope_end();
    /* off: the copies go */
    awl_tensor *p1 = a.items[1].tensor;
    ck_assert_int_eq(awl_optimizer_keep_casts(oa, AWL_F32), 0);
    ck_assert_ptr_null(awl_optimizer_kept_cast(oa, 1));
    awl_scope_begin();
    ck_assert(same_bytes(awl_autocast(p1), awl_tensor_cast(p1, AWL_BF16)));
    awl_scope_end();
    awl_autocast_set(before);
    /* only AdamW keeps casts, and only in bfloat16 */
    awl_param_list c;
    awl_optimizer *sgd = clip_optimizer(2, AWL_F32, &c);
    ck_assert_int_eq(awl_optimizer_keep_casts(sgd, AWL_BF16), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "only adamw keeps casts"));
    ck_assert_int_eq(awl_optimizer_keep_casts(ob, AWL_F64), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "float64 is not bfloat16"));
    ck_assert_int_eq(awl_optimizer_keep_casts(NULL, AWL_BF16), AWL_ERR_INVALID);
    /* a kept cast of the wrong size: an error naming both shapes */
    awl_scope_begin();
    awl_tensor *wrong = awl_zeros(AWL_SHAPE(2, 3), AWL_BF16, awl_gc_device());
    ck_assert_int_eq(awl_autocast_keep(p1, wrong), AWL_ERR_INVALID);
    ck_assert_msg(strstr(awl_last_error(), "awl_autocast_keep") &&
                      strstr(awl_last_error(), "(2,3)") && strstr(awl_last_error(), "(4,37)"),
                  "%s", awl_last_error());
    awl_scope_end();
    awl_clear_error();
    awl_optimizer_free(sgd);
    awl_optimizer_free(oa);
    awl_optimizer_free(ob);
    awl_param_list_clear(&a);
    awl_param_list_clear(&b);
    awl_param_list_clear(&c);
}
END_TEST

/* Bad input to the clipping kernels' entry points: an error naming the op
 * and what is wrong, nothing written. */
START_TEST(test_clip_kernels_bad_input)
{
    awl_scope_begin();
    awl_tensor *a = awl_ones(AWL_SHAPE(3), AWL_F32, "cpu");
    awl_tensor *d = awl_ones(AWL_SHAPE(3), AWL_F64, "cpu");
    awl_tensor *out32 = awl_zeros(0, NULL, AWL_F32, "cpu");
    awl_tensor *out64 = awl_zeros(0, NULL, AWL_F64, "cpu");
    ck_assert_int_eq(awl_tensor_sum_squares(1, (awl_tensor *[]){a}, out32), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_tensor_sum_squares: out is float32"));
    ck_assert_int_eq(awl_tensor_sum_squares(2, (awl_tensor *[]){a, d}, out64), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_tensor_sum_squares: tensor is float64"));
    ck_assert_int_eq(awl_tensor_scale(2, (awl_tensor *[]){a, NULL}, 2.0), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "tensor 1 of 2 is NULL"));
    float v[3];
    ck_assert_int_eq(awl_to_host(a, v, sizeof v), 0);
    for (int i = 0; i < 3; i++) ck_assert_float_eq(v[i], 1.0f); /* nothing was scaled */
    awl_clear_error();
    awl_scope_end();
}
END_TEST

static Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("optim");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_adamw_no_decay_on_1d);
    tcase_add_test(tc, test_zero_grad_and_accumulation);
    tcase_add_test(tc, test_skip_params_without_grad);
    tcase_add_test(tc, test_state_names_and_duplicates);
    tcase_add_test(tc, test_lr_and_errors);
    tcase_add_test(tc, test_lr_schedule);
    tcase_add_test(tc, test_clip_grad_norm);
    tcase_add_test(tc, test_clip_fused_kernels);
    tcase_add_test(tc, test_clip_kernels_bad_input);
    tcase_add_test(tc, test_optimizer_clip_fused);
    tcase_add_test(tc, test_optimizer_clip_lifetime);
    tcase_add_test(tc, test_keep_casts);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(optim_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
