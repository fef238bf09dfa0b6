/*
 * tests/test_resume.c - resuming training from a checkpoint is bitwise
 * exact.
 *
 * A tiny GPT (with dropout, so the random generator matters, and two
 * micro-batches per step, so gradient accumulation is part of the state
 * that must not leak across a resume) trains 2N steps straight, and again
 * N steps, save, free everything, rebuild from a different initialisation,
 * load, N more steps. The losses of the last N steps must be equal as
 * doubles, and the final weights and optimizer state equal bit for bit.
 * AdamW with a warmup-cosine schedule and gradient clipping, as train_gpt
 * runs it.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "data/data.h"
#include "nn/checkpoint_io.h"
#include "nn/gpt.h"
#include "nn/optim.h"

#define N_STEPS 20
#define MICRO 2
#define TRAIN_SEED 4242
#define DATA_SEED 99

static char *make_text(size_t *len)
{
    static const char *words[] = {"to be",   "or not",     "that is",     "the question",
                                  "whether", "tis nobler", "in the mind", "to suffer"};
    size_t cap = 8192, n = 0;
    char *text = malloc(cap);
    uint32_t state = 7;
    while (n < cap - 32) {
        state = state * 1103515245u + 12345u;
        n += (size_t)snprintf(text + n, cap - n, "%s%s", words[(state >> 16) % 8],
                              (state >> 8) % 5 == 0 ? ".\n" : " ");
    }
    *len = n;
    return text;
}

static awl_gpt_config tiny_config(int vocab)
{
    awl_gpt_config cfg = {.vocab = vocab,
                          .block = 16,
                          .n_layer = 2,
                          .n_head = 2,
                          .n_embd = 32,
                          .batch = 4,
                          .dropout = 0.1,
                          .bias = true};
    return cfg;
}

typedef struct run {
    awl_text_dataset *data;
    awl_gpt *model;
    awl_optimizer *opt;
    awl_lr_schedule schedule;
} run;

static void run_init(run *r, uint64_t init_seed)
{
    size_t len;
    char *text = make_text(&len);
    r->data = awl_text_dataset_from_text(text, len, NULL, 16, 0.9);
    free(text);
    ck_assert_ptr_nonnull(r->data);
    awl_text_dataset_seed(r->data, DATA_SEED);
    awl_gpt_config cfg = tiny_config(awl_tokenizer_vocab_size(awl_text_dataset_tokenizer(r->data)));
    r->model = awl_gpt_new(&cfg, "cpu", init_seed);
    ck_assert_ptr_nonnull(r->model);
    r->opt = awl_adamw_new(awl_gpt_parameters(r->model), 3e-3, 0.9, 0.95, 1e-8, 0.1);
    ck_assert_ptr_nonnull(r->opt);
    r->schedule = awl_lr_warmup_cosine(3e-3, 5, 2 * N_STEPS, 3e-4);
    awl_manual_seed(TRAIN_SEED);
}

static void run_free(run *r)
{
    awl_optimizer_free(r->opt);
    awl_gpt_free(r->model);
    awl_text_dataset_free(r->data);
}

/* Trains iterations [from, to), writing each step's mean loss to losses[it]. */
static void train(run *r, int from, int to, double *losses)
{
    const awl_param_list *params = awl_gpt_parameters(r->model);
    for (int it = from; it < to; it++) {
        ck_assert_int_eq(awl_optimizer_set_lr(r->opt, awl_lr_at(&r->schedule, it)), 0);
        double total = 0;
        for (int micro = 0; micro < MICRO; micro++) {
            awl_scope_begin();
            awl_tensor *x, *y;
            ck_assert_int_eq(awl_text_dataset_batch(r->data, AWL_SPLIT_TRAIN, 4, "cpu", &x, &y), 0);
            awl_tensor *loss = awl_gpt_loss(r->model, x, y);
            ck_assert_ptr_nonnull(loss);
            total += awl_item(loss);
            ck_assert_int_eq(awl_backward(awl_div_scalar(loss, MICRO)), 0);
            awl_scope_end();
        }
        losses[it] = total / MICRO;
        ck_assert(awl_clip_grad_norm(params, 1.0) >= 0);
        ck_assert_int_eq(awl_optimizer_step(r->opt), 0);
        ck_assert_int_eq(awl_optimizer_zero_grad(r->opt), 0);
    }
}

static void save(run *r, const char *path, int64_t step)
{
    awl_train_state st = {0};
    st.step = step;
    awl_rng_get_state(&st.rng_seed, &st.rng_offset);
    st.data_seed = awl_text_dataset_get_seed(r->data);
    st.data_position[0] = awl_text_dataset_get_position(r->data, AWL_SPLIT_TRAIN);
    st.data_position[1] = awl_text_dataset_get_position(r->data, AWL_SPLIT_VAL);
    char *tok;
    size_t tok_len;
    ck_assert_int_eq(awl_tokenizer_serialize(awl_text_dataset_tokenizer(r->data), &tok, &tok_len),
                     0);
    awl_train_state_set_tokenizer(&st, tok);
    free(tok);
    awl_train_state_set_config(&st, "{\"block\":16,\"n_layer\":2,\"n_head\":2,\"n_embd\":32}");
    ck_assert_int_eq(awl_checkpoint_save(path, awl_gpt_parameters(r->model), r->opt, &st), 0);
    awl_train_state_clear(&st);
}

/* Restores into a freshly built run; returns the step to continue from. */
static int64_t load(run *r, const char *path)
{
    awl_train_state st = {0};
    ck_assert_int_eq(awl_checkpoint_load(path, awl_gpt_parameters(r->model), r->opt, &st), 0);
    awl_rng_set_state(st.rng_seed, st.rng_offset);
    awl_text_dataset_seed(r->data, st.data_seed);
    ck_assert_int_eq(awl_text_dataset_set_position(r->data, AWL_SPLIT_TRAIN, st.data_position[0]),
                     0);
    ck_assert_int_eq(awl_text_dataset_set_position(r->data, AWL_SPLIT_VAL, st.data_position[1]), 0);
    char *tok;
    size_t tok_len;
    awl_tokenizer_serialize(awl_text_dataset_tokenizer(r->data), &tok, &tok_len);
    ck_assert_str_eq(st.tokenizer, tok); /* the model decodes with what it was trained on */
    free(tok);
    int64_t step = st.step;
    awl_train_state_clear(&st);
    return step;
}

/* All parameters and optimizer state, as bytes. */
static unsigned char *state_bytes(run *r, size_t *n)
{
    const awl_param_list *params = awl_gpt_parameters(r->model);
    int n_states = awl_optimizer_num_states(r->opt);
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        unsigned char *buf = pass ? malloc(total) : NULL;
        size_t at = 0;
        for (int i = 0; i < params->count + n_states; i++) {
            awl_tensor *t = i < params->count
                                ? params->items[i].tensor
                                : awl_optimizer_state(r->opt, i - params->count, NULL);
            size_t nb = (size_t)awl_numel(t) * awl_dtype_size(t->dtype);
            if (pass) ck_assert_int_eq(awl_to_host(t, buf + at, nb), 0);
            at += nb;
        }
        total = at;
        if (pass) {
            *n = total;
            return buf;
        }
    }
    return NULL;
}

START_TEST(test_resume_is_bitwise)
{
    char path[] = "/tmp/awl_resume_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);

    double straight[2 * N_STEPS], resumed[2 * N_STEPS];
    run a;
    run_init(&a, 1);
    train(&a, 0, 2 * N_STEPS, straight);

    run b;
    run_init(&b, 1);
    train(&b, 0, N_STEPS, resumed);
    save(&b, path, N_STEPS);
    run_free(&b);

    run c;
    run_init(&c, 777);  /* a different initialisation: the checkpoint must overwrite it */
    awl_manual_seed(1); /* and a different generator state */
    int64_t from = load(&c, path);
    ck_assert_int_eq(from, N_STEPS);
    ck_assert_int_eq(awl_optimizer_step_count(c.opt), N_STEPS);
    train(&c, (int)from, 2 * N_STEPS, resumed);

    for (int it = 0; it < 2 * N_STEPS; it++)
        ck_assert_msg(straight[it] == resumed[it], "step %d: loss %.17g straight, %.17g resumed",
                      it, straight[it], resumed[it]);
    ck_assert(straight[2 * N_STEPS - 1] < straight[0]); /* it did train */
    size_t na, nc;
    unsigned char *sa = state_bytes(&a, &na), *sc = state_bytes(&c, &nc);
    ck_assert_uint_eq(na, nc);
    ck_assert_msg(memcmp(sa, sc, na) == 0, "weights or optimizer state differ after resuming");
    free(sa);
    free(sc);
    run_free(&a);
    run_free(&c);
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("resume");
    TCase *tc = tcase_create("resume");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_resume_is_bitwise);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
