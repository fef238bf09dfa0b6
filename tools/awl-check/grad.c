/*
 * tools/awl-check/grad.c - awl-check --grad: the float64 gradient check of
 * every differentiable op, on the device under test.
 *
 * Each check builds its inputs on the device (tests/helpers/gradcheck.h:
 * contiguous, transposed, sliced and broadcast views), runs the op through
 * the tensor layer, and compares autograd's gradient with central finite
 * differences; some also check second-order gradients (create_graph). The
 * op's forward and backward then run with the device's kernels, fused ones
 * where it has them, composed ones where it does not, and each check must
 * leave the device's bytes in use where it found them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "helpers/gradcheck.h"
#include "nn/nn.h"
#include "tools/awl-check/harness.h"

/* ---- the functions under test -------------------------------------------------------- */

#define FN1(name, expr)                                                                            \
    static awl_tensor *f_##name(awl_tensor *const *in, void *user)                                 \
    {                                                                                              \
        (void)user;                                                                                \
        awl_tensor *x = in[0];                                                                     \
        return expr;                                                                               \
    }
#define FN2(name, expr)                                                                            \
    static awl_tensor *f_##name(awl_tensor *const *in, void *user)                                 \
    {                                                                                              \
        (void)user;                                                                                \
        awl_tensor *a = in[0], *b = in[1];                                                         \
        return expr;                                                                               \
    }

FN2(add, awl_add(a, b))
FN2(sub, awl_sub(a, b))
FN2(mul, awl_mul(a, b))
FN2(div, awl_div(a, b))
FN2(maximum, awl_maximum(a, b))
FN2(minimum, awl_minimum(a, b))
FN2(where, awl_where(awl_gt(a, b), a, awl_mul(a, b)))
FN2(matmul, awl_matmul(a, b))
FN1(neg, awl_neg(x))
FN1(exp, awl_exp(x))
FN1(log, awl_log(x))
FN1(sqrt, awl_sqrt(x))
FN1(tanh, awl_tanh(x))
FN1(sigmoid, awl_sigmoid(x))
FN1(relu, awl_relu(x))
FN1(gelu, awl_gelu(x))
FN1(abs, awl_abs(x))
FN1(pow, awl_pow(x, 2.5))
FN1(add_scalar, awl_add_scalar(x, 0.5))
FN1(mul_scalar, awl_mul_scalar(x, -1.5))
FN1(rsub_scalar, awl_rsub_scalar(2.0, x))
FN1(rdiv_scalar, awl_rdiv_scalar(2.0, x))
FN1(masked_fill, awl_masked_fill(x, awl_gt(x, awl_zeros_like(x)), 0.0))
FN1(sum, awl_sum(x, AWL_DIMS(1), false))
FN1(mean, awl_mean(x, AWL_DIMS(0, 2), true))
FN1(max, awl_max(x, AWL_DIMS(1), false))
FN1(softmax, awl_softmax(x, -1))
FN1(log_softmax, awl_log_softmax(x, -1))
FN1(logsumexp, awl_logsumexp(x, -1, false))
FN1(reshape, awl_reshape(x, AWL_SHAPE(2, 6)))
FN1(permute, awl_permute(x, (int[]){2, 0, 1}))
FN1(slice, awl_slice(x, 1, 0, 4, 2))
FN1(expand, awl_expand(x, AWL_SHAPE(3, 4)))
FN1(squeeze, awl_unsqueeze(awl_squeeze(x, 1), 0))
FN2(concat, awl_concat(2, (awl_tensor *[]){a, b}, 1))
FN1(layer_norm, awl_layer_norm(x, NULL, NULL, 1e-5))
FN1(attention_qkv, awl_attention_qkv(x, 2, true, 0.0))

static awl_tensor *f_linear(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_linear(in[0], in[1], in[2]);
}

static awl_tensor *f_mlp(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_mlp(in[0], in[1], NULL, in[2], NULL);
}

static awl_tensor *f_layer_norm_affine(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_layer_norm(in[0], in[1], in[2], 1e-5);
}

static awl_tensor *f_sdpa(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_scaled_dot_product_attention(in[0], in[1], in[2], true, 0.0);
}

/* user: the int32 indices or targets, on the device */
static awl_tensor *f_embedding(awl_tensor *const *in, void *user)
{
    return awl_embedding(in[0], user);
}

static awl_tensor *f_gather(awl_tensor *const *in, void *user)
{
    return awl_gather(in[0], 1, user);
}

static awl_tensor *f_cross_entropy(awl_tensor *const *in, void *user)
{
    return awl_cross_entropy(in[0], user, 1);
}

/* ---- the checks ------------------------------------------------------------------------- */

enum { NONE, IDX_EMBEDDING, IDX_GATHER, IDX_TARGETS };

typedef struct grad_check {
    const char *name;
    awl_gc_fn fn;
    int n;
    int ndim[3];
    int64_t shape[3][4];
    int layout[3]; /* gradcheck.h's: 0 contiguous, 1 transposed, 2 sliced, 3 broadcast */
    bool positive; /* inputs |v| + 0.5 */
    bool second;   /* also the second-order check */
    int indices;   /* the user argument */
} grad_check;

static const grad_check CHECKS[] = {
    {"add", f_add, 2, {2, 1}, {{3, 4}, {4}}, {1, 0}, false, false, NONE},
    {"sub", f_sub, 2, {2, 2}, {{3, 4}, {3, 4}}, {2, 3}, false, false, NONE},
    {"mul", f_mul, 2, {2, 1}, {{3, 4}, {4}}, {1, 0}, false, true, NONE},
    {"div", f_div, 2, {2, 2}, {{3, 4}, {3, 4}}, {0, 1}, true, true, NONE},
    {"maximum", f_maximum, 2, {2, 2}, {{3, 4}, {3, 4}}, {0, 2}, false, false, NONE},
    {"minimum", f_minimum, 2, {2, 2}, {{3, 4}, {3, 4}}, {1, 0}, false, false, NONE},
    {"where", f_where, 2, {2, 2}, {{3, 4}, {3, 4}}, {0, 1}, false, false, NONE},
    {"neg", f_neg, 1, {2}, {{3, 4}}, {1}, false, false, NONE},
    {"exp", f_exp, 1, {2}, {{3, 4}}, {2}, false, true, NONE},
    {"log", f_log, 1, {2}, {{3, 4}}, {1}, true, true, NONE},
    {"sqrt", f_sqrt, 1, {2}, {{3, 4}}, {3}, true, false, NONE},
    {"tanh", f_tanh, 1, {2}, {{3, 4}}, {1}, false, true, NONE},
    {"sigmoid", f_sigmoid, 1, {2}, {{3, 4}}, {0}, false, true, NONE},
    {"relu", f_relu, 1, {2}, {{3, 4}}, {2}, false, false, NONE},
    {"gelu", f_gelu, 1, {2}, {{3, 4}}, {1}, false, true, NONE},
    {"abs", f_abs, 1, {2}, {{3, 4}}, {0}, false, false, NONE},
    {"pow", f_pow, 1, {2}, {{3, 4}}, {1}, true, true, NONE},
    {"add_scalar", f_add_scalar, 1, {2}, {{3, 4}}, {3}, false, false, NONE},
    {"mul_scalar", f_mul_scalar, 1, {2}, {{3, 4}}, {1}, false, false, NONE},
    {"rsub_scalar", f_rsub_scalar, 1, {2}, {{3, 4}}, {2}, false, false, NONE},
    {"rdiv_scalar", f_rdiv_scalar, 1, {2}, {{3, 4}}, {0}, true, true, NONE},
    {"masked_fill", f_masked_fill, 1, {2}, {{3, 4}}, {1}, false, false, NONE},
    {"matmul", f_matmul, 2, {3, 2}, {{2, 3, 4}, {4, 5}}, {1, 2}, false, true, NONE},
    {"sum", f_sum, 1, {3}, {{3, 4, 5}}, {1}, false, false, NONE},
    {"mean", f_mean, 1, {3}, {{3, 4, 5}}, {2}, false, false, NONE},
    {"max", f_max, 1, {3}, {{3, 4, 5}}, {0}, false, false, NONE},
    {"softmax", f_softmax, 1, {2}, {{3, 7}}, {1}, false, true, NONE},
    {"log_softmax", f_log_softmax, 1, {2}, {{3, 7}}, {0}, false, true, NONE},
    {"logsumexp", f_logsumexp, 1, {2}, {{3, 7}}, {2}, false, true, NONE},
    {"reshape", f_reshape, 1, {2}, {{3, 4}}, {1}, false, false, NONE},
    {"permute", f_permute, 1, {3}, {{2, 3, 4}}, {2}, false, false, NONE},
    {"slice", f_slice, 1, {2}, {{3, 4}}, {0}, false, false, NONE},
    {"expand", f_expand, 1, {2}, {{3, 1}}, {1}, false, false, NONE},
    {"squeeze", f_squeeze, 1, {3}, {{3, 1, 4}}, {0}, false, false, NONE},
    {"concat", f_concat, 2, {2, 2}, {{3, 2}, {3, 4}}, {1, 0}, false, false, NONE},
    {"embedding", f_embedding, 1, {2}, {{7, 3}}, {1}, false, false, IDX_EMBEDDING},
    {"gather", f_gather, 1, {2}, {{3, 5}}, {2}, false, false, IDX_GATHER},
    {"linear", f_linear, 3, {3, 2, 1}, {{2, 3, 4}, {5, 4}, {5}}, {1, 0, 0}, false, true, NONE},
    {"mlp", f_mlp, 3, {3, 2, 2}, {{2, 3, 4}, {6, 4}, {5, 6}}, {1, 0, 1}, false, true, NONE},
    {"layer_norm", f_layer_norm, 1, {2}, {{3, 8}}, {0}, false, true, NONE},
    {"layer_norm_affine",
     f_layer_norm_affine,
     3,
     {2, 1, 1},
     {{3, 8}, {8}, {8}},
     {1, 0, 0},
     false,
     false,
     NONE},
    {"cross_entropy", f_cross_entropy, 1, {2}, {{4, 6}}, {1}, false, true, IDX_TARGETS},
    {"scaled_dot_product_attention",
     f_sdpa,
     3,
     {4, 4, 4},
     {{1, 2, 5, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}},
     {0, 0, 1},
     false,
     true,
     NONE},
    {"attention_qkv", f_attention_qkv, 1, {3}, {{2, 5, 12}}, {0}, false, false, NONE},
};

/* The int32 argument of a check, on the device. */
static awl_tensor *indices_for(int kind)
{
    switch (kind) {
    case IDX_EMBEDDING: {
        const double v[8] = {0, 6, 2, 2, 5, 1, 0, 3};
        return awl_gc_from_doubles(v, AWL_SHAPE(2, 4), AWL_I32);
    }
    case IDX_GATHER: {
        const double v[6] = {4, 0, 1, 1, 3, 2};
        return awl_gc_from_doubles(v, AWL_SHAPE(3, 2), AWL_I32);
    }
    case IDX_TARGETS: {
        const double v[4] = {2, 1, 5, 0}; /* row 1's target is ignore_index */
        return awl_gc_from_doubles(v, AWL_SHAPE(4), AWL_I32);
    }
    default: return NULL;
    }
}

/* Runs one check (first order, then second when it has one); the reason
 * it failed into why. */
static bool run_check(const grad_check *g, uint64_t seed, char *why, size_t size)
{
    awl_gc_begin(seed);
    awl_tensor *in[3];
    for (int i = 0; i < g->n; i++) {
        in[i] = awl_gc_layout(g->layout[i], g->ndim[i], g->shape[i], AWL_F64);
        if (in[i] && g->positive) awl_gc_make_positive(in[i]);
    }
    void *user = indices_for(g->indices);
    bool ok = true;
    for (int i = 0; i < g->n; i++) ok = ok && in[i];
    if (!ok) snprintf(why, size, "cannot make the inputs: %s", awl_last_error());
    if (ok && !awl_gradcheck(g->fn, user, g->n, in, g->name)) {
        ok = false;
        snprintf(why, size, "analytic and numeric gradients differ (details on stderr)%s%s",
                 awl_last_error()[0] ? ": " : "", awl_last_error());
    }
    if (ok && g->second && !awl_gradgradcheck(g->fn, user, g->n, in, g->name)) {
        ok = false;
        snprintf(why, size, "second-order gradients differ (details on stderr)%s%s",
                 awl_last_error()[0] ? ": " : "", awl_last_error());
    }
    if (!awl_gc_end() && ok) {
        ok = false;
        snprintf(why, size, "leaked device memory (see stderr)");
    }
    return ok;
}

int awl_check_grad(const awl_check_options *o, awl_check_counts *counts)
{
    int status = ac_open_device(o);
    if (status != AWL_OK) return status;
    FILE *f = o->out ? o->out : stdout;
    const char *device = o->device ? o->device : "cpu";
    awl_gc_set_device(device);
    awl_check_counts c = {0, 0, 0, 0};
    int n = (int)(sizeof CHECKS / sizeof CHECKS[0]);
    if (!o->json) fprintf(f, "awl-check --grad: device %s, %d ops, float64\n", device, n);
    for (int i = 0; i < n; i++) {
        const grad_check *g = &CHECKS[i];
        char name[48], why[640] = "", layout[64];
        snprintf(name, sizeof name, "grad.%s", g->name);
        if (o->op && o->op[0] && strcmp(o->op, g->name) != 0 && strcmp(o->op, name) != 0 &&
            strcmp(o->op, "grad") != 0)
            continue;
        snprintf(layout, sizeof layout, "%s%s", awl_gc_layout_name(g->layout[0]),
                 g->second ? ", and second order" : "");
        awl_clear_error();
        bool ok = run_check(g, (o->seed ? o->seed : 1) + (uint64_t)i, why, sizeof why);
        bool missing = !ok && strstr(why, "not implemented") != NULL;
        ac_print(o,
                 ok        ? "PASS"
                 : missing ? "MISSING"
                           : "FAIL",
                 name, "float64", layout, ok ? "" : why);
        if (ok)
            c.passed++;
        else if (missing)
            c.missing++;
        else
            c.failed++;
    }
    awl_gc_set_device(NULL);
    if (o->json)
        fprintf(f, "{\"summary\":true,\"passed\":%d,\"failed\":%d,\"missing\":%d}\n", c.passed,
                c.failed, c.missing);
    else
        fprintf(f, "%d passed, %d failed, %d missing\n", c.passed, c.failed, c.missing);
    if (counts) {
        counts->passed += c.passed;
        counts->failed += c.failed;
        counts->missing += c.missing;
    }
    return awl_check_status(&c);
}
