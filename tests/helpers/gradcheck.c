/*
 * tests/helpers/gradcheck.c - finite-difference gradient checks (see
 * gradcheck.h).
 *
 * How the check works: each input is a strided view onto some storage. We
 * list, for every logical element, the storage position it reads; sort the
 * list; and for each distinct position perturb that one stored value by
 * +-eps (through a 0-d view made with awl_tensor_as_strided, so it works on
 * any device), re-evaluate the scalar, and compare the central difference
 * with the sum of the analytic gradients of the logical elements that read
 * the position. For an ordinary or permuted view that sum has one term; for
 * a broadcast view it is the gradient with respect to the stored value,
 * which is what a broadcast input's perturbation measures.
 *
 * Everything runs in float64 on the test device, each evaluation inside its
 * own scope so the check leaks nothing, and the analytic side uses awl_grad
 * (never leaf->grad), so calling a check twice on the same inputs is fine.
 */
#include "helpers/gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPORTS 5

static const awl_gc_options default_options = {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-6};

/* ---- running a suite ------------------------------------------------------------------------ */

int awl_gc_run_suite(const char *name, int n, const TTest *const *tests)
{
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 300);
    for (int i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ---- test bracketing --------------------------------------------------------------------- */

static int64_t bytes_in_use(void)
{
    awl_memory_stats st = {0};
    awl_memory_get_stats(awl_gc_device(), &st);
    return st.in_use;
}

static int64_t baseline;

void awl_gc_begin(uint64_t seed)
{
    awl_manual_seed(seed);
    awl_clear_error();
    baseline = bytes_in_use();
    awl_scope_begin();
}

bool awl_gc_end(void)
{
    awl_scope_end();
    int64_t now = bytes_in_use();
    if (now != baseline)
        fprintf(stderr, "test leaked %lld bytes on %s\n", (long long)(now - baseline),
                awl_gc_device());
    return now == baseline;
}

/* ---- test inputs ------------------------------------------------------------------- */

static const char *chosen_device;

void awl_gc_set_device(const char *device) { chosen_device = device; }

const char *awl_gc_device(void)
{
    if (chosen_device) return chosen_device;
    const char *d = getenv("AWL_TEST_DEVICE");
    return d && d[0] ? d : "cpu";
}

awl_tensor *awl_gc_randn_dtype(int ndim, const int64_t *shape, awl_dtype dtype)
{
    if (awl_dtype_is_float(dtype)) return awl_randn(ndim, shape, dtype, awl_gc_device());
    /* integers: small values with repeats, for comparisons and indexing tests */
    awl_scope_begin();
    awl_tensor *r = awl_randn(ndim, shape, AWL_F64, awl_gc_device());
    awl_tensor *t =
        awl_keep(awl_tensor_cast(awl_tensor_unary(AWL_UNARY_MUL_SCALAR, r, 3.0), dtype));
    awl_scope_end();
    return t;
}

awl_tensor *awl_gc_layout(int layout, int ndim, const int64_t *shape, awl_dtype dtype)
{
    int64_t base[AWL_MAX_DIMS];
    int perm[AWL_MAX_DIMS];
    awl_scope_begin();
    awl_tensor *t = NULL;
    if (layout == 0 || ndim == 0 || (layout == 1 && ndim < 2)) {
        t = awl_gc_randn_dtype(ndim, shape, dtype);
    } else if (layout == 1) { /* reversed axes: a transposed view */
        for (int d = 0; d < ndim; d++) {
            base[d] = shape[ndim - 1 - d];
            perm[d] = ndim - 1 - d;
        }
        t = awl_tensor_permute(awl_gc_randn_dtype(ndim, base, dtype), perm);
    } else if (layout == 2) { /* every second element of the last axis */
        memcpy(base, shape, (size_t)ndim * sizeof *base);
        base[ndim - 1] = 2 * shape[ndim - 1];
        t = awl_tensor_slice(awl_gc_randn_dtype(ndim, base, dtype), ndim - 1, 0, base[ndim - 1], 2);
    } else { /* axis 0 broadcast from a single stored row */
        memcpy(base, shape, (size_t)ndim * sizeof *base);
        base[0] = 1;
        t = awl_tensor_expand(awl_gc_randn_dtype(ndim, base, dtype), ndim, shape);
    }
    t = awl_keep(t);
    awl_scope_end();
    return t;
}

const char *awl_gc_layout_name(int layout)
{
    static const char *names[AWL_GC_LAYOUTS] = {"contiguous", "permuted", "sliced", "expanded"};
    return layout >= 0 && layout < AWL_GC_LAYOUTS ? names[layout] : "?";
}

awl_tensor *awl_gc_randn(int ndim, const int64_t *shape)
{
    return awl_gc_layout(0, ndim, shape, AWL_F64);
}

awl_tensor *awl_gc_permuted(int ndim, const int64_t *shape)
{
    return awl_gc_layout(1, ndim, shape, AWL_F64);
}

awl_tensor *awl_gc_sliced(int ndim, const int64_t *shape)
{
    return awl_gc_layout(2, ndim, shape, AWL_F64);
}

awl_tensor *awl_gc_expanded(int ndim, const int64_t *shape, int dim)
{
    int64_t base[AWL_MAX_DIMS];
    memcpy(base, shape, (size_t)ndim * sizeof *base);
    base[dim] = 1;
    awl_scope_begin();
    awl_tensor *t = awl_keep(awl_tensor_expand(awl_gc_randn(ndim, base), ndim, shape));
    awl_scope_end();
    return t;
}

void awl_gc_make_positive(awl_tensor *t)
{
    int64_t n = (int64_t)(t->storage->nbytes / awl_dtype_size(t->dtype)), one = 1;
    awl_scope_begin();
    awl_tensor *all = awl_tensor_as_strided(t, 1, &n, &one, 0);
    awl_tensor_unary_out(AWL_UNARY_ABS, all, all, 0.0);
    awl_tensor_unary_out(AWL_UNARY_ADD_SCALAR, all, all, 0.5);
    awl_scope_end();
}

awl_tensor *awl_gc_from_doubles(const double *values, int ndim, const int64_t *shape,
                                awl_dtype dtype)
{
    awl_scope_begin();
    awl_tensor *f = awl_from_data(values, ndim, shape, AWL_F64, awl_gc_device());
    awl_tensor *t = awl_keep(awl_tensor_cast(f, dtype));
    awl_scope_end();
    return t;
}

/* ---- reading results ----------------------------------------------------------------- */

double *awl_gc_values(awl_tensor *t)
{
    if (!t) return NULL;
    int64_t n = awl_numel(t);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    awl_scope_begin();
    awl_tensor *d = awl_tensor_cast(t, AWL_F64);
    int rc = d ? awl_to_host(d, v, (size_t)n * sizeof *v) : AWL_ERR_INVALID;
    awl_scope_end();
    if (rc != 0) {
        free(v);
        return NULL;
    }
    return v;
}

bool awl_gc_allclose(const double *got, const double *want, int64_t n, double atol, double rtol,
                     const char *what)
{
    if (!got || !want) {
        fprintf(stderr, "%s: missing values (%s)\n", what, awl_last_error());
        return false;
    }
    int reports = 0;
    for (int64_t i = 0; i < n; i++) {
        double diff = fabs(got[i] - want[i]);
        bool same_inf = isinf(got[i]) && got[i] == want[i];
        bool both_nan = isnan(got[i]) && isnan(want[i]);
        if (same_inf || both_nan || diff <= atol + rtol * fabs(want[i])) continue;
        if (reports++ < MAX_REPORTS)
            fprintf(stderr, "%s: element %lld is %.10g, expected %.10g\n", what, (long long)i,
                    got[i], want[i]);
    }
    return reports == 0;
}

bool awl_gc_next_index(int64_t *idx, int ndim, const int64_t *shape)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

bool awl_gc_has_shape(const awl_tensor *t, int ndim, const int64_t *shape)
{
    if (!t || t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) return false;
    return true;
}

/* ---- storage positions of a view ------------------------------------------------------- */

typedef struct position {
    int64_t storage; /* element index into the storage */
    int64_t logical; /* row-major index into the view  */
} position;

static int by_storage(const void *a, const void *b)
{
    const position *x = a, *y = b;
    if (x->storage != y->storage) return x->storage < y->storage ? -1 : 1;
    return x->logical < y->logical ? -1 : x->logical > y->logical;
}

/* Every logical element of t with the storage position it reads, sorted by
 * position (malloc'd, numel entries). */
static position *positions_of(const awl_tensor *t)
{
    int64_t n = awl_numel(t);
    position *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    int64_t idx[AWL_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t at = t->offset;
        for (int d = 0; d < t->ndim; d++) at += idx[d] * t->strides[d];
        p[i] = (position){at, i};
        awl_gc_next_index(idx, t->ndim, t->shape);
    }
    qsort(p, (size_t)n, sizeof *p, by_storage);
    return p;
}

/* The stored element at `at` as a 0-d view (the arrays are never read). */
static awl_tensor *element_view(awl_tensor *t, int64_t at)
{
    int64_t none[1] = {0};
    return awl_tensor_as_strided(t, 0, none, none, at);
}

static double read_storage(awl_tensor *t, int64_t at)
{
    awl_scope_begin();
    double v = awl_item(element_view(t, at));
    awl_scope_end();
    return v;
}

static void write_storage(awl_tensor *t, int64_t at, double v)
{
    awl_scope_begin();
    awl_tensor_fill_(element_view(t, at), v);
    awl_scope_end();
}

/* ---- the comparison shared by both orders ---------------------------------------------- */

/* The scalar whose gradient is checked, evaluated at the inputs' current
 * values (NAN after an error). */
typedef double (*scalar_fn)(void *ctx);

/* analytic[i] holds d scalar / d (logical element of input i), row-major
 * (NULL: all zero). Compares with finite differences of eval. */
static bool compare_with_differences(const char *name, int n, awl_tensor *const *inputs,
                                     double *const *analytic, scalar_fn eval, void *ctx,
                                     const awl_gc_options *o)
{
    bool ok = true;
    for (int i = 0; i < n; i++) {
        awl_tensor *x = inputs[i];
        int64_t count = awl_numel(x);
        position *p = positions_of(x);
        int reports = 0;
        for (int64_t k = 0; k < count;) {
            int64_t at = p[k].storage, first = p[k].logical;
            double want = 0.0;
            for (; k < count && p[k].storage == at; k++)
                want += analytic[i] ? analytic[i][p[k].logical] : 0.0;
            double orig = read_storage(x, at);
            write_storage(x, at, orig + o->eps);
            double plus = eval(ctx);
            write_storage(x, at, orig - o->eps);
            double minus = eval(ctx);
            write_storage(x, at, orig);
            double numeric = (plus - minus) / (2.0 * o->eps);
            if (fabs(want - numeric) <= o->atol + o->rtol * fabs(numeric)) continue;
            ok = false;
            if (reports++ < MAX_REPORTS)
                fprintf(stderr,
                        "gradcheck %s: input %d, element %lld (storage %lld): analytic %.10g, "
                        "numeric %.10g\n",
                        name, i, (long long)first, (long long)at, want, numeric);
        }
        free(p);
    }
    return ok;
}

/* sum(a * b) over n row-major doubles. */
static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- first order ------------------------------------------------------------------------ */

typedef struct first_order {
    awl_gc_fn fn;
    void *user;
    int n;
    awl_tensor *const *inputs;
    double *upstream; /* host copy of u, the output's shape */
    int64_t out_numel;
} first_order;

/* L = sum(f(x) * u), without recording a graph. */
static double eval_first(void *ctx)
{
    first_order *c = ctx;
    awl_scope_begin();
    awl_no_grad_begin();
    double *out = awl_gc_values(c->fn(c->inputs, c->user));
    awl_no_grad_end();
    awl_scope_end();
    double v = out ? dot(out, c->upstream, c->out_numel) : NAN;
    free(out);
    return v;
}

static bool prepare_inputs(const char *name, int n, awl_tensor *const *inputs)
{
    for (int i = 0; i < n; i++) {
        if (!inputs[i] || inputs[i]->dtype != AWL_F64 || !awl_is_leaf(inputs[i])) {
            fprintf(stderr, "gradcheck %s: input %d must be a float64 leaf (%s)\n", name, i,
                    awl_last_error());
            return false;
        }
        awl_requires_grad_(inputs[i], true);
    }
    return true;
}

/* The first gradients dL/dx_i with L = sum(f(x) * u), into grads (the
 * current scope's); create_graph records them. Returns the output or NULL. */
static awl_tensor *first_gradients(awl_gc_fn fn, void *user, int n, awl_tensor *const *inputs,
                                   awl_tensor *upstream, bool create_graph, awl_tensor **grads)
{
    awl_tensor *out = fn(inputs, user);
    if (!out) return NULL;
    awl_backward_options opts = {.grad = upstream, .create_graph = create_graph};
    if (awl_grad(out, n, inputs, grads, &opts) != 0) return NULL;
    return out;
}

bool awl_gradcheck_ex(awl_gc_fn fn, void *user, int n, awl_tensor *const *inputs, const char *name,
                      const awl_gc_options *options)
{
    const awl_gc_options *o = options ? options : &default_options;
    if (!prepare_inputs(name, n, inputs)) return false;
    awl_scope_begin();
    bool ok = false;
    awl_tensor **grads = calloc((size_t)n, sizeof *grads);
    double **analytic = calloc((size_t)n, sizeof *analytic);
    first_order c = {fn, user, n, inputs, NULL, 0};
    awl_tensor *probe = fn(inputs, user);
    if (!probe || probe->dtype != AWL_F64) {
        fprintf(stderr, "gradcheck %s: the function failed or is not float64: %s\n", name,
                awl_last_error());
        goto done;
    }
    awl_tensor *u = awl_randn(probe->ndim, probe->shape, AWL_F64, awl_gc_device());
    c.upstream = awl_gc_values(u);
    c.out_numel = awl_numel(probe);
    if (!first_gradients(fn, user, n, inputs, u, false, grads)) {
        fprintf(stderr, "gradcheck %s: backward failed: %s\n", name, awl_last_error());
        goto done;
    }
    for (int i = 0; i < n; i++) analytic[i] = awl_gc_values(grads[i]);
    ok = compare_with_differences(name, n, inputs, analytic, eval_first, &c, o);
done:
    for (int i = 0; i < n; i++) free(analytic[i]);
    free(analytic);
    free(grads);
    free(c.upstream);
    awl_scope_end();
    return ok;
}

bool awl_gradcheck(awl_gc_fn fn, void *user, int n, awl_tensor *const *inputs, const char *name)
{
    return awl_gradcheck_ex(fn, user, n, inputs, name, NULL);
}

/* ---- second order ------------------------------------------------------------------------ */

typedef struct second_order {
    awl_gc_fn fn;
    void *user;
    int n;
    awl_tensor *const *inputs;
    awl_tensor *upstream; /* u */
    double **v;           /* v_i, host, input i's logical shape */
} second_order;

/* S = sum_i <dL/dx_i, v_i>, the first gradients computed without a graph. */
static double eval_second(void *ctx)
{
    second_order *c = ctx;
    awl_scope_begin();
    awl_tensor **g = calloc((size_t)c->n, sizeof *g);
    double s = NAN;
    if (first_gradients(c->fn, c->user, c->n, c->inputs, c->upstream, false, g)) {
        s = 0.0;
        for (int i = 0; i < c->n; i++) {
            double *gi = awl_gc_values(g[i]);
            if (gi) s += dot(gi, c->v[i], awl_numel(c->inputs[i]));
            free(gi);
        }
    }
    free(g);
    awl_scope_end();
    return s;
}

bool awl_gradgradcheck_ex(awl_gc_fn fn, void *user, int n, awl_tensor *const *inputs,
                          const char *name, const awl_gc_options *options)
{
    const awl_gc_options *o = options ? options : &default_options;
    if (!prepare_inputs(name, n, inputs)) return false;
    awl_scope_begin();
    bool ok = false;
    awl_tensor **g = calloc((size_t)n, sizeof *g), **h = calloc((size_t)n, sizeof *h);
    awl_tensor **v = calloc((size_t)n, sizeof *v);
    double **analytic = calloc((size_t)n, sizeof *analytic);
    second_order c = {fn, user, n, inputs, NULL, calloc((size_t)n, sizeof(double *))};
    awl_tensor *probe = fn(inputs, user);
    if (!probe || probe->dtype != AWL_F64) {
        fprintf(stderr, "gradgradcheck %s: the function failed or is not float64: %s\n", name,
                awl_last_error());
        goto done;
    }
    c.upstream = awl_randn(probe->ndim, probe->shape, AWL_F64, awl_gc_device());
    for (int i = 0; i < n; i++) {
        v[i] = awl_randn(inputs[i]->ndim, inputs[i]->shape, AWL_F64, awl_gc_device());
        c.v[i] = awl_gc_values(v[i]);
        analytic[i] = calloc((size_t)(awl_numel(inputs[i]) + 1), sizeof(double));
    }
    if (!first_gradients(fn, user, n, inputs, c.upstream, true, g)) {
        fprintf(stderr, "gradgradcheck %s: first backward failed: %s\n", name, awl_last_error());
        goto done;
    }
    /* dS/dx_j = sum_i d<g_i, v_i>/dx_j: one backward per first gradient
     * that depends on the inputs at all (a constant one contributes 0) */
    for (int i = 0; i < n; i++) {
        if (!g[i] || !g[i]->requires_grad) continue;
        awl_backward_options opts = {.grad = v[i], .retain_graph = true};
        if (awl_grad(g[i], n, inputs, h, &opts) != 0) {
            fprintf(stderr, "gradgradcheck %s: second backward failed: %s\n", name,
                    awl_last_error());
            goto done;
        }
        for (int j = 0; j < n; j++) {
            double *hj = awl_gc_values(h[j]);
            for (int64_t k = 0; hj && k < awl_numel(inputs[j]); k++) analytic[j][k] += hj[k];
            free(hj);
        }
    }
    ok = compare_with_differences(name, n, inputs, analytic, eval_second, &c, o);
done:
    for (int i = 0; i < n; i++) {
        free(analytic[i]);
        free(c.v[i]);
    }
    free(analytic);
    free(c.v);
    free(g);
    free(h);
    free(v);
    awl_scope_end();
    return ok;
}

bool awl_gradgradcheck(awl_gc_fn fn, void *user, int n, awl_tensor *const *inputs, const char *name)
{
    return awl_gradgradcheck_ex(fn, user, n, inputs, name, NULL);
}
