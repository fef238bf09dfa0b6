/*
 * tests/test_checkpoint.c - activation checkpointing (autograd/checkpoint.h).
 *
 * - a GPT with dropout trained one step with and without checkpointing every
 *   block gives bitwise-equal losses and parameter gradients (memcmp), and
 *   leaves the global generator in the same state;
 * - the peak memory of a forward + backward of an 8-layer GPT is much lower
 *   with checkpointing (awl_memory_get_stats on the CPU);
 * - the edges: no-grad mode, inputs that need no gradient, a segment that
 *   returns its input, a failing segment, nested checkpoints, a parameter
 *   used both inside and outside a segment, and create_graph (refused).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/gradcheck.h"
#include "nn/gpt.h"

/* Loss and every parameter gradient of one training step, on the host. */
typedef struct step_result {
    double loss;
    int n;
    double *grads[64];
    int64_t sizes[64];
    uint64_t rng_seed, rng_offset; /* after the step */
} step_result;

static step_result gpt_step(awl_gpt *model, bool checkpointing, const int32_t *x, const int32_t *y,
                            int64_t B, int64_t T)
{
    step_result r = {0};
    awl_gpt_set_checkpointing(model, checkpointing);
    awl_manual_seed(42);
    awl_scope_begin();
    awl_tensor *xi = awl_from_data(x, AWL_SHAPE(B, T), AWL_I32, awl_gc_device());
    awl_tensor *yi = awl_from_data(y, AWL_SHAPE(B, T), AWL_I32, awl_gc_device());
    awl_tensor *loss = awl_retain(awl_gpt_loss(model, xi, yi)); /* outlives the scope */
    awl_scope_end();
    ck_assert_msg(loss && awl_backward(loss) == 0, "%s", awl_last_error());
    r.loss = awl_item(loss);
    awl_release(loss);
    awl_rng_get_state(&r.rng_seed, &r.rng_offset);
    const awl_param_list *ps = awl_gpt_parameters(model);
    r.n = ps->count;
    for (int i = 0; i < ps->count; i++) {
        ck_assert_msg(ps->items[i].tensor->grad != NULL, "no gradient for %s", ps->items[i].name);
        r.grads[i] = awl_gc_values(ps->items[i].tensor->grad);
        r.sizes[i] = awl_numel(ps->items[i].tensor);
    }
    awl_module_zero_grad(awl_gpt_module(model));
    return r;
}

static void free_result(step_result *r)
{
    for (int i = 0; i < r->n; i++) free(r->grads[i]);
}

START_TEST(test_bitwise_equal_gpt)
{
    awl_gc_begin(1);
    for (int with_dropout = 0; with_dropout < 2; with_dropout++) {
        awl_gpt_config cfg = {.vocab = 11,
                              .block = 16,
                              .n_layer = 3,
                              .n_head = 2,
                              .n_embd = 32,
                              .batch = 4,
                              .dropout = with_dropout ? 0.1 : 0.0,
                              .bias = true};
        awl_gpt *model = awl_gpt_new(&cfg, awl_gc_device(), 7);
        int32_t x[4 * 16], y[4 * 16];
        for (int i = 0; i < 4 * 16; i++) {
            x[i] = (i * 7 + 3) % 11;
            y[i] = (i * 5 + 1) % 11;
        }
        step_result plain = gpt_step(model, false, x, y, 4, 16);
        step_result ckpt = gpt_step(model, true, x, y, 4, 16);
        ck_assert(memcmp(&plain.loss, &ckpt.loss, sizeof plain.loss) == 0);
        ck_assert_int_eq(plain.n, ckpt.n);
        for (int i = 0; i < plain.n; i++)
            ck_assert_msg(
                memcmp(plain.grads[i], ckpt.grads[i], (size_t)plain.sizes[i] * sizeof(double)) == 0,
                "%s differs (dropout %d)", awl_gpt_parameters(model)->items[i].name, with_dropout);
        ck_assert(plain.rng_seed == ckpt.rng_seed && plain.rng_offset == ckpt.rng_offset);
        if (with_dropout) ck_assert(plain.rng_offset > 0); /* dropout did draw */
        free_result(&plain);
        free_result(&ckpt);
        awl_gpt_free(model);
    }
    ck_assert(awl_gc_end());
}
END_TEST

/* Bytes above the starting point at the peak of one forward + backward. */
static int64_t step_peak(awl_gpt *model, bool checkpointing, awl_tensor *x, awl_tensor *y)
{
    awl_gpt_set_checkpointing(model, checkpointing);
    awl_memory_stats before, after;
    awl_memory_get_stats("cpu", &before);
    awl_memory_reset_peak("cpu");
    awl_scope_begin();
    awl_tensor *loss = awl_retain(awl_gpt_loss(model, x, y)); /* outlives the scope */
    awl_scope_end();
    ck_assert_msg(loss && awl_backward(loss) == 0, "%s", awl_last_error());
    awl_release(loss);
    awl_memory_get_stats("cpu", &after);
    awl_module_zero_grad(awl_gpt_module(model));
    return after.peak - before.in_use;
}

START_TEST(test_peak_memory)
{
    if (strcmp(awl_gc_device(), "cpu") != 0) return; /* measured on the CPU */
    awl_gc_begin(2);
    awl_gpt_config cfg = {.vocab = 65,
                          .block = 64,
                          .n_layer = 8,
                          .n_head = 4,
                          .n_embd = 64,
                          .batch = 8,
                          .dropout = 0.0,
                          .bias = true};
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 3);
    int32_t *ids = malloc(8 * 64 * sizeof *ids);
    for (int i = 0; i < 8 * 64; i++) ids[i] = (i * 31 + 7) % 65;
    awl_tensor *x = awl_from_data(ids, AWL_SHAPE(8, 64), AWL_I32, "cpu");
    awl_tensor *y = awl_from_data(ids + 1, AWL_SHAPE(8, 63), AWL_I32, "cpu");
    x = awl_tensor_slice(x, 1, 0, 63, 1);
    free(ids);
    int64_t params = 4 * awl_gpt_num_params(model); /* the gradients, the same in both runs */
    int64_t plain = step_peak(model, false, x, y) - params;
    int64_t ckpt = step_peak(model, true, x, y) - params;
    fprintf(stderr, "checkpoint: activation peak %lld bytes plain, %lld checkpointed (%.0f%%)\n",
            (long long)plain, (long long)ckpt, 100.0 * (double)ckpt / (double)plain);
    ck_assert_int_gt(plain, 0);
    ck_assert_msg(ckpt * 10 < plain * 4, "checkpointing saved too little: %lld vs %lld",
                  (long long)ckpt, (long long)plain);
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- the edges, on a small segment: dropout(gelu(x @ w)) -------------------------------- */

typedef struct segment_ctx {
    awl_tensor *w;
    int calls;
} segment_ctx;

static awl_tensor *segment(void *user, int n, awl_tensor *const *in)
{
    segment_ctx *c = user;
    c->calls++;
    awl_tensor *h = awl_gelu(awl_matmul(in[0], c->w));
    if (n > 1) h = awl_add(h, in[1]);
    return awl_dropout(h, 0.3, true);
}

static awl_tensor *identity(void *user, int n, awl_tensor *const *in)
{
    (void)user;
    (void)n;
    return in[0];
}

static awl_tensor *failing(void *user, int n, awl_tensor *const *in)
{
    (void)user;
    (void)n;
    return awl_matmul(in[0], in[0]); /* (3,4) @ (3,4): an error */
}

/* h * h with h = segment(x): plainly, and with the inner segment
 * checkpointed (the outer one is checkpointed too, in run_segment). */
static awl_tensor *nested_plain(void *user, int n, awl_tensor *const *in)
{
    awl_tensor *h = segment(user, n, in);
    return awl_mul(h, h);
}

static awl_tensor *nested(void *user, int n, awl_tensor *const *in)
{
    awl_tensor *h = awl_checkpoint(segment, user, n, in);
    return awl_mul(h, h);
}

/* loss = sum(f(x) * colsum(x)) with x (3, 4); returns the gradients of x
 * and w on the host. mode: 0 plain, 1 checkpointed, 2 nested plainly, 3
 * nested checkpoints. */
static void run_segment(int mode, awl_tensor *x, segment_ctx *c, double **gx, double **gw)
{
    awl_manual_seed(5);
    awl_scope_begin();
    awl_tensor *out = mode == 0   ? segment(c, 1, &x)
                      : mode == 1 ? awl_checkpoint(segment, c, 1, &x)
                      : mode == 2 ? nested_plain(c, 1, &x)
                                  : awl_checkpoint(nested, c, 1, &x);
    awl_tensor *loss = awl_sum_all(awl_mul(out, awl_sum(x, AWL_DIMS(0), false)));
    ck_assert_msg(loss && awl_backward(loss) == 0, "%s", awl_last_error());
    awl_scope_end();
    *gx = awl_gc_values(x->grad);
    *gw = awl_gc_values(c->w->grad);
    awl_clear_grad(x);
    awl_clear_grad(c->w);
}

START_TEST(test_segment_edges)
{
    awl_gc_begin(3);
    awl_tensor *x = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(3, 4)), true);
    awl_tensor *w = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(4, 4)), true);
    segment_ctx c = {w, 0};
    double *gx[4], *gw[4];
    static const int calls[4] = {1, 2, 1, 3};
    for (int mode = 0; mode < 4; mode++) {
        c.calls = 0;
        run_segment(mode, x, &c, &gx[mode], &gw[mode]);
        /* checkpointed: the forward, then the recomputation; nested: the
         * inner segment runs once more inside the outer recomputation */
        ck_assert_int_eq(c.calls, calls[mode]);
    }
    for (int mode = 1; mode < 4; mode += 2) {
        ck_assert(memcmp(gx[mode - 1], gx[mode], 12 * sizeof(double)) == 0);
        ck_assert(memcmp(gw[mode - 1], gw[mode], 16 * sizeof(double)) == 0);
    }
    for (int mode = 0; mode < 4; mode++) {
        free(gx[mode]);
        free(gw[mode]);
    }

    /* in no-grad mode it is just the function */
    awl_no_grad_begin();
    awl_tensor *y = awl_checkpoint(segment, &c, 1, &x);
    ck_assert(y && y->grad_fn == NULL);
    awl_no_grad_end();

    /* an input that needs no gradient: the segment runs recorded, and w
     * still gets its gradient */
    awl_tensor *xd = awl_detach(x);
    awl_manual_seed(5);
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_checkpoint(segment, &c, 1, &xd))), 0);
    ck_assert_ptr_nonnull(w->grad);
    awl_clear_grad(w);

    /* a segment returning its input: a new tensor, the gradient passes */
    awl_tensor *same = awl_checkpoint(identity, NULL, 1, &x);
    ck_assert(same != x && same->storage == x->storage && x->grad_fn == NULL);
    ck_assert_int_eq(awl_backward(awl_sum_all(same)), 0);
    double *ones = awl_gc_values(x->grad);
    for (int i = 0; i < 12; i++) ck_assert(ones[i] == 1.0);
    free(ones);
    awl_clear_grad(x);

    /* failures */
    ck_assert_ptr_null(awl_checkpoint(failing, NULL, 1, &x));
    ck_assert(strstr(awl_last_error(), "awl_matmul") != NULL);
    ck_assert_ptr_null(awl_checkpoint(NULL, NULL, 1, &x));
    ck_assert_ptr_null(awl_checkpoint(segment, &c, 1, (awl_tensor *[]){NULL}));
    awl_tensor *grads[1];
    awl_tensor *out = awl_sum_all(awl_checkpoint(segment, &c, 1, &x));
    awl_backward_options o = {.create_graph = true};
    ck_assert_int_lt(awl_grad(out, 1, &x, grads, &o), 0);
    ck_assert(strstr(awl_last_error(), "create_graph") != NULL);

    ck_assert(awl_gc_end());
}
END_TEST

/* A parameter used inside a checkpointed segment and outside it: its
 * gradient must collect both uses. */
START_TEST(test_shared_parameter)
{
    awl_gc_begin(4);
    awl_tensor *x = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(3, 4)), true);
    awl_tensor *w = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(4, 4)), true);
    awl_tensor *b = awl_gc_randn(AWL_SHAPE(3, 4));
    segment_ctx c = {w, 0};
    double *want = NULL;
    /* modes 0, 1: w used outside after the segment; 2, 3: before it */
    for (int mode = 0; mode < 4; mode++) {
        awl_manual_seed(6);
        awl_scope_begin();
        awl_tensor *in[2] = {mode < 2 ? x : awl_matmul(x, w), b};
        awl_tensor *h = mode % 2 ? awl_checkpoint(segment, &c, 2, in) : segment(&c, 2, in);
        awl_tensor *loss = awl_sum_all(mode < 2 ? awl_matmul(h, w) : h);
        ck_assert_msg(awl_backward(loss) == 0, "%s", awl_last_error());
        awl_scope_end();
        ck_assert_ptr_nonnull(w->grad);
        double *got = awl_gc_values(w->grad);
        if (mode % 2 == 0) {
            free(want);
            want = got;
        } else {
            ck_assert_msg(awl_gc_allclose(got, want, 16, 1e-12, 1e-12, "shared w"), "mode %d",
                          mode);
            free(got);
        }
        awl_clear_grad(w);
        awl_clear_grad(x);
    }
    free(want);
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("checkpoint", test_bitwise_equal_gpt, test_peak_memory,
                            test_segment_edges, test_shared_parameter);
}
