/*
 * tests/test_autocast.c - bfloat16 mixed precision (nn/autocast.c, GPT's
 * awl_gpt_set_autocast).
 *
 * On any machine:
 * - the thread's autocast state: set/restore, which tensors awl_autocast
 *   casts, and that the cast carries a float32 gradient back;
 * - the weight-cast cache: awl_autocast hands out the cached cast (the
 *   bits of a cast of its own) until the cache is cleared, and the
 *   gradient comes back through it as through a cast;
 * - the CPU backend stores bfloat16 but refuses arithmetic on it, so
 *   awl_gpt_set_autocast on a CPU model fails with a message saying so and
 *   leaves the model training in float32, and a Linear layer under autocast
 *   on the CPU fails with the backend's message instead of computing.
 * With a CUDA device (the cases are skipped, with a message, without one):
 * - a small GPT's bf16 loss and gradients are within about 1e-2 of float32's,
 *   while parameters and gradients stay float32 and the loss is float32;
 * - awl_layer_norm_to (a bfloat16 LayerNorm output of a float32 x, on the
 *   CPU a cast after the float32 kernel, on CUDA rounded by the kernel) has
 *   the bits of awl_layer_norm then a cast, and its gradients agree with
 *   that path's to float32 rounding;
 * - checkpointed blocks replay under the autocast they ran with (the
 *   gradients equal the plain run's);
 * - a GPT forward that casts its weights all at once into the cache gives
 *   the loss and gradients of casting each at its point of use, bit for
 *   bit;
 * - the dropout of a float32 tensor into bfloat16 in one kernel (the
 *   backward of dropout_add's bfloat16 branch) has the bits of a cast then
 *   a dropout;
 * - AdamW steps under bf16 reduce the loss as float32's do, and generation
 *   works under autocast.
 *
 * A child forked after CUDA was initialised cannot use the device, so the
 * suite runs unforked when a GPU is there.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/gradcheck.h"
#include "nn/generate.h"
#include "nn/optim.h"

#define GPU "cuda:0"

/* ---- helpers ----------------------------------------------------------------------- */

/* A 2-layer GPT whose head dimension (64) is the tensor-core kernels'. */
static awl_gpt_config small_config(void)
{
    return (awl_gpt_config){.vocab = 65,
                            .block = 64,
                            .n_layer = 2,
                            .n_head = 2,
                            .n_embd = 128,
                            .batch = 4,
                            .dropout = 0.0,
                            .bias = true};
}

/* Pseudo-random token ids (B, T) in [0, vocab) on device. */
static awl_tensor *token_ids(int B, int T, int vocab, uint32_t seed, const char *device)
{
    int32_t *h = calloc((size_t)B * T, sizeof *h);
    for (int i = 0; i < B * T; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (int32_t)((seed >> 16) % (uint32_t)vocab);
    }
    awl_tensor *t = awl_from_data(h, AWL_SHAPE(B, T), AWL_I32, device);
    free(h);
    return t;
}

/* Random ids x (B, T) and targets y = (7 x + 3) mod vocab: a map a model
 * learns in a few dozen steps. */
static void mapped_batch(int B, int T, int vocab, uint32_t seed, const char *device, awl_tensor **x,
                         awl_tensor **y)
{
    *x = token_ids(B, T, vocab, seed, device);
    int32_t *h = calloc((size_t)B * T, sizeof *h);
    ck_assert(awl_to_host(*x, h, (size_t)B * T * sizeof *h) == 0);
    for (int i = 0; i < B * T; i++) h[i] = (7 * h[i] + 3) % vocab;
    *y = awl_from_data(h, AWL_SHAPE(B, T), AWL_I32, device);
    free(h);
}

/* Every parameter's gradient, concatenated on the host as doubles. */
static double *gather_grads(const awl_param_list *ps, int64_t *n)
{
    *n = awl_param_list_numel(ps);
    double *all = malloc((size_t)*n * sizeof *all);
    int64_t at = 0;
    for (int i = 0; i < ps->count; i++) {
        awl_tensor *t = ps->items[i].tensor;
        ck_assert_msg(t->grad != NULL, "%s has no gradient", ps->items[i].name);
        ck_assert_msg(t->grad->dtype == AWL_F32, "%s's gradient is %s", ps->items[i].name,
                      awl_dtype_name(t->grad->dtype));
        awl_scope_begin();
        awl_tensor *g = awl_tensor_cast(t->grad, AWL_F64);
        ck_assert(awl_to_host(g, all + at, (size_t)awl_numel(t) * sizeof *all) == 0);
        awl_scope_end();
        at += awl_numel(t);
    }
    return all;
}

/* ||a - b|| / ||b|| over n elements. */
static double rel_error(const double *a, const double *b, int64_t n)
{
    double diff = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        diff += (a[i] - b[i]) * (a[i] - b[i]);
        ref += b[i] * b[i];
    }
    return sqrt(diff / (ref > 0 ? ref : 1));
}

/* One forward and backward from zeroed gradients; returns the loss and
 * leaves the gradients in the parameters. */
static double loss_and_grads(awl_gpt *model, awl_tensor *x, awl_tensor *y)
{
    awl_module_zero_grad(awl_gpt_module(model));
    awl_scope_begin();
    awl_tensor *loss = awl_gpt_loss(model, x, y);
    ck_assert_msg(loss != NULL, "%s", awl_last_error());
    ck_assert_msg(loss->dtype == AWL_F32, "the loss is %s", awl_dtype_name(loss->dtype));
    ck_assert_msg(awl_backward(loss) == 0, "%s", awl_last_error());
    double value = awl_item(loss);
    awl_scope_end();
    return value;
}

/* The bytes of t (contiguous) on the host; free() them. */
static void *host_bytes(awl_tensor *t, size_t *n)
{
    *n = (size_t)awl_numel(t) * awl_dtype_size(t->dtype);
    void *h = malloc(*n);
    ck_assert_int_eq(awl_to_host(t, h, *n), 0);
    return h;
}

static void expect_same_bits(awl_tensor *a, awl_tensor *b, const char *what)
{
    ck_assert_msg(a && b, "%s: %s", what, awl_last_error());
    ck_assert_int_eq(a->dtype, b->dtype);
    size_t na, nb;
    void *ha = host_bytes(a, &na), *hb = host_bytes(b, &nb);
    ck_assert_msg(na == nb && memcmp(ha, hb, na) == 0, "%s: the bits differ", what);
    free(ha);
    free(hb);
}

/* ||a - b|| / ||b|| of two float tensors of one shape, through float64. */
static double tensor_rel_error(awl_tensor *a, awl_tensor *b)
{
    ck_assert_msg(a && b && awl_numel(a) == awl_numel(b), "%s", awl_last_error());
    int64_t n = awl_numel(a);
    double *ha = malloc((size_t)n * sizeof *ha), *hb = malloc((size_t)n * sizeof *hb);
    awl_scope_begin();
    ck_assert_int_eq(awl_to_host(awl_tensor_cast(a, AWL_F64), ha, (size_t)n * sizeof *ha), 0);
    ck_assert_int_eq(awl_to_host(awl_tensor_cast(b, AWL_F64), hb, (size_t)n * sizeof *hb), 0);
    awl_scope_end();
    double e = rel_error(ha, hb, n);
    free(ha);
    free(hb);
    return e;
}

/* awl_layer_norm_to(x, ..., bf16) against awl_cast(awl_layer_norm(x, ...),
 * bf16) on device (a GPT block's LayerNorms under autocast): the same
 * output bits, and from one bfloat16 output gradient the same dx, dweight
 * and dbias to float32 rounding (the same formula, but in kernels compiled
 * apart, whose multiply-adds the compiler may contract differently). */
static void layer_norm_to_matches_cast(const char *device)
{
    awl_scope_begin();
    awl_manual_seed(3);
    awl_tensor *x = awl_requires_grad_(awl_randn(AWL_SHAPE(300, 768), AWL_F32, device), true);
    awl_tensor *w = awl_requires_grad_(awl_randn(AWL_SHAPE(768), AWL_F32, device), true);
    awl_tensor *b = awl_requires_grad_(awl_randn(AWL_SHAPE(768), AWL_F32, device), true);
    awl_tensor *dy = awl_tensor_cast(awl_randn(AWL_SHAPE(300, 768), AWL_F32, device), AWL_BF16);
    awl_tensor *inputs[3] = {x, w, b}, *fused[3], *composed[3];
    awl_backward_options opts = {.grad = dy};
    awl_tensor *y1 = awl_layer_norm_to(x, w, b, 1e-5, AWL_BF16);
    awl_tensor *y2 = awl_cast(awl_layer_norm(x, w, b, 1e-5), AWL_BF16);
    expect_same_bits(y1, y2, "the output");
    ck_assert_int_eq(awl_grad(y1, 3, inputs, fused, &opts), 0);
    ck_assert_int_eq(awl_grad(y2, 3, inputs, composed, &opts), 0);
    const char *names[3] = {"dx", "dweight", "dbias"};
    for (int i = 0; i < 3; i++) {
        double e = tensor_rel_error(fused[i], composed[i]);
        printf("layer_norm_to on %s: %s against the cast path's, rel %.2e\n", device, names[i], e);
        ck_assert_msg(e < 1e-6, "%s differs from the cast path's by %g", names[i], e);
    }
    /* x's dtype, or bfloat16 for a float32 x: nothing else */
    ck_assert_ptr_null(awl_layer_norm_to(x, w, b, 1e-5, AWL_F64));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_layer_norm_to"));
    awl_clear_error();
    awl_scope_end();
}

/* ---- on any machine -------------------------------------------------------------- */

/* The CPU has no bfloat16 LayerNorm kernel: the float32 one, then a cast. */
START_TEST(test_layer_norm_to_cpu) { layer_norm_to_matches_cast("cpu"); }
END_TEST

/* The backward of sum(3 * xb) in float32, xb a bfloat16 cast of x (3, 4):
 * x's gradient is float32 threes. */
static void expect_gradient_through(awl_tensor *x, awl_tensor *xb)
{
    awl_tensor *loss = awl_sum_all(awl_mul_scalar(awl_cast(xb, AWL_F32), 3.0));
    ck_assert_msg(loss && awl_backward(loss) == 0, "%s", awl_last_error());
    ck_assert(x->grad && x->grad->dtype == AWL_F32);
    double *g = awl_gc_values(x->grad);
    for (int k = 0; k < 12; k++) ck_assert_double_eq(g[k], 3.0);
    free(g);
}

START_TEST(test_autocast_state)
{
    awl_gc_begin(1);
    ck_assert_int_eq(awl_autocast_get(), AWL_F32);
    ck_assert_int_eq(awl_autocast_set(AWL_BF16), AWL_F32);
    ck_assert_int_eq(awl_autocast_get(), AWL_BF16);
    /* an integer dtype is refused and changes nothing */
    ck_assert_int_eq(awl_autocast_set(AWL_I32), AWL_BF16);
    ck_assert(strstr(awl_last_error(), "not a float dtype") != NULL);
    ck_assert_int_eq(awl_autocast_get(), AWL_BF16);

    /* float32 is cast (differentiably), float64 and int32 are not */
    awl_tensor *x = awl_requires_grad_(awl_randn(AWL_SHAPE(3, 4), AWL_F32, "cpu"), true);
    awl_tensor *d = awl_randn(AWL_SHAPE(2), AWL_F64, "cpu");
    awl_tensor *i = awl_zeros(AWL_SHAPE(2), AWL_I32, "cpu");
    awl_tensor *xb = awl_autocast(x);
    ck_assert(xb && xb != x && xb->dtype == AWL_BF16 && xb->requires_grad);
    ck_assert_ptr_eq(awl_autocast(d), d);
    ck_assert_ptr_eq(awl_autocast(i), i);
    ck_assert_ptr_null(awl_autocast(NULL));
    ck_assert_int_eq(awl_autocast_set(AWL_F32), AWL_BF16);
    ck_assert_ptr_eq(awl_autocast(x), x); /* off */

    /* the gradient comes back float32, through the storage-only dtype */
    expect_gradient_through(x, xb);
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_autocast_cache)
{
    awl_gc_begin(6);
    awl_tensor *x = awl_requires_grad_(awl_randn(AWL_SHAPE(3, 4), AWL_F32, "cpu"), true);
    awl_tensor *w = awl_randn(AWL_SHAPE(5), AWL_F32, "cpu");
    awl_tensor *d = awl_randn(AWL_SHAPE(2), AWL_F64, "cpu");
    /* off: nothing cached */
    ck_assert_int_eq(awl_autocast_cache(1, &x), 0);
    ck_assert_ptr_eq(awl_autocast(x), x);

    awl_dtype before = awl_autocast_set(AWL_BF16);
    awl_tensor *own = awl_autocast(x); /* a cast of its own, for the bits */
    ck_assert_int_eq(awl_autocast_cache(4, (awl_tensor *[]){x, d, x, w}), 0);
    awl_tensor *xb = awl_autocast(x);
    ck_assert(xb && xb != own && xb->dtype == AWL_BF16 && xb->requires_grad);
    ck_assert_ptr_eq(awl_autocast(x), xb); /* the same cast every time */
    ck_assert(awl_autocast(w) && awl_autocast(w) == awl_autocast(w));
    ck_assert_ptr_eq(awl_autocast(d), d); /* float64 is not cast, nor cached */
    expect_same_bits(xb, own, "the cached cast");
    awl_tensor *other = awl_randn(AWL_SHAPE(2), AWL_F32, "cpu"); /* not in the cache */
    awl_tensor *ob = awl_autocast(other);
    ck_assert(ob && ob != awl_autocast(other) && ob->dtype == AWL_BF16);
    awl_autocast_cache_clear();
    ck_assert(awl_autocast(x) != xb);
    awl_autocast_set(before);

    /* the gradient comes back through the cached cast */
    expect_gradient_through(x, xb);
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_cpu_refuses_bf16)
{
    awl_gc_begin(2);
    awl_gpt_config cfg = small_config();
    cfg.n_layer = 1;
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 3);
    ck_assert_msg(model != NULL, "%s", awl_last_error());
    ck_assert_int_eq(awl_gpt_set_autocast(model, AWL_I32), AWL_ERR_INVALID);
    ck_assert_int_eq(awl_gpt_set_autocast(model, AWL_F64), AWL_ERR_INVALID);
    ck_assert_int_eq(awl_gpt_set_autocast(model, AWL_BF16), AWL_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(awl_last_error(), "cannot compute in bfloat16") != NULL, "%s",
                  awl_last_error());
    ck_assert_int_eq(awl_gpt_get_autocast(model), AWL_F32);
    ck_assert_int_eq(awl_gpt_set_autocast(model, AWL_F32), 0);
    /* still a float32 model that trains */
    awl_tensor *x = token_ids(2, 16, cfg.vocab, 1, "cpu"),
               *y = token_ids(2, 16, cfg.vocab, 2, "cpu");
    double loss = loss_and_grads(model, x, y);
    ck_assert(fabs(loss - log(65.0)) < 0.3);
    awl_gpt_free(model);

    /* a Linear layer under autocast on the CPU: the backend's refusal */
    awl_module *lin = awl_linear_new(4, 3, true, "cpu");
    awl_dtype before = awl_autocast_set(AWL_BF16);
    awl_clear_error();
    awl_tensor *out = awl_module_forward(lin, awl_randn(AWL_SHAPE(2, 4), AWL_F32, "cpu"));
    awl_autocast_set(before);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(awl_last_error(), "bfloat16") != NULL, "%s", awl_last_error());
    awl_module_free(lin);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- on a GPU ---------------------------------------------------------------------- */

START_TEST(test_cuda_bf16_close_to_fp32)
{
    awl_gc_begin(3);
    awl_set_float32_matmul_precision("highest");
    awl_gpt_config cfg = small_config();
    awl_gpt *model = awl_gpt_new(&cfg, GPU, 11);
    ck_assert_msg(model != NULL, "%s", awl_last_error());
    const awl_param_list *ps = awl_gpt_parameters(model);
    awl_tensor *x = token_ids(cfg.batch, cfg.block, cfg.vocab, 5, GPU);
    awl_tensor *y = token_ids(cfg.batch, cfg.block, cfg.vocab, 6, GPU);
    int64_t n;
    double loss32 = loss_and_grads(model, x, y);
    double *g32 = gather_grads(ps, &n);

    ck_assert_int_eq(awl_gpt_set_autocast(model, AWL_BF16), 0);
    ck_assert_int_eq(awl_gpt_get_autocast(model), AWL_BF16);
    double loss16 = loss_and_grads(model, x, y);
    double *g16 = gather_grads(ps, &n);
    ck_assert_int_eq(awl_autocast_get(), AWL_F32); /* the caller's state is restored */
    for (int i = 0; i < ps->count; i++) ck_assert(ps->items[i].tensor->dtype == AWL_F32);

    double loss_err = fabs(loss16 - loss32) / fabs(loss32), grad_err = rel_error(g16, g32, n);
    double worst = 0;
    const char *worst_name = "";
    int64_t at = 0;
    for (int i = 0; i < ps->count; i++) {
        int64_t m = awl_numel(ps->items[i].tensor);
        double e = rel_error(g16 + at, g32 + at, m);
        if (e > worst) worst = e, worst_name = ps->items[i].name;
        at += m;
    }
    printf("bf16 vs fp32: loss %.6f vs %.6f (rel %.2e), gradients rel %.2e, worst parameter %s "
           "%.2e\n",
           loss16, loss32, loss_err, grad_err, worst_name, worst);
    ck_assert_msg(loss_err < 1e-2, "loss %g vs %g", loss16, loss32);
    ck_assert_msg(grad_err < 2e-2, "gradients differ by %g", grad_err);
    ck_assert_msg(worst < 1e-1, "%s's gradient differs by %g", worst_name, worst);
    /* bfloat16 really ran: the results are not float32's bits */
    ck_assert_msg(grad_err > 1e-6, "bf16 gradients equal float32's: autocast did nothing");
    free(g32);
    free(g16);
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

/* The CUDA kernels round on the way out and widen the gradient themselves. */
START_TEST(test_cuda_layer_norm_to) { layer_norm_to_matches_cast(GPU); }
END_TEST

START_TEST(test_cuda_bf16_checkpointing)
{
    awl_gc_begin(4);
    awl_gpt_config cfg = small_config();
    awl_gpt *model = awl_gpt_new(&cfg, GPU, 12);
    ck_assert_msg(model != NULL, "%s", awl_last_error());
    ck_assert_int_eq(awl_gpt_set_autocast(model, AWL_BF16), 0);
    const awl_param_list *ps = awl_gpt_parameters(model);
    awl_tensor *x = token_ids(cfg.batch, cfg.block, cfg.vocab, 7, GPU);
    awl_tensor *y = token_ids(cfg.batch, cfg.block, cfg.vocab, 8, GPU);
    int64_t n;
    double plain = loss_and_grads(model, x, y);
    double *g_plain = gather_grads(ps, &n);
    awl_gpt_set_checkpointing(model, true);
    double ckpt = loss_and_grads(model, x, y);
    double *g_ckpt = gather_grads(ps, &n);
    /* a replay outside autocast would recompute in float32: differences
     * of the order of 1e-2 */
    double err = rel_error(g_ckpt, g_plain, n);
    printf("bf16 with checkpointed blocks: loss %.6f vs %.6f, gradients rel %.2e\n", ckpt, plain,
           err);
    ck_assert_double_eq(ckpt, plain);
    ck_assert_msg(err < 1e-6, "checkpointed gradients differ by %g", err);
    free(g_plain);
    free(g_ckpt);
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

/* The model's autocast caches its weight casts for the forward; the
 * thread's autocast with the model's off casts each at its point of use. */
START_TEST(test_cuda_bf16_weight_cast_cache)
{
    awl_gc_begin(7);
    awl_gpt_config cfg = small_config();
    cfg.dropout = 0.1;
    awl_gpt *model = awl_gpt_new(&cfg, GPU, 14);
    ck_assert_msg(model != NULL, "%s", awl_last_error());
    const awl_param_list *ps = awl_gpt_parameters(model);
    awl_tensor *x = token_ids(cfg.batch, cfg.block, cfg.vocab, 15, GPU);
    awl_tensor *y = token_ids(cfg.batch, cfg.block, cfg.vocab, 16, GPU);
    int64_t n;
    ck_assert_int_eq(awl_gpt_set_autocast(model, AWL_BF16), 0);
    awl_manual_seed(21);
    double cached = loss_and_grads(model, x, y);
    double *g_cached = gather_grads(ps, &n);
    ck_assert_int_eq(awl_gpt_set_autocast(model, AWL_F32), 0);
    awl_dtype before = awl_autocast_set(AWL_BF16);
    awl_manual_seed(21);
    double each = loss_and_grads(model, x, y);
    double *g_each = gather_grads(ps, &n);
    awl_autocast_set(before);
    double err = rel_error(g_cached, g_each, n);
    printf("bf16 with the weight casts cached: loss %.6f vs %.6f, gradients rel %.2e\n", cached,
           each, err);
    ck_assert_double_eq(cached, each);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(g_cached[i] == g_each[i], "gradient element %lld: %.9g vs %.9g", (long long)i,
                      g_cached[i], g_each[i]);
    free(g_cached);
    free(g_each);
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

/* Under autocast a Linear's weight gradient is the float32 sums of its
 * bfloat16 product (awl_node_input_widens, matmul_wide): with loss =
 * sum(linear(x) * r), dW = r^T x over x's and r's bfloat16 values, which
 * the host sums in float64. Rounded to bfloat16 and cast back, as without
 * widening, the elements (sums of 300 products, about 17 in size) would be
 * off by up to 2^-9 of that, and almost all of them bfloat16 values. (r
 * makes dY a dense tensor: the gradient of a plain sum is a broadcast,
 * which matmul_wide declines and the framework rounds.) The bias's
 * gradient, the column sums of r, comes from the same product
 * (matmul_wide's row sums) and is float32 to the same accuracy. */
START_TEST(test_cuda_weight_gradient_float32)
{
    awl_gc_begin(9);
    const int64_t rows = 300, in = 96, out = 48;
    awl_module *lin = awl_linear_new(in, out, true, GPU);
    ck_assert_msg(lin != NULL, "%s", awl_last_error());
    awl_tensor *x = awl_randn(AWL_SHAPE(rows, in), AWL_F32, GPU);
    awl_tensor *r = awl_tensor_cast(awl_randn(AWL_SHAPE(rows, out), AWL_F32, GPU), AWL_BF16);
    awl_dtype before = awl_autocast_set(AWL_BF16);
    awl_tensor *y = awl_module_forward(lin, x);
    awl_autocast_set(before);
    ck_assert_msg(y != NULL && y->dtype == AWL_BF16, "%s", awl_last_error());
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_mul(y, r))), 0);
    awl_tensor *w = awl_module_get_param(lin, "weight");
    ck_assert_int_eq(w->grad->dtype, AWL_F32);
    double *g = malloc((size_t)(out * in) * sizeof *g),
           *hx = malloc((size_t)(rows * in) * sizeof *hx),
           *hr = malloc((size_t)(rows * out) * sizeof *hr);
    awl_tensor *xb = awl_tensor_cast(awl_tensor_cast(x, AWL_BF16), AWL_F64);
    ck_assert_int_eq(
        awl_to_host(awl_tensor_cast(w->grad, AWL_F64), g, (size_t)(out * in) * sizeof *g), 0);
    ck_assert_int_eq(awl_to_host(xb, hx, (size_t)(rows * in) * sizeof *hx), 0);
    ck_assert_int_eq(
        awl_to_host(awl_tensor_cast(r, AWL_F64), hr, (size_t)(rows * out) * sizeof *hr), 0);
    int64_t narrow = 0; /* elements that bfloat16 holds exactly */
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double want = 0;
            for (int64_t t = 0; t < rows; t++) want += hr[t * out + o] * hx[t * in + i];
            double got = g[o * in + i];
            ck_assert_msg(fabs(got - want) <= 1e-5 * (1 + fabs(want)),
                          "dW[%lld][%lld]: %.9g vs %.9g", (long long)o, (long long)i, got, want);
            float f = (float)got;
            uint32_t bits;
            memcpy(&bits, &f, sizeof bits);
            narrow += (bits & 0xffffu) == 0;
        }
    printf("weight gradient under autocast: float32, %lld of %lld elements bfloat16 values\n",
           (long long)narrow, (long long)(out * in));
    ck_assert_msg(narrow < out * in / 4, "%lld of %lld elements are bfloat16 values: not widened",
                  (long long)narrow, (long long)(out * in));
    awl_tensor *b = awl_module_get_param(lin, "bias");
    ck_assert_int_eq(b->grad->dtype, AWL_F32);
    ck_assert_int_eq(awl_to_host(awl_tensor_cast(b->grad, AWL_F64), g, (size_t)out * sizeof *g), 0);
    for (int64_t o = 0; o < out; o++) {
        double want = 0;
        for (int64_t t = 0; t < rows; t++) want += hr[t * out + o];
        ck_assert_msg(fabs(g[o] - want) <= 1e-5 * (1 + fabs(want)), "db[%lld]: %.9g vs %.9g",
                      (long long)o, g[o], want);
    }
    free(g);
    free(hx);
    free(hr);
    awl_module_free(lin);
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_cuda_dropout_of_cast)
{
    awl_gc_begin(8);
    const awl_dropout_args d = {0.1, 1234, 77};
    /* 4099 elements: whole packs of four and a ragged end */
    awl_tensor *x = awl_randn(AWL_SHAPE(4099), AWL_F32, GPU);
    awl_tensor *fused = awl_empty(AWL_SHAPE(4099), AWL_BF16, GPU);
    awl_tensor *composed = awl_empty(AWL_SHAPE(4099), AWL_BF16, GPU);
    ck_assert_msg(awl_tensor_dropout(fused, x, &d) == 0, "%s", awl_last_error());
    ck_assert_msg(awl_tensor_dropout(composed, awl_tensor_cast(x, AWL_BF16), &d) == 0, "%s",
                  awl_last_error());
    expect_same_bits(fused, composed, "dropout of a cast");
    ck_assert(awl_gc_end());
}
END_TEST

/* `steps` AdamW steps on one batch from seed 13, each step's loss into
 * losses[]; with keep, AdamW writes the weights' bfloat16 copies that the
 * forward then reads (awl_optimizer_keep_casts); with checkpointing, the
 * blocks' replays in backward read them too. */
static void train_steps(awl_dtype autocast, bool keep, bool checkpointing, int steps,
                        double *losses)
{
    awl_gpt_config cfg = small_config();
    awl_gpt *model = awl_gpt_new(&cfg, GPU, 13);
    ck_assert_msg(model && awl_gpt_set_autocast(model, autocast) == 0, "%s", awl_last_error());
    awl_gpt_set_checkpointing(model, checkpointing);
    awl_optimizer *opt = awl_adamw_new(awl_gpt_parameters(model), 3e-3, 0.9, 0.95, 1e-8, 0.1);
    ck_assert_msg(opt != NULL, "%s", awl_last_error());
    if (keep) ck_assert_int_eq(awl_optimizer_keep_casts(opt, AWL_BF16), 0);
    awl_tensor *x, *y;
    mapped_batch(cfg.batch, cfg.block, cfg.vocab, 9, GPU, &x, &y);
    for (int step = 0; step < steps; step++) {
        losses[step] = loss_and_grads(model, x, y);
        ck_assert_msg(awl_optimizer_step(opt) == 0, "%s", awl_last_error());
    }
    ck_assert(!keep || awl_optimizer_kept_cast(opt, 0) != NULL);
    const int32_t prompt[1] = {0}, *prompts[1] = {prompt};
    int32_t out[9], *outs[1] = {out};
    int n_prompt = 1, n_out = 0;
    awl_generate_options o = awl_generate_defaults();
    o.max_new_tokens = 8;
    o.seed = 3;
    ck_assert_msg(awl_gpt_generate(model, 1, prompts, &n_prompt, &o, outs, &n_out) == 0, "%s",
                  awl_last_error());
    ck_assert_int_eq(n_out, 9);
    awl_optimizer_free(opt);
    awl_gpt_free(model);
}

START_TEST(test_cuda_bf16_training)
{
    awl_gc_begin(5);
    awl_set_float32_matmul_precision("highest");
    double l32[30], l16[30];
    train_steps(AWL_F32, false, false, 30, l32);
    train_steps(AWL_BF16, true, false, 30, l16);
    double first32 = l32[0], last32 = l32[29], first16 = l16[0], last16 = l16[29];
    printf("30 AdamW steps on one batch: fp32 %.4f -> %.4f, bf16 %.4f -> %.4f\n", first32, last32,
           first16, last16);
    ck_assert_msg(last16 < 0.75 * first16, "bf16 training: %g -> %g", first16, last16);
    ck_assert_msg(fabs(last16 - last32) < 0.15 * last32 + 0.05, "bf16 ends at %g, fp32 at %g",
                  last16, last32);
    ck_assert(awl_gc_end());
}
END_TEST

/* The weights' bfloat16 copies that AdamW keeps are the bits of the casts
 * they replace: the same losses, step for step, with and without them; and
 * with activation checkpointing's replays reading them, the losses of
 * checkpointed training (whose gradients match to 1e-6, above). */
START_TEST(test_cuda_kept_casts_same_training)
{
    awl_gc_begin(5);
    enum { STEPS = 8 };
    double cast[STEPS], kept[STEPS], replayed[STEPS];
    train_steps(AWL_BF16, false, false, STEPS, cast);
    train_steps(AWL_BF16, true, false, STEPS, kept);
    train_steps(AWL_BF16, true, true, STEPS, replayed);
    for (int i = 0; i < STEPS; i++) {
        ck_assert_msg(kept[i] == cast[i], "step %d: loss %.9g with kept casts, %.9g without", i,
                      kept[i], cast[i]);
        ck_assert_msg(fabs(replayed[i] - cast[i]) <= 1e-5 * fabs(cast[i]),
                      "step %d: loss %.9g checkpointed, %.9g", i, replayed[i], cast[i]);
    }
    printf("kept casts: %d steps, losses %.6f -> %.6f, the same bits as casting\n", STEPS, kept[0],
           kept[STEPS - 1]);
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("autocast");
    TCase *any = tcase_create("any");
    tcase_set_timeout(any, 120);
    tcase_add_test(any, test_autocast_state);
    tcase_add_test(any, test_autocast_cache);
    tcase_add_test(any, test_cpu_refuses_bf16);
    tcase_add_test(any, test_layer_norm_to_cpu);
    suite_add_tcase(s, any);
    bool gpu = awl_device_available(GPU);
    if (gpu) {
        TCase *cuda = tcase_create("cuda");
        tcase_set_timeout(cuda, 300);
        tcase_add_test(cuda, test_cuda_bf16_close_to_fp32);
        tcase_add_test(cuda, test_cuda_layer_norm_to);
        tcase_add_test(cuda, test_cuda_bf16_checkpointing);
        tcase_add_test(cuda, test_cuda_bf16_weight_cast_cache);
        tcase_add_test(cuda, test_cuda_dropout_of_cast);
        tcase_add_test(cuda, test_cuda_weight_gradient_float32);
        tcase_add_test(cuda, test_cuda_bf16_training);
        tcase_add_test(cuda, test_cuda_kept_casts_same_training);
        suite_add_tcase(s, cuda);
    } else {
        awl_clear_error();
        printf("test_autocast: CUDA cases skipped: no CUDA device\n");
    }
    SRunner *sr = srunner_create(s);
    if (gpu) srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
