/*
 * tests/test_nn.c - modules, layers, initialisation and functional layers.
 *
 * - the module tree: dotted names in registration order, lookups, tied
 *   parameters listed once and kept tied by casts, train/eval, errors;
 * - float64 gradient checks (central differences, tests/helpers/gradcheck.h)
 *   of every layer, with the layer's parameters among the checked inputs;
 * - fused versus composed: cross-entropy, LayerNorm and attention give the
 *   same values, the same gradients and the same second-order gradients
 *   (create_graph, which the fused nodes answer with their composed formula)
 *   in float32, the dtype the CPU kernels handle;
 * - dropout's mask statistics and replay, init statistics, cross-entropy
 *   against hand-computed values and its ignore_index.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/gradcheck.h"
#include "nn/nn.h"
#include "tensor/profiler.h"

/* ---- helpers ------------------------------------------------------------------------------- */

/* Forward of a module (user) on inputs[0], or on a fixed index tensor. */
typedef struct module_call {
    awl_module *m;
    awl_tensor *idx; /* when set, the module's input instead of inputs[0] */
} module_call;

static awl_tensor *call_module(awl_tensor *const *in, void *user)
{
    module_call *c = user;
    return awl_module_forward(c->m, c->idx ? c->idx : in[0]);
}

/* Gradient check of m (converted to float64) with respect to x (when idx is
 * NULL) and every parameter. */
static bool check_module(awl_module *m, awl_tensor *x, awl_tensor *idx, const char *name)
{
    ck_assert_int_eq(awl_module_cast(m, AWL_F64), 0);
    awl_param_list ps = {0};
    ck_assert_int_ge(awl_module_parameters(m, &ps), 0);
    awl_tensor *in[64];
    int n = 0;
    if (!idx) in[n++] = x;
    for (int i = 0; i < ps.count; i++) in[n++] = ps.items[i].tensor;
    module_call c = {m, idx};
    bool ok = awl_gradcheck(call_module, &c, n, in, name);
    awl_param_list_clear(&ps);
    return ok;
}

/* Output and input gradients of f at in[0..n) for upstream u, as host
 * doubles (values[0] = output, values[1 + i] = gradient of input i). */
typedef awl_tensor *(*test_fn)(awl_tensor *const *in, void *user);

static void run_with_grads(test_fn f, void *user, int n, awl_tensor *const *in, double **values)
{
    awl_scope_begin();
    for (int i = 0; i < n; i++) awl_requires_grad_(in[i], true);
    awl_tensor *out = f(in, user);
    ck_assert_msg(out != NULL, "%s", awl_last_error());
    awl_manual_seed(99);
    awl_tensor *u = awl_randn(out->ndim, out->shape, out->dtype, awl_gc_device());
    awl_tensor *grads[8];
    awl_backward_options o = {.grad = u};
    ck_assert_msg(awl_grad(out, n, in, grads, &o) == 0, "%s", awl_last_error());
    values[0] = awl_gc_values(out);
    for (int i = 0; i < n; i++) values[1 + i] = awl_gc_values(grads[i]);
    awl_scope_end();
}

/* Second-order: d/dx_i of sum_j <dL/dx_j, v_j>, L = sum(f * u). */
static void run_second_order(test_fn f, void *user, int n, awl_tensor *const *in, double **values)
{
    awl_scope_begin();
    for (int i = 0; i < n; i++) awl_requires_grad_(in[i], true);
    awl_tensor *out = f(in, user);
    ck_assert_msg(out != NULL, "%s", awl_last_error());
    awl_manual_seed(98);
    awl_tensor *u = awl_randn(out->ndim, out->shape, out->dtype, awl_gc_device());
    awl_tensor *g[8], *h[8];
    awl_backward_options o = {.grad = u, .create_graph = true};
    ck_assert_msg(awl_grad(out, n, in, g, &o) == 0, "%s", awl_last_error());
    awl_tensor *s = NULL;
    for (int i = 0; i < n; i++) {
        awl_tensor *v = awl_randn(g[i]->ndim, g[i]->shape, g[i]->dtype, awl_gc_device());
        awl_tensor *term = awl_sum_all(awl_mul(g[i], v));
        s = s ? awl_add(s, term) : term;
    }
    ck_assert_msg(awl_grad(s, n, in, h, NULL) == 0, "%s", awl_last_error());
    for (int i = 0; i < n; i++) values[i] = awl_gc_values(h[i]);
    awl_scope_end();
}

/* Compares f with fused kernels on and off: values, gradients and (when
 * second) second-order gradients, in float32. */
static void compare_fused(test_fn f, void *user, int n, awl_tensor *const *in, bool second,
                          const char *name)
{
    int64_t sizes[9];
    double *fused[9] = {0}, *composed[9] = {0};
    bool was = awl_set_fused_kernels(true);
    run_with_grads(f, user, n, in, fused);
    awl_set_fused_kernels(false);
    run_with_grads(f, user, n, in, composed);
    awl_set_fused_kernels(was);
    awl_scope_begin();
    awl_tensor *probe = f(in, user);
    sizes[0] = awl_numel(probe);
    awl_scope_end();
    for (int i = 0; i < n; i++) sizes[1 + i] = awl_numel(in[i]);
    for (int i = 0; i <= n; i++) {
        ck_assert_msg(fused[i] && composed[i], "%s: missing result %d", name, i);
        ck_assert_msg(awl_gc_allclose(fused[i], composed[i], sizes[i], 2e-5, 2e-4, name),
                      "%s: %s differs", name, i == 0 ? "output" : "a gradient");
        free(fused[i]);
        free(composed[i]);
    }
    if (!second) return;
    awl_set_fused_kernels(true);
    run_second_order(f, user, n, in, fused);
    awl_set_fused_kernels(false);
    run_second_order(f, user, n, in, composed);
    awl_set_fused_kernels(was);
    for (int i = 0; i < n; i++) {
        /* NULL: the first gradients do not depend on input i (a bias) */
        if (!fused[i] || !composed[i]) {
            ck_assert_msg(!fused[i] && !composed[i], "%s: second-order gradient %d", name, i);
            continue;
        }
        ck_assert_msg(awl_gc_allclose(fused[i], composed[i], sizes[1 + i], 1e-4, 1e-3, name),
                      "%s: second-order gradient %d differs", name, i);
        free(fused[i]);
        free(composed[i]);
    }
}

static awl_tensor *int_tensor(const int32_t *v, int ndim, const int64_t *shape)
{
    return awl_from_data(v, ndim, shape, AWL_I32, awl_gc_device());
}

/* ---- the module tree -------------------------------------------------------------------- */

START_TEST(test_module_names)
{
    awl_gc_begin(1);
    const char *dev = awl_gc_device();
    awl_module *net =
        awl_sequential_new(4, (awl_module *[]){awl_linear_new(4, 8, true, dev), awl_gelu_new(),
                                               awl_residual_new(awl_linear_new(8, 8, false, dev)),
                                               awl_layer_norm_new(8, 1e-5, true, dev)});
    ck_assert_msg(net != NULL, "%s", awl_last_error());
    ck_assert_str_eq(net->type, "Sequential");
    awl_param_list ps = {0};
    ck_assert_int_eq(awl_module_parameters(net, &ps), 5);
    const char *want[] = {"0.weight", "0.bias", "2.fn.weight", "3.weight", "3.bias"};
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(ps.items[i].name, want[i]);
        ck_assert(ps.items[i].tensor->requires_grad);
        ck_assert(awl_is_leaf(ps.items[i].tensor));
    }
    ck_assert_int_eq(ps.items[0].tensor->shape[0], 8); /* (out, in) */
    ck_assert_int_eq(ps.items[0].tensor->shape[1], 4);
    ck_assert_int_eq(awl_module_num_params(net), 32 + 8 + 64 + 8 + 8);
    ck_assert_ptr_eq(awl_module_get_param(net, "2.fn.weight"), ps.items[2].tensor);
    ck_assert_ptr_null(awl_module_get_param(net, "2.fn.bias"));
    ck_assert_ptr_null(awl_module_get_param(net, "7.weight"));
    ck_assert_str_eq(awl_module_get_child(net, "2.fn")->type, "Linear");
    ck_assert_str_eq(awl_module_get_child(net, "3")->type, "LayerNorm");

    /* forward through all of it, and train/eval reaches every descendant */
    awl_tensor *x = awl_randn(AWL_SHAPE(3, 4), AWL_F32, dev);
    awl_tensor *y = awl_module_forward(net, x);
    ck_assert_msg(y && awl_gc_has_shape(y, AWL_SHAPE(3, 8)), "%s", awl_last_error());
    awl_module_train(net, false);
    ck_assert(!awl_module_get_child(net, "2.fn")->training);
    awl_module_train(net, true);
    ck_assert(awl_module_get_child(net, "2.fn")->training);

    /* the printed tree */
    char text[1024] = {0};
    FILE *f = fmemopen(text, sizeof text - 1, "w");
    awl_module_fprint(f, net);
    fclose(f);
    ck_assert_msg(strstr(text, "Sequential\n  0: Linear\n    weight (8,4) float32\n") == text &&
                      strstr(text, "  2: Residual\n    fn: Linear\n      weight (8,8) float32\n"),
                  "%s", text);

    /* a duplicate name is refused and the duplicate freed */
    ck_assert_int_lt(awl_module_add_child(net, "1", awl_gelu_new()), 0);
    ck_assert(strstr(awl_last_error(), "already has a member named '1'") != NULL);
    /* containers have no forward */
    awl_module *dict = awl_module_container_new("ModuleDict");
    ck_assert_ptr_null(awl_module_forward(dict, x));
    ck_assert(strstr(awl_last_error(), "ModuleDict has no forward") != NULL);
    awl_module_free(dict);

    awl_param_list_clear(&ps);
    awl_module_free(net);
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_module_errors_and_ties)
{
    awl_gc_begin(2);
    const char *dev = awl_gc_device();
    /* bad sizes, and a NULL child anywhere, give NULL without leaks */
    ck_assert_ptr_null(awl_linear_new(0, 3, true, dev));
    ck_assert(strstr(awl_last_error(), "awl_linear_new: sizes must be positive") != NULL);
    ck_assert_ptr_null(awl_sequential_new(
        3, (awl_module *[]){awl_linear_new(2, 2, true, dev), NULL, awl_gelu_new()}));
    ck_assert_ptr_null(awl_residual_new(NULL));
    ck_assert_ptr_null(awl_causal_self_attention_new(10, 3, 0.0, true, dev));
    ck_assert_ptr_null(awl_linear_new(2, 2, true, "nosuchdevice"));
    ck_assert_ptr_null(awl_dropout_new(1.5));
    ck_assert_ptr_null(awl_module_forward(NULL, NULL));

    /* one tensor registered twice (a tied weight): listed once, counted once,
     * still shared after a cast */
    awl_module *a = awl_linear_new(3, 3, false, dev), *b = awl_linear_new(3, 3, false, dev);
    awl_module *pair = awl_sequential_new(2, (awl_module *[]){a, b});
    awl_tensor *shared = awl_retain(awl_module_get_param(a, "weight"));
    ck_assert_int_eq(awl_module_add_param(b, "tied", &shared), 0);
    ck_assert_int_eq(awl_module_num_params(pair), 18);
    ck_assert_int_eq(awl_module_cast(pair, AWL_F64), 0);
    ck_assert_ptr_eq(awl_module_get_param(pair, "0.weight"), awl_module_get_param(pair, "1.tied"));
    ck_assert_int_eq(awl_module_get_param(pair, "1.tied")->dtype, AWL_F64);
    ck_assert(awl_module_get_param(pair, "1.weight")->requires_grad);
    ck_assert_int_eq(awl_module_to(pair, dev), 0); /* already there: a no-op */
    ck_assert_int_lt(awl_module_cast(pair, AWL_I32), 0);
    if (!awl_device_available("cuda:0")) ck_assert_int_lt(awl_module_to(pair, "cuda:0"), 0);
    ck_assert_int_eq(awl_module_get_param(pair, "0.weight")->dtype, AWL_F64);

    /* zero_grad drops gradients */
    awl_tensor *x = awl_randn(AWL_SHAPE(2, 3), AWL_F64, dev);
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_module_forward(pair, x))), 0);
    ck_assert_ptr_nonnull(awl_module_get_param(pair, "1.weight")->grad);
    awl_module_zero_grad(pair);
    ck_assert_ptr_null(awl_module_get_param(pair, "1.weight")->grad);
    awl_module_free(pair);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- layers: float64 gradient checks ------------------------------------------------- */

START_TEST(test_linear)
{
    awl_gc_begin(3);
    const char *dev = awl_gc_device();
    /* forward by hand: y = x W^T + b */
    double xv[] = {1, 2, 3, 4, 5, 6}, wv[] = {1, 0, -1, 2, 1, 0}, bv[] = {0.5, -1};
    awl_tensor *x = awl_gc_from_doubles(xv, AWL_SHAPE(2, 3), AWL_F64);
    awl_tensor *w = awl_gc_from_doubles(wv, AWL_SHAPE(2, 3), AWL_F64);
    awl_tensor *b = awl_gc_from_doubles(bv, AWL_SHAPE(2), AWL_F64);
    double *y = awl_gc_values(awl_linear(x, w, b));
    double want[] = {1 - 3 + 0.5, 2 + 2 - 1, 4 - 6 + 0.5, 8 + 5 - 1};
    ck_assert(awl_gc_allclose(y, want, 4, 1e-12, 0, "linear"));
    free(y);
    ck_assert_ptr_null(awl_linear(x, b, NULL));
    ck_assert(strstr(awl_last_error(), "awl_linear: input (2,3) does not match weight (2)") !=
              NULL);
    ck_assert_ptr_null(awl_linear(x, w, w));

    for (int layout = 0; layout < 3; layout++) {
        awl_module *lin = awl_linear_new(4, 3, layout != 1, dev);
        awl_tensor *in = awl_gc_layout(layout, AWL_SHAPE(2, 3, 4), AWL_F64);
        ck_assert_msg(check_module(lin, in, NULL, "Linear"), "layout %s",
                      awl_gc_layout_name(layout));
        awl_module_free(lin);
    }
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_embedding_layernorm_gelu)
{
    awl_gc_begin(4);
    const char *dev = awl_gc_device();
    awl_module *emb = awl_embedding_new(5, 3, dev);
    int32_t iv[] = {0, 4, 4, 2, 1, 0};
    awl_tensor *idx = int_tensor(iv, AWL_SHAPE(2, 3));
    ck_assert(check_module(emb, NULL, idx, "Embedding"));
    awl_module_free(emb);

    for (int bias = 0; bias < 2; bias++) {
        awl_module *ln = awl_layer_norm_new(6, 1e-5, bias, dev);
        /* non-trivial weight and bias */
        awl_init_normal_(awl_module_get_param(ln, "weight"), 1.0, 0.5);
        if (bias) awl_init_normal_(awl_module_get_param(ln, "bias"), 0.0, 0.5);
        ck_assert(check_module(ln, awl_gc_permuted(AWL_SHAPE(2, 4, 6)), NULL, "LayerNorm"));
        awl_module_free(ln);
    }
    awl_tensor *x = awl_gc_randn(AWL_SHAPE(3, 5));
    awl_module *gelu = awl_gelu_new();
    ck_assert(check_module(gelu, x, NULL, "GELU"));
    awl_module_free(gelu);
    ck_assert(awl_gc_end());
}
END_TEST

static awl_tensor *call_layer_norm(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_layer_norm(in[0], in[1], in[2], 1e-5);
}

/* The same with the weight and bias every second element of in[1], in[2]. */
static awl_tensor *call_layer_norm_strided(awl_tensor *const *in, void *user)
{
    (void)user;
    const int64_t n = in[1]->shape[0];
    return awl_layer_norm(in[0], awl_slice(in[1], 0, 0, n, 2), awl_slice(in[2], 0, 0, n, 2), 1e-5);
}

/* Whether a result from strided weight and bias (b) is the one from
 * contiguous ones (a): the same bits on the CPU, whose kernels copy a
 * strided weight to unit stride and run the same loops; within float32
 * rounding elsewhere (the CUDA kernel keeps a row in registers, in 16-byte
 * packs, only for a unit-stride weight, and its general path sums a row in
 * another order). */
static bool same_result(double a, double b, bool exact)
{
    return exact ? a == b : fabs(a - b) <= 1e-5 * (fabs(a) + fabs(b)) + 1e-6;
}

/* A weight and bias that are strided views give the result, forward and
 * backward, of contiguous ones. */
START_TEST(test_layer_norm_strided_params)
{
    awl_gc_begin(30);
    const int64_t C = 40;
    const bool exact = strcmp(awl_gc_device(), "cpu") == 0;
    awl_tensor *x = awl_gc_randn_dtype(2, (int64_t[]){8, C}, AWL_F32);
    awl_tensor *wide_w = awl_gc_randn_dtype(1, (int64_t[]){2 * C}, AWL_F32);
    awl_tensor *wide_b = awl_gc_randn_dtype(1, (int64_t[]){2 * C}, AWL_F32);
    awl_tensor *w = awl_contiguous(awl_slice(wide_w, 0, 0, 2 * C, 2));
    awl_tensor *b = awl_contiguous(awl_slice(wide_b, 0, 0, 2 * C, 2));
    double *plain[4], *strided[4];
    run_with_grads(call_layer_norm, NULL, 3, (awl_tensor *const[]){x, w, b}, plain);
    run_with_grads(call_layer_norm_strided, NULL, 3, (awl_tensor *const[]){x, wide_w, wide_b},
                   strided);
    for (int64_t i = 0; i < 8 * C; i++) {
        ck_assert_msg(same_result(plain[0][i], strided[0][i], exact), "out[%lld]: %.9g vs %.9g",
                      (long long)i, plain[0][i], strided[0][i]);
        ck_assert_msg(same_result(plain[1][i], strided[1][i], exact), "dx[%lld]: %.9g vs %.9g",
                      (long long)i, plain[1][i], strided[1][i]);
    }
    for (int64_t j = 0; j < C; j++)
        for (int t = 2; t < 4; t++)
            ck_assert_msg(same_result(plain[t][j], strided[t][2 * j], exact) &&
                              strided[t][2 * j + 1] == 0.0,
                          "%s[%lld]: %.9g vs %.9g", t == 2 ? "dweight" : "dbias", (long long)j,
                          plain[t][j], strided[t][2 * j]);
    for (int t = 0; t < 4; t++) {
        free(plain[t]);
        free(strided[t]);
    }
    ck_assert(awl_gc_end());
}
END_TEST

static awl_tensor *call_sdpa(awl_tensor *const *in, void *user)
{
    return awl_scaled_dot_product_attention(in[0], in[1], in[2], *(bool *)user, 0.0);
}

static awl_tensor *call_qkv(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_attention_qkv(in[0], 2, true, 0.0);
}

/* Dropout 0.25 from one generator state on every call, so that each run
 * (fused or composed, first or second order) draws the same mask. */
static awl_tensor *call_qkv_dropout(awl_tensor *const *in, void *user)
{
    (void)user;
    awl_rng_set_state(42, 3);
    return awl_attention_qkv(in[0], 2, true, 0.25);
}

static awl_tensor *call_sdpa_dropout(awl_tensor *const *in, void *user)
{
    awl_rng_set_state(43, 1);
    return awl_scaled_dot_product_attention(in[0], in[1], in[2], *(bool *)user, 0.25);
}

static awl_tensor *call_dropout(awl_tensor *const *in, void *user)
{
    (void)user;
    awl_rng_set_state(44, 5);
    return awl_dropout(in[0], 0.3, true);
}

static awl_tensor *call_dropout_add(awl_tensor *const *in, void *user)
{
    awl_rng_set_state(45, 2);
    return awl_dropout_add(in[0], in[1], user ? *(double *)user : 0.3, true);
}

static awl_tensor *call_dropout_add_ln(awl_tensor *const *in, void *user)
{
    awl_rng_set_state(48, 5);
    awl_tensor *sum,
        *out = awl_dropout_add_layer_norm_to(in[0], in[1], user ? *(double *)user : 0.3, true,
                                             in[2], in[3], 1e-5, in[0]->dtype, &sum);
    return out ? awl_add(out, sum) : NULL;
}

static awl_tensor *call_add_dropout(awl_tensor *const *in, void *user)
{
    awl_rng_set_state(46, 9);
    return awl_add_dropout(in[0], in[1], user ? *(double *)user : 0.3, true);
}

START_TEST(test_attention)
{
    awl_gc_begin(5);
    const char *dev = awl_gc_device();
    for (int causal = 0; causal < 2; causal++) {
        bool c = causal;
        awl_tensor *in[3] = {awl_gc_randn(AWL_SHAPE(2, 2, 4, 3)),
                             awl_gc_permuted(AWL_SHAPE(2, 2, 4, 3)),
                             awl_gc_randn(AWL_SHAPE(2, 2, 4, 3))};
        ck_assert(awl_gradcheck(call_sdpa, &c, 3, in, "sdpa"));
    }
    /* causal: query 0 sees only key 0, so out[.., 0, :] = v[.., 0, :] */
    awl_tensor *q = awl_gc_randn(AWL_SHAPE(1, 1, 3, 2)), *v = awl_gc_randn(AWL_SHAPE(1, 1, 3, 2));
    double *o = awl_gc_values(awl_scaled_dot_product_attention(q, q, v, true, 0.0));
    double *vv = awl_gc_values(v);
    ck_assert(awl_gc_allclose(o, vv, 2, 1e-12, 0, "causal first row"));
    free(o);
    free(vv);
    ck_assert_ptr_null(
        awl_scaled_dot_product_attention(q, awl_gc_randn(AWL_SHAPE(1, 1, 3, 5)), v, true, 0.0));
    ck_assert(strstr(awl_last_error(), "awl_scaled_dot_product_attention: q (1,1,3,2)") != NULL);

    awl_tensor *qkv = awl_gc_randn(AWL_SHAPE(2, 3, 12));
    ck_assert(awl_gradcheck(call_qkv, NULL, 1, &qkv, "attention_qkv"));
    ck_assert_ptr_null(awl_attention_qkv(qkv, 5, true, 0.0));

    awl_module *attn = awl_causal_self_attention_new(8, 2, 0.0, true, dev);
    ck_assert(check_module(attn, awl_gc_randn(AWL_SHAPE(2, 3, 8)), NULL, "CausalSelfAttention"));
    awl_module_free(attn);
    ck_assert(awl_gc_end());
}
END_TEST

/* awl_mlp(x, w1, b1, w2, b2), or without biases when user is set. */
static awl_tensor *call_mlp(awl_tensor *const *in, void *user)
{
    if (user) return awl_mlp(in[0], in[1], NULL, in[2], NULL);
    return awl_mlp(in[0], in[1], in[2], in[3], in[4]);
}

START_TEST(test_block_mlp)
{
    awl_gc_begin(6);
    const char *dev = awl_gc_device();
    awl_module *mlp = awl_mlp_new(4, 0.0, true, dev);
    ck_assert(check_module(mlp, awl_gc_randn(AWL_SHAPE(2, 3, 4)), NULL, "MLP"));
    awl_module_free(mlp);
    /* awl_mlp itself: x in every layout (the fused products take x's rows
     * in place or through a copy), a transposed w2, and no biases */
    for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
        awl_tensor *in[5] = {awl_gc_layout(layout, AWL_SHAPE(2, 3, 4), AWL_F64),
                             awl_gc_randn(AWL_SHAPE(6, 4)), awl_gc_randn(AWL_SHAPE(6)),
                             awl_gc_permuted(AWL_SHAPE(5, 6)), awl_gc_randn(AWL_SHAPE(5))};
        ck_assert_msg(awl_gradcheck(call_mlp, NULL, 5, in, "mlp"), "layout %s",
                      awl_gc_layout_name(layout));
    }
    bool no_bias = true;
    awl_tensor *nb[3] = {awl_gc_randn(AWL_SHAPE(3, 4)), awl_gc_randn(AWL_SHAPE(6, 4)),
                         awl_gc_randn(AWL_SHAPE(4, 6))};
    ck_assert(awl_gradcheck(call_mlp, &no_bias, 3, nb, "mlp without biases"));
    ck_assert_ptr_null(awl_mlp(nb[0], nb[1], NULL, nb[1], NULL));
    ck_assert_ptr_nonnull(
        strstr(awl_last_error(), "awl_mlp: input (3,4), w1 (6,4) and w2 (6,4) do not chain"));
    awl_clear_error();
    awl_module *block = awl_block_new(8, 2, 0.0, true, dev);
    awl_param_list ps = {0};
    awl_module_parameters(block, &ps);
    const char *want[] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                          "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                          "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                          "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    ck_assert_int_eq(ps.count, 12);
    for (int i = 0; i < 12; i++) ck_assert_str_eq(ps.items[i].name, want[i]);
    awl_param_list_clear(&ps);
    ck_assert(check_module(block, awl_gc_randn(AWL_SHAPE(2, 3, 8)), NULL, "Block"));
    awl_module_free(block);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- fused versus composed ------------------------------------------------------------ */

static awl_tensor *call_ce(awl_tensor *const *in, void *user)
{
    return awl_cross_entropy(in[0], user, 2);
}

static awl_tensor *call_ln(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_layer_norm(in[0], in[1], in[2], 1e-5);
}

/* Two pre-LayerNorm residual steps, as a GPT's blocks make them: h = x +
 * ln_1(x), then h + ln_2(h) (in: x, then each LayerNorm's weight and bias). */
static awl_tensor *call_ln_residual(awl_tensor *const *in, void *user)
{
    (void)user;
    awl_tensor *h = awl_add(in[0], awl_layer_norm(in[0], in[1], in[2], 1e-5));
    return awl_add(h, awl_layer_norm(h, in[3], in[4], 1e-5));
}

/* awl_grad(y, n, in, grads, opts) under the op profiler; calls[k]: the
 * calls of the kernels named names[k] in it. */
/* calls[j]: the kernels named names[j] the profiler has recorded. */
static void profiled_calls(int k, const char *const *names, int64_t *calls)
{
    awl_profile_totals t;
    ck_assert_int_eq(awl_profiler_totals(&t), 0);
    for (int j = 0; j < k; j++) {
        calls[j] = 0;
        for (int i = 0; i < t.n_ops; i++)
            if (strcmp(t.ops[i].name, names[j]) == 0) calls[j] += t.ops[i].calls;
    }
    awl_profile_totals_free(&t);
}

static void grad_profiled(awl_tensor *y, int n, awl_tensor *const *in, awl_tensor **grads,
                          const awl_backward_options *opts, int k, const char *const *names,
                          int64_t *calls)
{
    awl_profiler_clear();
    ck_assert_int_eq(awl_profiler_start(), 0);
    ck_assert_int_eq(awl_grad(y, n, in, grads, opts), 0);
    awl_profiler_stop();
    profiled_calls(k, names, calls);
    awl_profiler_clear();
}

/* The kernels named `name` in the backward of sum(f(in)) to in[0..n). */
static int64_t backward_calls(test_fn f, int n, awl_tensor *const *in, const char *name)
{
    awl_scope_begin();
    awl_tensor *grads[8];
    int64_t calls;
    grad_profiled(awl_sum_all(f(in, NULL)), n, in, grads, NULL, 1, &name, &calls);
    awl_scope_end();
    return calls;
}

START_TEST(test_fused_vs_composed)
{
    awl_gc_begin(7);
    /* cross-entropy over (B, T, V) with row targets equal to 2 ignored */
    int32_t tv[] = {0, 2, 6, 3, 1, 2, 5, 4};
    awl_tensor *targets = int_tensor(tv, AWL_SHAPE(2, 4));
    awl_tensor *logits =
        awl_mul_scalar(awl_randn(AWL_SHAPE(2, 4, 7), AWL_F32, awl_gc_device()), 3.0);
    compare_fused(call_ce, targets, 1, &logits, true, "cross_entropy");

    awl_tensor *ln_in[3] = {awl_randn(AWL_SHAPE(3, 5, 16), AWL_F32, awl_gc_device()),
                            awl_randn(AWL_SHAPE(16), AWL_F32, awl_gc_device()),
                            awl_randn(AWL_SHAPE(16), AWL_F32, awl_gc_device())};
    compare_fused(call_ln, NULL, 3, ln_in, true, "layer_norm");
    /* the residual's gradient added by LayerNorm's backward kernel
     * (awl_node_take_pending_grad), not by an add of the engine's */
    awl_tensor *res_in[5] = {ln_in[0], ln_in[1], ln_in[2],
                             awl_randn(AWL_SHAPE(16), AWL_F32, awl_gc_device()),
                             awl_randn(AWL_SHAPE(16), AWL_F32, awl_gc_device())};
    compare_fused(call_ln_residual, NULL, 5, res_in, true, "layer_norm residual");
    ck_assert_int_eq(backward_calls(call_ln_residual, 5, res_in, "layernorm_backward"), 2);
    ck_assert_int_eq(backward_calls(call_ln_residual, 5, res_in, "add"), 0);

    /* attention on head views of one packed tensor, as a GPT makes them */
    awl_tensor *qkv = awl_randn(AWL_SHAPE(2, 6, 24), AWL_F32, awl_gc_device());
    compare_fused(call_qkv, NULL, 1, &qkv, true, "attention_qkv");
    awl_tensor *qkv4 = awl_tensor_permute(awl_tensor_reshape(qkv, AWL_SHAPE(2, 6, 3, 2, 4)),
                                          (int[]){2, 0, 3, 1, 4});
    awl_tensor *heads[3];
    for (int i = 0; i < 3; i++)
        heads[i] = awl_tensor_detach(awl_tensor_squeeze(awl_tensor_slice(qkv4, 0, i, i + 1, 1), 0));
    bool causal = true;
    compare_fused(call_sdpa, &causal, 3, heads, true, "sdpa");

    /* with dropout: the fused kernels drop what the composed path drops from
     * the same generator state (the second-order run checks the mask the
     * fused node's create_graph backward draws again) */
    compare_fused(call_qkv_dropout, NULL, 1, &qkv, true, "attention_qkv dropout");
    compare_fused(call_sdpa_dropout, &causal, 3, heads, true, "sdpa dropout");
    bool full = false;
    compare_fused(call_sdpa_dropout, &full, 3, heads, false, "sdpa dropout, no mask");
    compare_fused(call_dropout, NULL, 1, &qkv, false, "dropout");
    awl_tensor *res[2] = {awl_randn(AWL_SHAPE(3, 40), AWL_F32, awl_gc_device()),
                          awl_randn(AWL_SHAPE(3, 40), AWL_F32, awl_gc_device())};
    compare_fused(call_dropout_add, NULL, 2, res, false, "dropout_add");
    double p0 = 0.0;
    compare_fused(call_dropout_add, &p0, 2, res, false, "dropout_add, p = 0");
    /* add_dropout: h one row of x's, repeated (a GPT's position embeddings) */
    awl_tensor *emb[2] = {awl_randn(AWL_SHAPE(2, 3, 40), AWL_F32, awl_gc_device()),
                          awl_randn(AWL_SHAPE(3, 40), AWL_F32, awl_gc_device())};
    compare_fused(call_add_dropout, NULL, 2, emb, false, "add_dropout");
    /* the MLP: its GELU in the first product's epilogue and in the product
     * that gives dpre; x a permuted view */
    awl_tensor *mlp_in[5] = {
        awl_tensor_permute(awl_randn(AWL_SHAPE(5, 3, 16), AWL_F32, awl_gc_device()),
                           (int[]){1, 0, 2}),
        awl_randn(AWL_SHAPE(24, 16), AWL_F32, awl_gc_device()),
        awl_randn(AWL_SHAPE(24), AWL_F32, awl_gc_device()),
        awl_randn(AWL_SHAPE(16, 24), AWL_F32, awl_gc_device()),
        awl_randn(AWL_SHAPE(16), AWL_F32, awl_gc_device())};
    compare_fused(call_mlp, NULL, 5, mlp_in, true, "mlp");
    bool no_bias = true;
    awl_tensor *mlp_nb[3] = {mlp_in[0], mlp_in[1], mlp_in[3]};
    compare_fused(call_mlp, &no_bias, 3, mlp_nb, true, "mlp without biases");
    {
        awl_scope_begin();
        int64_t n = awl_numel(qkv);
        double *plain = awl_gc_values(awl_attention_qkv(qkv, 2, true, 0.0));
        double *dropped = awl_gc_values(call_qkv_dropout(&qkv, NULL));
        int64_t same = 0;
        for (int64_t i = 0; i < n / 3; i++) same += plain[i] == dropped[i];
        ck_assert_msg(same < n / 3, "attention dropout changed nothing");
        free(plain);
        free(dropped);
        awl_scope_end();
    }

    /* the fused path really is one node, and the composed path is not */
    ck_assert_str_eq(call_ce(&logits, targets)->grad_fn->name, "cross_entropy");
    ck_assert_str_eq(call_ln(ln_in, NULL)->grad_fn->name, "layer_norm");
    ck_assert_str_eq(call_qkv(&qkv, NULL)->grad_fn->name, "attention_qkv");
    ck_assert_str_eq(call_sdpa(heads, &causal)->grad_fn->name, "scaled_dot_product_attention");
    ck_assert_str_eq(call_dropout_add(res, NULL)->grad_fn->name, "dropout_add");
    ck_assert_str_eq(call_add_dropout(emb, NULL)->grad_fn->name, "add_dropout");
    /* one node where the backend has the GELU products in float32 (the CPU;
     * CUDA has them in bfloat16 only) */
    ck_assert_str_eq(call_mlp(mlp_in, NULL)->grad_fn->name,
                     awl_fused_available(AWL_KERNEL_MATMUL_BIAS_GELU, mlp_in[0]) ? "mlp"
                                                                                 : "linear");
    /* add_dropout's out has x's dtype (a bfloat16 out of a float32 x is the
     * LayerNorm kernels' alone) */
    awl_dropout_args drop = {0.3, 1, 0};
    ck_assert_int_eq(awl_tensor_add_dropout(awl_zeros(AWL_SHAPE(2, 8), AWL_BF16, "cpu"),
                                            awl_ones(AWL_SHAPE(2, 8), AWL_F32, "cpu"),
                                            awl_ones(AWL_SHAPE(8), AWL_F32, "cpu"), &drop),
                     AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_tensor_add_dropout: out is bfloat16"));
    awl_clear_error();
    /* the GELU products check their operands before any kernel runs */
    awl_tensor *a = awl_ones(AWL_SHAPE(4, 3), AWL_F32, "cpu"),
               *w = awl_ones(AWL_SHAPE(3, 5), AWL_F32, "cpu");
    ck_assert_int_eq(awl_tensor_matmul_bias_gelu(awl_zeros(AWL_SHAPE(4, 5), AWL_F32, "cpu"),
                                                 awl_zeros(AWL_SHAPE(5, 4), AWL_F32, "cpu"), a, w,
                                                 NULL),
                     AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(
        awl_last_error(), "awl_tensor_matmul_bias_gelu: pre has shape (5,4), expected (4,5)"));
    awl_clear_error();
    ck_assert_int_eq(awl_tensor_matmul_gelu_backward(awl_zeros(AWL_SHAPE(4, 4), AWL_F32, "cpu"), a,
                                                     w, awl_zeros(AWL_SHAPE(4, 4), AWL_F32, "cpu")),
                     AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_tensor_matmul_gelu_backward: out (4,4) = "
                                                   "a (4,3) @ b (3,5) do not fit"));
    awl_clear_error();
    awl_set_fused_kernels(false);
    ck_assert_str_eq(call_dropout_add(res, NULL)->grad_fn->name, "add");
    ck_assert_str_ne(call_ce(&logits, targets)->grad_fn->name, "cross_entropy");
    ck_assert_str_ne(call_ln(ln_in, NULL)->grad_fn->name, "layer_norm");
    ck_assert_str_eq(call_mlp(mlp_in, NULL)->grad_fn->name, "linear");
    ck_assert_str_ne(call_qkv(&qkv, NULL)->grad_fn->name, "attention_qkv");
    awl_set_fused_kernels(true);
    /* attention dropout in training stays on the fused path */
    ck_assert_str_eq(awl_attention_qkv(qkv, 2, true, 0.1)->grad_fn->name, "attention_qkv");
    ck_assert(awl_gc_end());
}
END_TEST

/* sum(layer_norm(dropout_add(x, h, 0)) * r) + what extra adds: x float32,
 * h bfloat16 (a block's residual addition under autocast). extra 1: s * s
 * recorded before the LayerNorm, so that its gradient reaches the sum
 * after the LayerNorm's. */
static awl_tensor *residual_copy_loss(awl_tensor *const *in, int extra)
{
    awl_tensor *s2 = NULL, *s = awl_dropout_add(in[0], in[1], 0.0, true);
    if (extra) s2 = awl_sum_all(awl_mul(s, s));
    awl_tensor *y = awl_sum_all(awl_mul(awl_layer_norm(s, in[2], in[3], 1e-5), in[4]));
    return s2 ? awl_add(y, s2) : y;
}

/* A residual addition's and its LayerNorm's inputs, (B, T, C): the stream
 * x (float32), the branch h (in dtype ht), the LayerNorm's weight and bias,
 * each needing a gradient, and r (float32), a loss's weighting of the
 * output. */
static void residual_ln_inputs(const char *dev, int64_t B, int64_t T, int64_t C, awl_dtype ht,
                               awl_tensor **in)
{
    in[0] = awl_randn(AWL_SHAPE(B, T, C), AWL_F32, dev);
    in[1] = awl_cast(awl_randn(AWL_SHAPE(B, T, C), AWL_F32, dev), ht);
    in[2] = awl_randn(AWL_SHAPE(C), AWL_F32, dev);
    in[3] = awl_randn(AWL_SHAPE(C), AWL_F32, dev);
    in[4] = awl_randn(AWL_SHAPE(B, T, C), AWL_F32, dev);
    for (int i = 0; i < 4; i++) awl_requires_grad_(in[i], true);
}

/* Under autocast, the residual addition's backward hands its bfloat16
 * branch the cast of the stream's gradient; LayerNorm's backward kernel
 * writes that cast beside its own output (awl_node_offer_grad_copy), so
 * the backward runs no cast. h's gradient has the cast's bits either way,
 * and where another gradient reaches the sum after the LayerNorm's, the
 * copy is not made and the cast runs. */
START_TEST(test_residual_gradient_copy)
{
    const char *dev = awl_gc_device();
    for (int extra = 0; extra < 2; extra++) {
        awl_scope_begin();
        awl_tensor *in[5];
        residual_ln_inputs(dev, 3, 5, 16, AWL_BF16, in);
        awl_tensor *grads[2];
        int64_t calls[2]; /* layernorm_backward, copy (the cast) */
        grad_profiled(residual_copy_loss(in, extra), 2, in, grads, NULL, 2,
                      (const char *[]){"layernorm_backward", "copy"}, calls);
        ck_assert_int_eq(calls[0], 1);
        ck_assert_msg(extra ? calls[1] >= 1 : calls[1] == 0, "extra %d: %lld copy kernels", extra,
                      (long long)calls[1]);
        ck_assert_int_eq(grads[1]->dtype, AWL_BF16);
        double *dh = awl_gc_values(grads[1]), *cast = awl_gc_values(awl_cast(grads[0], AWL_BF16));
        for (int64_t i = 0; i < awl_numel(grads[1]); i++)
            ck_assert_msg(dh[i] == cast[i], "extra %d: dh[%lld] %.9g, cast of dx %.9g", extra,
                          (long long)i, dh[i], cast[i]);
        free(dh);
        free(cast);
        awl_scope_end();
    }
}
END_TEST

/* awl_dropout_add_layer_norm_to against awl_dropout_add then
 * awl_layer_norm_to from the same generator state: the same sum and output
 * bits and the same gradients, with and without dropout, for a float32 and
 * a bfloat16 branch (the kernel where the backend has it, the two ops
 * otherwise). */
static void dropout_add_ln_run(awl_tensor *const *in, double p, awl_dtype to, bool fused,
                               double **values)
{
    awl_scope_begin();
    awl_rng_set_state(47, 3);
    awl_tensor *sum, *out;
    if (fused) {
        out = awl_dropout_add_layer_norm_to(in[0], in[1], p, true, in[2], in[3], 1e-5, to, &sum);
    } else {
        sum = awl_dropout_add(in[0], in[1], p, true);
        out = awl_layer_norm_to(sum, in[2], in[3], 1e-5, to);
    }
    ck_assert_msg(out && sum, "%s", awl_last_error());
    /* a loss that weighs every output and reads the sum too */
    awl_tensor *loss = awl_add(awl_sum_all(awl_mul(awl_cast(out, AWL_F32), in[4])),
                               awl_sum_all(awl_mul(sum, in[4])));
    awl_tensor *grads[4];
    ck_assert_int_eq(awl_grad(loss, 4, in, grads, NULL), 0);
    values[0] = awl_gc_values(sum);
    values[1] = awl_gc_values(out);
    for (int i = 0; i < 4; i++) values[2 + i] = awl_gc_values(grads[i]);
    awl_scope_end();
}

START_TEST(test_dropout_add_layer_norm)
{
    const char *dev = awl_gc_device();
    for (int bf = 0; bf < 2; bf++)
        for (int drop = 0; drop < 2; drop++) {
            awl_scope_begin();
            awl_dtype ht = bf ? AWL_BF16 : AWL_F32;
            awl_tensor *in[5];
            residual_ln_inputs(dev, 4, 7, 64, ht, in);
            double p = drop ? 0.3 : 0.0, *one[6], *two[6];
            dropout_add_ln_run(in, p, ht, true, one);
            dropout_add_ln_run(in, p, ht, false, two);
            const int64_t n = 4 * 7 * 64, sizes[6] = {n, n, n, n, 64, 64};
            static const char *const what[6] = {"sum", "out", "dx", "dh", "dweight", "dbias"};
            for (int k = 0; k < 6; k++) {
                for (int64_t i = 0; i < sizes[k]; i++)
                    ck_assert_msg(one[k][i] == two[k][i], "%s h, p %g: %s[%lld] %.9g against %.9g",
                                  awl_dtype_name(ht), p, what[k], (long long)i, one[k][i],
                                  two[k][i]);
                free(one[k]);
                free(two[k]);
            }
            awl_scope_end();
        }
    /* the errors name the op and the operands */
    awl_scope_begin();
    awl_tensor *sum, *x = awl_zeros(AWL_SHAPE(2, 8), AWL_F32, dev);
    ck_assert_ptr_null(awl_dropout_add_layer_norm_to(x, awl_zeros(AWL_SHAPE(2, 4), AWL_F32, dev),
                                                     0.0, true, NULL, NULL, 1e-5, AWL_F32, &sum));
    ck_assert_ptr_null(sum);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_dropout_add_layer_norm: x float32 (2,8) "
                                                   "and h float32 (2,4)"));
    awl_clear_error();
    ck_assert_ptr_null(awl_dropout_add_layer_norm_to(
        x, x, 0.0, true, awl_zeros(AWL_SHAPE(4), AWL_F32, dev), NULL, 1e-5, AWL_F32, &sum));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_dropout_add_layer_norm: weight"));
    awl_clear_error();
    awl_scope_end();
}
END_TEST

/* linear(embedding(w, idx) r, head): a GPT's token embedding and output
 * head, tied when head is w. */
static awl_tensor *tied_out(awl_tensor *w, awl_tensor *head, awl_tensor *idx, awl_tensor *r)
{
    return awl_linear(awl_mul(awl_embedding(w, idx), r), head, NULL);
}

/* A weight used by an embedding and, later, by a product (tied): the
 * embedding's backward adds its rows into the gradient the product gave
 * the weight, so the backward neither fills zeros nor adds two tables; the
 * gradient is the two uses' gradients summed. */
START_TEST(test_tied_embedding_gradient)
{
    const char *dev = awl_gc_device();
    awl_scope_begin();
    int32_t ids[] = {3, 1, 3, 0, 5, 3};
    awl_tensor *idx = awl_from_data(ids, AWL_SHAPE(2, 3), AWL_I32, dev);
    awl_tensor *w = awl_requires_grad_(awl_randn(AWL_SHAPE(7, 4), AWL_F32, dev), true);
    awl_tensor *w2 = awl_requires_grad_(awl_tensor_clone(w), true);
    awl_tensor *r = awl_randn(AWL_SHAPE(2, 3, 4), AWL_F32, dev);
    awl_backward_options opts = {.grad = awl_randn(AWL_SHAPE(2, 3, 7), AWL_F32, dev)};
    awl_tensor *tied, *apart[2];
    int64_t calls[3]; /* index_add, fill, add */
    grad_profiled(tied_out(w, w, idx, r), 1, &w, &tied, &opts, 3,
                  (const char *[]){"index_add", "fill", "add"}, calls);
    ck_assert_int_eq(calls[0], 1);
    ck_assert_int_eq(calls[1], 0);
    ck_assert_int_eq(calls[2], 0);
    ck_assert_int_eq(awl_grad(tied_out(w, w2, idx, r), 2, (awl_tensor *[]){w, w2}, apart, &opts),
                     0);
    double *got = awl_gc_values(tied), *want = awl_gc_values(awl_add(apart[0], apart[1]));
    ck_assert(awl_gc_allclose(got, want, 28, 1e-6, 1e-6, "tied embedding gradient"));
    free(got);
    free(want);
    awl_scope_end();
}
END_TEST

START_TEST(test_cross_entropy_values)
{
    awl_gc_begin(8);
    double lv[] = {1, 2, 3, 0, 0, 0, -1, 5, 2};
    int32_t tv[] = {2, 1, 0};
    for (int f = 0; f < 2; f++) {
        awl_set_fused_kernels(f);
        awl_tensor *logits = awl_gc_from_doubles(lv, AWL_SHAPE(3, 3), AWL_F32);
        awl_tensor *t = int_tensor(tv, AWL_SHAPE(3));
        double l0 = log(exp(1) + exp(2) + exp(3)) - 3, l1 = log(3.0),
               l2 = log(exp(-1) + exp(5) + exp(2)) + 1;
        ck_assert_double_eq_tol(awl_item(awl_cross_entropy(logits, t, -100)), (l0 + l1 + l2) / 3,
                                1e-5);
        ck_assert_double_eq_tol(awl_item(awl_cross_entropy(logits, t, 1)), (l0 + l2) / 2, 1e-5);
        int32_t all_ignored[] = {7, 7, 7};
        ck_assert(
            isnan(awl_item(awl_cross_entropy(logits, int_tensor(all_ignored, AWL_SHAPE(3)), 7))));
        ck_assert_ptr_null(awl_cross_entropy(logits, int_tensor(tv, AWL_SHAPE(1, 3)), -1));
        ck_assert_ptr_null(awl_cross_entropy(logits, logits, -1));
    }
    awl_set_fused_kernels(true);
    /* float64 gradient check (composed: the CPU kernels are float32) */
    awl_tensor *logits = awl_gc_randn(AWL_SHAPE(2, 3, 4));
    int32_t t2[] = {0, 3, 1, 2, 2, 1}; /* call_ce ignores class 2 */
    awl_tensor *targets = int_tensor(t2, AWL_SHAPE(2, 3));
    ck_assert(awl_gradcheck(call_ce, targets, 1, &logits, "cross_entropy"));
    ck_assert(awl_gc_end());
}
END_TEST

/* The gradient the cross-entropy's forward writes (the backend's
 * cross_entropy_forward_backward) is what backward hands on where the loss
 * is the root: no cross-entropy kernel runs in backward, and the gradient
 * has the bits backward's own kernel gives where the loss is not the root
 * (times 1 after it, or a gradient of 1 given explicitly). With a scale,
 * the root's gradient is the scaled loss's, bit for bit too. float32, and
 * bfloat16 where the device has the kernel for it. */
static awl_tensor *call_ce_scaled(awl_tensor *const *in, void *user)
{
    return awl_cross_entropy_scaled(in[0], user, 2, 0.25);
}

START_TEST(test_cross_entropy_gradient_from_forward)
{
    awl_gc_begin(9);
    int32_t tv[] = {0, 2, 6, 3, 1, 2, 5, 4};
    awl_tensor *targets = int_tensor(tv, AWL_SHAPE(2, 4));
    static const char *const names[2] = {"cross_entropy_backward",
                                         "cross_entropy_forward_backward"};
    const awl_dtype dtypes[2] = {AWL_F32, AWL_BF16};
    for (int d = 0; d < 2; d++) {
        awl_tensor *logits = awl_tensor_cast(
            awl_mul_scalar(awl_randn(AWL_SHAPE(2, 4, 7), AWL_F32, awl_gc_device()), 3.0),
            dtypes[d]);
        if (!awl_fused_available(AWL_KERNEL_CROSS_ENTROPY_FORWARD_BACKWARD, logits)) continue;
        awl_requires_grad_(logits, true);
        for (int scaled = 0; scaled < 2; scaled++) {
            test_fn f = scaled ? call_ce_scaled : call_ce;
            awl_tensor *g[3];
            int64_t calls[3][2];
            /* the root; then times 1 after it; then a gradient of 1 given */
            awl_profiler_clear();
            ck_assert_int_eq(awl_profiler_start(), 0);
            awl_tensor *root = f(&logits, targets);
            awl_profiler_stop();
            int64_t forward_calls;
            profiled_calls(1, &names[1], &forward_calls);
            ck_assert_int_eq(forward_calls, 1);
            grad_profiled(root, 1, &logits, &g[0], NULL, 2, names, calls[0]);
            grad_profiled(awl_mul_scalar(f(&logits, targets), 1.0), 1, &logits, &g[1], NULL, 2,
                          names, calls[1]);
            awl_tensor *root2 = f(&logits, targets);
            awl_backward_options given = {.grad = awl_ones_like(root2)};
            grad_profiled(root2, 1, &logits, &g[2], &given, 2, names, calls[2]);
            ck_assert_int_eq(calls[0][0], 0); /* handed on */
            ck_assert_int_eq(calls[1][0], 1); /* computed again */
            ck_assert_int_eq(calls[2][0], 1);
            int64_t n = awl_numel(logits);
            double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
            ck_assert_int_eq(awl_to_host(awl_tensor_cast(g[0], AWL_F64), a, (size_t)n * 8), 0);
            for (int k = 1; k < 3; k++) {
                ck_assert_int_eq(awl_to_host(awl_tensor_cast(g[k], AWL_F64), b, (size_t)n * 8), 0);
                ck_assert_msg(memcmp(a, b, (size_t)n * sizeof *a) == 0,
                              "%s%s: the forward's gradient differs from backward's (case %d)",
                              awl_dtype_name(dtypes[d]), scaled ? ", scaled" : "", k);
            }
            free(a);
            free(b);
        }
    }
    /* the scale in float64 against finite differences (composed path) */
    awl_tensor *logits = awl_gc_randn(AWL_SHAPE(2, 3, 4));
    int32_t t2[] = {0, 3, 1, 2, 2, 1};
    ck_assert(awl_gradcheck(call_ce_scaled, int_tensor(t2, AWL_SHAPE(2, 3)), 1, &logits,
                            "cross_entropy_scaled"));
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- dropout and init ------------------------------------------------------------------ */

START_TEST(test_dropout)
{
    awl_gc_begin(9);
    const char *dev = awl_gc_device();
    int64_t n = 20000;
    awl_tensor *x = awl_requires_grad_(awl_ones(AWL_SHAPE(n), AWL_F32, dev), true);
    uint64_t seed, offset;
    awl_rng_get_state(&seed, &offset);
    awl_tensor *y = awl_dropout(x, 0.25, true);
    double *yv = awl_gc_values(y);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert(yv[i] == 0.0 || fabs(yv[i] - 1.0 / 0.75) < 1e-6);
        kept += yv[i] != 0.0;
    }
    ck_assert_double_eq_tol((double)kept / (double)n, 0.75, 0.015);
    /* the gradient is the mask; the same generator state replays the mask */
    ck_assert_int_eq(awl_backward(awl_sum_all(y)), 0);
    double *gv = awl_gc_values(x->grad);
    ck_assert(memcmp(gv, yv, (size_t)n * sizeof *gv) == 0);
    awl_rng_set_state(seed, offset);
    double *again = awl_gc_values(awl_dropout(x, 0.25, true));
    ck_assert(memcmp(again, yv, (size_t)n * sizeof *again) == 0);
    free(yv);
    free(gv);
    free(again);
    awl_clear_grad(x);

    /* a view whose rows do not merge (7 of every 8 elements): the kernel
     * meets runs that start inside a Philox block, and element e of the
     * output still follows common/dropout.h's mask */
    awl_tensor *rows = awl_slice(awl_ones(AWL_SHAPE(9, 8), AWL_F32, dev), 1, 0, 7, 1);
    awl_rng_get_state(&seed, &offset);
    double *rv = awl_gc_values(awl_dropout(rows, 0.25, true));
    for (int64_t e = 0; e < 9 * 7; e++)
        ck_assert_double_eq(rv[e],
                            awl_dropout_keep(seed, offset, (uint64_t)e, awl_dropout_threshold(0.25))
                                ? (double)(float)(1.0 / 0.75)
                                : 0.0);
    free(rv);

    /* evaluation mode and p = 0 are the identity; p = 1 zeroes; bad p fails */
    awl_module *drop = awl_dropout_new(0.5);
    awl_module_train(drop, false);
    awl_tensor *same = awl_module_forward(drop, x);
    ck_assert_ptr_eq(same->storage, x->storage);
    awl_module_free(drop);
    ck_assert_ptr_eq(awl_dropout(x, 0.0, true)->storage, x->storage);
    ck_assert_double_eq(awl_item(awl_sum_all(awl_dropout(x, 1.0, true))), 0.0);
    ck_assert_ptr_null(awl_dropout(x, -0.1, true));
    ck_assert(strstr(awl_last_error(), "awl_dropout: probability -0.1 is outside [0, 1]") != NULL);

    /* attention's mask: 8-bit decisions, so p acts rounded to a multiple
     * of 1/256, and kept weights are scaled by the inverse of the rate
     * actually kept; a row of 20 keys takes two blocks, its own */
    ck_assert_uint_eq(awl_attention_dropout_threshold(0.1), 230);
    ck_assert_uint_eq(awl_attention_dropout_threshold(0.2), 205);
    ck_assert_uint_eq(awl_attention_dropout_threshold(0.0), 256);
    ck_assert_uint_eq(awl_attention_dropout_threshold(1.0), 0);
    ck_assert_double_eq(awl_attention_dropout_scale(0), 0.0);
    ck_assert_double_eq(awl_attention_dropout_scale(205), 256.0 / 205.0);
    int64_t att_kept = 0;
    for (uint64_t r = 0; r < 4096; r++)
        for (int64_t j = 0; j < 20; j++) {
            bool k = awl_attention_dropout_keep(7, 3, r, j, 20, 230);
            ck_assert(
                k ==
                (awl_attention_dropout_bits(7, 3, r, (uint64_t)j / 16, 20, 230) >> (j % 16) & 1u));
            att_kept += k;
        }
    ck_assert_double_eq_tol((double)att_kept / (4096.0 * 20.0), 230.0 / 256.0, 0.005);
    ck_assert_uint_eq(awl_attention_dropout_bits(7, 3, 0, 1, 20, 230) & 15u,
                      awl_attention_dropout_bits(7, 3 + 1, 0, 0, 20, 230) & 15u);
    {
        /* through the attention itself: with equal scores every weight is
         * 1/T, so with v = 1 each output is (kept weights) * scale / T,
         * whose mean is 1: the dropout leaves the expectation alone */
        awl_scope_begin();
        int64_t B = 8, H = 4, T = 64, D = 8;
        awl_tensor *q = awl_zeros(AWL_SHAPE(B, H, T, D), AWL_F32, dev);
        awl_tensor *v = awl_ones(AWL_SHAPE(B, H, T, D), AWL_F32, dev);
        double mean = awl_item(awl_mean_all(awl_scaled_dot_product_attention(q, q, v, false, 0.1)));
        ck_assert_double_eq_tol(mean, 1.0, 0.01);
        awl_scope_end();
    }

    /* dropout_add: x + dropout(h); h a permuted view, then both contiguous
     * (the fused kernel where the backend has it for float64) */
    awl_tensor *xh[2] = {awl_gc_randn(AWL_SHAPE(2, 4, 6)), awl_gc_permuted(AWL_SHAPE(2, 4, 6))};
    ck_assert(awl_gradcheck(call_dropout_add, NULL, 2, xh, "dropout_add, permuted h"));
    xh[1] = awl_gc_randn(AWL_SHAPE(2, 4, 6));
    ck_assert(awl_gradcheck(call_dropout_add, NULL, 2, xh, "dropout_add"));
    double p0 = 0.0;
    ck_assert(awl_gradcheck(call_dropout_add, &p0, 2, xh, "dropout_add, p = 0"));
    /* dropout_add_layer_norm: the LayerNorm of the sum plus the sum, so
     * that both outputs carry gradient */
    awl_tensor *aln[4] = {awl_gc_randn(AWL_SHAPE(2, 4, 6)), awl_gc_randn(AWL_SHAPE(2, 4, 6)),
                          awl_gc_randn(AWL_SHAPE(6)), awl_gc_randn(AWL_SHAPE(6))};
    ck_assert(awl_gradcheck(call_dropout_add_ln, NULL, 4, aln, "dropout_add_layer_norm"));
    ck_assert(awl_gradcheck(call_dropout_add_ln, &p0, 4, aln, "dropout_add_layer_norm, p = 0"));
    /* a kept element is x + h / (1 - p), a dropped one x */
    awl_tensor *ones = awl_ones(AWL_SHAPE(n), AWL_F32, dev);
    double *sum = awl_gc_values(awl_dropout_add(ones, ones, 0.25, true));
    for (int64_t i = 0; i < n; i++)
        ck_assert(sum[i] == 1.0 || fabs(sum[i] - (1.0 + 1.0 / 0.75)) < 1e-6);
    free(sum);
    ck_assert_ptr_null(awl_dropout_add(ones, awl_ones(AWL_SHAPE(n + 1), AWL_F32, dev), 0.1, true));
    ck_assert(strstr(awl_last_error(),
                     "awl_dropout_add: x float32 (20000) and h float32 (20001)") != NULL);

    /* add_dropout: dropout(x + h), h over x's last axes; float64 composes */
    awl_tensor *xe[2] = {awl_gc_randn(AWL_SHAPE(2, 4, 6)), awl_gc_randn(AWL_SHAPE(4, 6))};
    ck_assert(awl_gradcheck(call_add_dropout, NULL, 2, xe, "add_dropout, h repeated"));
    xe[1] = awl_gc_permuted(AWL_SHAPE(2, 4, 6));
    ck_assert(awl_gradcheck(call_add_dropout, NULL, 2, xe, "add_dropout, permuted h"));
    ck_assert(awl_gradcheck(call_add_dropout, &p0, 2, xe, "add_dropout, p = 0"));
    /* a kept element is (x + h) / (1 - p), a dropped one 0 */
    awl_tensor *row = awl_ones(AWL_SHAPE(n / 4), AWL_F32, dev);
    double *both = awl_gc_values(
        awl_add_dropout(awl_ones(AWL_SHAPE(4, n / 4), AWL_F32, dev), row, 0.25, true));
    int64_t both_kept = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert(both[i] == 0.0 || fabs(both[i] - 2.0 / 0.75) < 1e-6);
        both_kept += both[i] != 0.0;
    }
    ck_assert_double_eq_tol((double)both_kept / (double)n, 0.75, 0.015);
    free(both);
    ck_assert_ptr_null(
        awl_add_dropout(row, awl_ones(AWL_SHAPE(4, n / 4), AWL_F32, dev), 0.1, true));
    ck_assert(strstr(awl_last_error(),
                     "awl_add_dropout: x float32 (5000) and h float32 (4,5000)") != NULL);
    ck_assert(awl_gc_end());
}
END_TEST

/* Sample mean and standard deviation of t's elements. */
static void moments(awl_tensor *t, double *mean, double *std)
{
    int64_t n = awl_numel(t);
    double *v = awl_gc_values(t), s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) s += v[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) ss += (v[i] - *mean) * (v[i] - *mean);
    *std = sqrt(ss / (double)n);
    free(v);
}

START_TEST(test_init)
{
    awl_gc_begin(10);
    const char *dev = awl_gc_device();
    awl_tensor *w = awl_empty(AWL_SHAPE(200, 300), AWL_F32, dev); /* fan_in 300, fan_out 200 */
    double mean, std;
    ck_assert_int_eq(awl_init_normal_(w, 1.0, 0.02), 0);
    moments(w, &mean, &std);
    ck_assert_double_eq_tol(mean, 1.0, 1e-3);
    ck_assert_double_eq_tol(std, 0.02, 5e-4);
    ck_assert_int_eq(awl_init_uniform_(w, -2.0, 2.0), 0);
    moments(w, &mean, &std);
    ck_assert_double_eq_tol(std, 4.0 / sqrt(12.0), 0.01);
    ck_assert_int_eq(awl_init_xavier_uniform_(w, 1.0), 0);
    moments(w, &mean, &std);
    ck_assert_double_eq_tol(std, sqrt(2.0 / 500.0), 1e-3); /* bound sqrt(6/500) */
    ck_assert_int_eq(awl_init_xavier_normal_(w, 2.0), 0);
    moments(w, &mean, &std);
    ck_assert_double_eq_tol(std, 2.0 * sqrt(2.0 / 500.0), 2e-3);
    ck_assert_int_eq(awl_init_kaiming_uniform_(w, 0.0, AWL_FAN_IN), 0);
    moments(w, &mean, &std);
    ck_assert_double_eq_tol(std, sqrt(2.0 / 300.0), 1e-3);
    ck_assert_int_eq(awl_init_kaiming_normal_(w, 1.0, AWL_FAN_OUT), 0);
    moments(w, &mean, &std);
    ck_assert_double_eq_tol(std, 1.0 / sqrt(200.0), 1e-3);
    ck_assert_int_eq(awl_init_constant_(w, 0.5), 0);
    moments(w, &mean, &std);
    ck_assert(mean == 0.5 && std == 0.0);
    /* fans need two axes; integers cannot be initialised */
    ck_assert_int_lt(awl_init_xavier_uniform_(awl_empty(AWL_SHAPE(5), AWL_F32, dev), 1.0), 0);
    ck_assert_int_lt(awl_init_normal_(awl_empty(AWL_SHAPE(5), AWL_I32, dev), 0, 1), 0);
    /* PyTorch's Linear default: U(-1/sqrt(in), 1/sqrt(in)) */
    awl_module *lin = awl_linear_new(400, 50, true, dev);
    moments(awl_module_get_param(lin, "weight"), &mean, &std);
    ck_assert_double_eq_tol(std, 1.0 / sqrt(400.0) / sqrt(3.0), 1e-3);
    awl_module_free(lin);
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("nn", test_module_names, test_module_errors_and_ties, test_linear,
                            test_embedding_layernorm_gelu, test_layer_norm_strided_params,
                            test_attention, test_block_mlp, test_fused_vs_composed,
                            test_residual_gradient_copy, test_dropout_add_layer_norm,
                            test_tied_embedding_gradient, test_cross_entropy_values,
                            test_cross_entropy_gradient_from_forward, test_dropout, test_init);
}
