/*
 * tests/test_generate.c - generation with the key/value cache (nn/generate.h).
 *
 * - cached attention (awl_attention_qkv_cached) fed a sequence in pieces
 *   (a prefill, single tokens, a pair) matches ordinary causal attention
 *   over the whole sequence, on random inputs; a key mask hides keys
 *   exactly as leaving them out would; a cache without room is refused;
 * - greedy generation with the cache produces the tokens the full
 *   recompute produces, for a batch of prompts of different lengths, and
 *   each row the tokens it produces alone; so does sampling with
 *   temperature, top-k and top-p from the same seed;
 * - generation past the block (the cache starts again) stays in range;
 * - a stop token ends its row (the token kept) and the callback sees every
 *   step and can end generation;
 * - the sampler: greedy, top-k, top-p and temperature pick the tokens
 *   their definitions say, from crafted logits;
 * - bad options, prompts and caches are refused with messages naming them.
 *
 * Every tensor lives on AWL_TEST_DEVICE (cpu when unset), so the same
 * suite checks the CUDA backend.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/gradcheck.h"
#include "nn/generate.h"

static awl_gpt_config tiny_config(void)
{
    return (awl_gpt_config){.vocab = 16,
                            .block = 16,
                            .n_layer = 2,
                            .n_head = 2,
                            .n_embd = 16,
                            .batch = 2,
                            .dropout = 0.0,
                            .bias = true};
}

/* A tiny random GPT whose embedding is scaled up, so that its next-token
 * distributions are peaked and greedy choices are not near ties. */
static awl_gpt *tiny_model(void)
{
    awl_gpt_config cfg = tiny_config();
    awl_gpt *model = awl_gpt_new(&cfg, awl_gc_device(), 7);
    ck_assert_msg(model != NULL, "%s", awl_last_error());
    awl_tensor *wte = awl_module_get_param(awl_gpt_module(model), "transformer.wte.weight");
    ck_assert_int_eq(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, wte, wte, 20.0), 0);
    return model;
}

/* ---- cached attention against uncached ---------------------------------------------- */

/* Zero-filled (B, H, capacity, D) keys and values on the test device. */
static awl_attention_cache empty_cache(int64_t B, int64_t H, int64_t capacity, int64_t D)
{
    awl_attention_cache c = {0};
    c.k = awl_zeros(AWL_SHAPE(B, H, capacity, D), AWL_F32, awl_gc_device());
    c.v = awl_zeros(AWL_SHAPE(B, H, capacity, D), AWL_F32, awl_gc_device());
    return c;
}

START_TEST(test_cached_attention_matches_uncached)
{
    awl_gc_begin(11);
    enum { B = 2, T = 7, H = 2, D = 4, C = H * D };
    awl_tensor *qkv = awl_gc_randn_dtype(AWL_SHAPE(B, T, 3 * C), AWL_F32);
    double *want = awl_gc_values(awl_attention_qkv(qkv, H, true, 0.0)); /* (B, T, C) */
    /* the same sequence in pieces: a prefill of 3, two single tokens, a pair */
    awl_attention_cache cache = empty_cache(B, H, T + 1, D);
    const int64_t cuts[] = {0, 3, 4, 5, 7};
    awl_tensor *pieces[4];
    for (int i = 0; i < 4; i++) {
        awl_tensor *piece = awl_tensor_contiguous(awl_slice(qkv, 1, cuts[i], cuts[i + 1], 1));
        pieces[i] = awl_attention_qkv_cached(piece, H, &cache);
        ck_assert_msg(pieces[i] != NULL, "piece %d: %s", i, awl_last_error());
        ck_assert_int_eq(cache.length, cuts[i + 1]);
    }
    double *got = awl_gc_values(awl_concat(4, pieces, 1));
    ck_assert(awl_gc_allclose(got, want, B * T * C, 1e-5, 1e-5, "cached attention"));
    free(got);
    free(want);

    /* a full cache refuses a token more, naming the shapes */
    awl_tensor *more = awl_tensor_contiguous(awl_slice(qkv, 1, 0, 2, 1));
    ck_assert_ptr_null(awl_attention_qkv_cached(more, H, &cache));
    ck_assert_msg(strstr(awl_last_error(), "awl_attention_qkv_cached: qkv (2,2,24)") != NULL, "%s",
                  awl_last_error());
    ck_assert_ptr_null(awl_attention_qkv_cached(more, 3, &cache)); /* 24 is not 3 * 3 heads */
    ck_assert(awl_gc_end());
}
END_TEST

/* Two hidden keys in front of a sequence change nothing: the output over
 * [junk, junk, x] with the junk masked is attention over x, shifted. */
START_TEST(test_key_mask_hides_keys)
{
    awl_gc_begin(12);
    enum { B = 1, T = 5, PAD = 2, H = 2, D = 4, C = H * D };
    awl_tensor *padded = awl_gc_randn_dtype(AWL_SHAPE(B, PAD + T, 3 * C), AWL_F32);
    awl_tensor *x = awl_tensor_contiguous(awl_slice(padded, 1, PAD, PAD + T, 1));
    double *want = awl_gc_values(awl_attention_qkv(x, H, true, 0.0));
    awl_attention_cache cache = empty_cache(B, H, PAD + T, D);
    double mask[PAD + T] = {1, 1};
    cache.key_mask = awl_gc_from_doubles(mask, AWL_SHAPE(B, 1, 1, PAD + T), AWL_F32);
    awl_tensor *first = awl_attention_qkv_cached(
        awl_tensor_contiguous(awl_slice(padded, 1, 0, PAD + 3, 1)), H, &cache);
    awl_tensor *rest = awl_attention_qkv_cached(
        awl_tensor_contiguous(awl_slice(padded, 1, PAD + 3, PAD + T, 1)), H, &cache);
    ck_assert_msg(first && rest, "%s", awl_last_error());
    awl_tensor *parts[2] = {first, rest};
    double *got = awl_gc_values(awl_slice(awl_concat(2, parts, 1), 1, PAD, PAD + T, 1));
    ck_assert(awl_gc_allclose(got, want, B * T * C, 1e-5, 1e-5, "masked cached attention"));
    free(got);
    free(want);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- the generation loop ------------------------------------------------------------ */

enum { ROWS = 3, NEW = 8, ROOM = 16 + 40 };
static const int n_prompt[ROWS] = {1, 4, 7};

/* Runs awl_gpt_generate on rows [first, first + rows) of the ROWS prompts
 * below, as one batch; out[b] has room for ROOM. */
static void generate_rows(awl_gpt *model, int first, int rows, const awl_generate_options *o,
                          int32_t out[][ROOM], int *n_out)
{
    static const int32_t p0[] = {3}, p1[] = {1, 4, 1, 5}, p2[] = {9, 2, 6, 5, 3, 5, 8};
    const int32_t *prompts[ROWS] = {p0, p1, p2};
    int32_t *outs[ROWS] = {out[0], out[1], out[2]};
    ck_assert_msg(awl_gpt_generate(model, rows, prompts + first, n_prompt + first, o, outs + first,
                                   n_out + first) == 0,
                  "%s", awl_last_error());
}

static void assert_same_rows(int32_t a[][ROOM], const int *na, int32_t b[][ROOM], const int *nb,
                             int first, int rows, const char *what)
{
    for (int r = first; r < first + rows; r++) {
        ck_assert_msg(na[r] == nb[r], "%s: row %d has %d and %d tokens", what, r, na[r], nb[r]);
        for (int i = 0; i < na[r]; i++)
            ck_assert_msg(a[r][i] == b[r][i], "%s: row %d token %d: %d and %d", what, r, i, a[r][i],
                          b[r][i]);
    }
}

START_TEST(test_cache_matches_recompute)
{
    awl_gc_begin(13);
    awl_gpt *model = tiny_model();
    awl_generate_options greedy = awl_generate_defaults();
    greedy.max_new_tokens = NEW; /* 7 + 8 fits the block of 16 */
    greedy.temperature = 0.0;
    awl_generate_options sampled = greedy;
    sampled.temperature = 1.3;
    sampled.top_k = 6;
    sampled.top_p = 0.9;
    sampled.seed = 5;
    const awl_generate_options *modes[2] = {&greedy, &sampled};
    const char *modes_named[2] = {"greedy, cached and recomputed",
                                  "sampled, cached and recomputed"};
    for (int m = 0; m < 2; m++) {
        awl_generate_options cached = *modes[m], recompute = *modes[m];
        recompute.use_cache = false;
        int32_t a[ROWS][ROOM], b[ROWS][ROOM], alone[ROWS][ROOM];
        int na[ROWS], nb[ROWS], n_alone[ROWS];
        generate_rows(model, 0, ROWS, &cached, a, na);
        generate_rows(model, 0, ROWS, &recompute, b, nb);
        for (int r = 0; r < ROWS; r++) ck_assert_int_eq(na[r], n_prompt[r] + NEW);
        assert_same_rows(a, na, b, nb, 0, ROWS, modes_named[m]);
        /* a padded row computes what it computes alone (sampling: row 0,
         * whose draws are row 0's either way) */
        for (int r = 0; r < (m == 0 ? ROWS : 1); r++) {
            generate_rows(model, r, 1, &cached, alone, n_alone);
            assert_same_rows(a, na, alone, n_alone, r, 1, "a row alone and in the batch");
        }
    }
    /* the tokens depend on the seed */
    int32_t a[ROWS][ROOM] = {{0}}, b[ROWS][ROOM] = {{0}};
    int na[ROWS], nb[ROWS];
    generate_rows(model, 0, ROWS, &sampled, a, na);
    sampled.seed = 6;
    generate_rows(model, 0, ROWS, &sampled, b, nb);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

/* Prompts of one length: without the cache the rows run through the model
 * as one batch. Greedy tokens are the cache's, and each row's alone. */
START_TEST(test_recompute_batch_of_one_length)
{
    awl_gc_begin(17);
    awl_gpt *model = tiny_model();
    static const int32_t p0[] = {3, 1, 4, 1}, p1[] = {5, 9, 2, 6}, p2[] = {5, 3, 5, 8};
    const int32_t *prompts[ROWS] = {p0, p1, p2};
    const int len[ROWS] = {4, 4, 4};
    awl_generate_options cached = awl_generate_defaults();
    cached.max_new_tokens = NEW;
    cached.temperature = 0.0;
    awl_generate_options recompute = cached;
    recompute.use_cache = false;
    int32_t a[ROWS][ROOM], b[ROWS][ROOM], c[ROWS][ROOM];
    int na[ROWS], nb[ROWS], nc[ROWS];
    int32_t *outs[3][ROWS] = {{a[0], a[1], a[2]}, {b[0], b[1], b[2]}, {c[0], c[1], c[2]}};
    ck_assert_msg(awl_gpt_generate(model, ROWS, prompts, len, &cached, outs[0], na) == 0, "%s",
                  awl_last_error());
    ck_assert_msg(awl_gpt_generate(model, ROWS, prompts, len, &recompute, outs[1], nb) == 0, "%s",
                  awl_last_error());
    for (int r = 0; r < ROWS; r++)
        ck_assert_msg(awl_gpt_generate(model, 1, prompts + r, len + r, &recompute, outs[2] + r,
                                       nc + r) == 0,
                      "%s", awl_last_error());
    for (int r = 0; r < ROWS; r++) ck_assert_int_eq(nb[r], 4 + NEW);
    assert_same_rows(a, na, b, nb, 0, ROWS, "cached, and recomputed as one batch");
    assert_same_rows(b, nb, c, nc, 0, ROWS, "recomputed as one batch, and row by row");
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

/* Past the block the cache starts again from the last half block; the
 * model's training mode is restored. */
START_TEST(test_generate_past_the_block)
{
    awl_gc_begin(14);
    awl_gpt *model = tiny_model();
    awl_module_train(awl_gpt_module(model), true);
    awl_generate_options o = awl_generate_defaults();
    o.max_new_tokens = 40; /* 7 + 40 is almost three blocks */
    o.temperature = 0.8;
    int32_t out[ROWS][ROOM];
    int n_out[ROWS];
    generate_rows(model, 0, ROWS, &o, out, n_out);
    ck_assert(awl_gpt_module(model)->training);
    for (int r = 0; r < ROWS; r++) {
        ck_assert_int_eq(n_out[r], n_prompt[r] + 40);
        for (int i = 0; i < n_out[r]; i++) ck_assert(out[r][i] >= 0 && out[r][i] < 16);
    }
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

typedef struct step_log {
    int steps, stop_after;
    int32_t last[ROWS];
} step_log;

static int count_steps(void *user, const int32_t *tokens, int batch)
{
    step_log *log = user;
    memcpy(log->last, tokens, (size_t)batch * sizeof *tokens);
    return ++log->steps == log->stop_after;
}

START_TEST(test_stop_token_and_callback)
{
    awl_gc_begin(15);
    awl_gpt *model = tiny_model();
    awl_generate_options o = awl_generate_defaults();
    o.max_new_tokens = NEW;
    o.temperature = 0.0;
    int32_t free_run[ROWS][ROOM], stopped[ROWS][ROOM];
    int n_free[ROWS], n_stopped[ROWS];
    generate_rows(model, 0, ROWS, &o, free_run, n_free);
    /* stop at row 1's fourth new token: row 1 ends there, the others at
     * their first occurrence of it, if any */
    o.stop_token = free_run[1][4 + 3];
    step_log log = {0};
    o.on_step = count_steps;
    o.user = &log;
    generate_rows(model, 0, ROWS, &o, stopped, n_stopped);
    int longest = 0;
    for (int r = 0; r < ROWS; r++) {
        int want = n_prompt[r] + NEW;
        for (int i = n_prompt[r]; i < n_prompt[r] + NEW; i++)
            if (free_run[r][i] == o.stop_token) {
                want = i + 1;
                break;
            }
        ck_assert_int_eq(n_stopped[r], want);
        ck_assert_int_le(want, r == 1 ? 4 + 4 : want);
        ck_assert(memcmp(stopped[r], free_run[r], (size_t)want * sizeof **stopped) == 0);
        longest = want - n_prompt[r] > longest ? want - n_prompt[r] : longest;
    }
    ck_assert_int_eq(log.steps, longest); /* generation ends when every row has */
    /* the callback ends generation after two steps */
    log = (step_log){.stop_after = 2};
    o.stop_token = -1;
    generate_rows(model, 0, ROWS, &o, stopped, n_stopped);
    ck_assert_int_eq(log.steps, 2);
    for (int r = 0; r < ROWS; r++) {
        ck_assert_int_eq(n_stopped[r], n_prompt[r] + 2);
        ck_assert_int_eq(log.last[r], stopped[r][n_stopped[r] - 1]);
    }
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- the sampler ------------------------------------------------------------------ */

/* Samples from a fresh copy of logits[0..4). */
static int32_t sample(const double *logits, awl_generate_options o, double u)
{
    double copy[4], scratch[4];
    memcpy(copy, logits, sizeof copy);
    return awl_sample_logits(copy, 4, &o, u, scratch);
}

START_TEST(test_sampler)
{
    /* probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1, most likely at 1 */
    const double p[4] = {0.3, 0.5, 0.15, 0.05};
    double logits[4];
    for (int i = 0; i < 4; i++) logits[i] = log(p[i]) + 2.0;
    awl_generate_options o = awl_generate_defaults();
    /* all tokens: the cumulative order is the index order */
    ck_assert_int_eq(sample(logits, o, 0.0), 0);
    ck_assert_int_eq(sample(logits, o, 0.29), 0);
    ck_assert_int_eq(sample(logits, o, 0.31), 1);
    ck_assert_int_eq(sample(logits, o, 0.81), 2);
    ck_assert_int_eq(sample(logits, o, 0.96), 3);
    /* top-k 2 keeps 0.3 and 0.5: 0 below 0.375, then 1 */
    o.top_k = 2;
    ck_assert_int_eq(sample(logits, o, 0.37), 0);
    ck_assert_int_eq(sample(logits, o, 0.38), 1);
    ck_assert_int_eq(sample(logits, o, 0.999), 1);
    o.top_k = 1;
    ck_assert_int_eq(sample(logits, o, 0.0), 1);
    /* top-p 0.75: 0.5 + 0.3 reach it, 0.5 alone does not */
    o.top_k = 0;
    o.top_p = 0.75;
    ck_assert_int_eq(sample(logits, o, 0.37), 0);
    ck_assert_int_eq(sample(logits, o, 0.999), 1);
    o.top_p = 0.4; /* the most likely alone */
    ck_assert_int_eq(sample(logits, o, 0.0), 1);
    /* top-k 3 then top-p 0.9 of what remains (0.95): 0.5 + 0.3 + 0.15 */
    o.top_k = 3;
    o.top_p = 0.9;
    ck_assert_int_eq(sample(logits, o, 0.999), 2);
    /* temperature: 2 flattens, 0.5 sharpens (probabilities as p^(1/T)) */
    o = awl_generate_defaults();
    o.temperature = 0.5; /* p^2: 0.09, 0.25, 0.0225, 0.0025 of 0.365 */
    ck_assert_int_eq(sample(logits, o, 0.24), 0);
    ck_assert_int_eq(sample(logits, o, 0.25), 1);
    ck_assert_int_eq(sample(logits, o, 0.94), 2);
    /* greedy: the first most likely, whatever u */
    o.temperature = 0.0;
    const double tie[4] = {1.0, 3.0, 3.0, 2.0};
    ck_assert_int_eq(sample(tie, o, 0.99), 1);
}
END_TEST

/* ---- refusals --------------------------------------------------------------------- */

START_TEST(test_errors)
{
    awl_gc_begin(16);
    awl_gpt *model = tiny_model();
    const int32_t prompt[2] = {1, 2}, bad[2] = {1, 16}, *prompts[1] = {prompt};
    int32_t out[32], *outs[1] = {out};
    int n_in = 2, n_out = 0;
    struct {
        awl_generate_options o;
        const char *message;
    } cases[6];
    for (int i = 0; i < 6; i++) cases[i].o = awl_generate_defaults();
    cases[0].o.top_p = 0.0;
    cases[0].message = "top_p 0";
    cases[1].o.top_p = 1.5;
    cases[1].message = "top_p 1.5";
    cases[2].o.stop_token = 16;
    cases[2].message = "stop_token 16";
    cases[3].o.max_new_tokens = -1;
    cases[3].message = "max_new_tokens -1";
    cases[4].o.top_k = -2;
    cases[4].message = "top_k -2";
    cases[5].o.temperature = NAN;
    cases[5].message = "temperature nan";
    for (int i = 0; i < 6; i++) {
        ck_assert_int_lt(awl_gpt_generate(model, 1, prompts, &n_in, &cases[i].o, outs, &n_out), 0);
        ck_assert_msg(strstr(awl_last_error(), cases[i].message) != NULL, "case %d: %s", i,
                      awl_last_error());
    }
    awl_generate_options o = awl_generate_defaults();
    prompts[0] = bad;
    ck_assert_int_lt(awl_gpt_generate(model, 1, prompts, &n_in, &o, outs, &n_out), 0);
    ck_assert_msg(strstr(awl_last_error(), "prompt 0's token 16 at 1 is outside the vocabulary") !=
                      NULL,
                  "%s", awl_last_error());
    n_in = 0;
    ck_assert_int_lt(awl_gpt_generate(model, 1, prompts, &n_in, &o, outs, &n_out), 0);
    ck_assert(strstr(awl_last_error(), "prompt 0 is empty") != NULL);

    /* caches: the capacity, the padding, the input */
    ck_assert_ptr_null(awl_gpt_cache_new(model, 1, 17));
    ck_assert(strstr(awl_last_error(), "capacity 17") != NULL);
    awl_gpt_cache *cache = awl_gpt_cache_new(model, 2, 4);
    ck_assert_msg(cache != NULL, "%s", awl_last_error());
    ck_assert_int_eq(awl_gpt_cache_capacity(cache), 4);
    ck_assert_int_eq(awl_gpt_cache_nbytes(cache),
                     2 * 2 * 2 * 4 * 16 * 4); /* layers, k+v, B, S, C */
    int pads[2] = {0, 4};
    ck_assert_int_lt(awl_gpt_cache_reset(cache, pads), 0);
    ck_assert(strstr(awl_last_error(), "row 1's 4 padding columns") != NULL);
    pads[1] = 1;
    ck_assert_int_eq(awl_gpt_cache_reset(cache, pads), 0);
    const int32_t three[6] = {1, 2, 3, 4, 5, 6};
    awl_tensor *idx = awl_from_data(three, AWL_SHAPE(2, 3), AWL_I32, awl_gc_device());
    awl_tensor *logits = awl_gpt_forward_cached(model, cache, idx);
    ck_assert_msg(awl_gc_has_shape(logits, AWL_SHAPE(2, 16)), "%s", awl_last_error());
    ck_assert_int_eq(awl_gpt_cache_length(cache), 3);
    ck_assert_ptr_null(awl_gpt_forward_cached(model, cache, idx)); /* 3 + 3 > 4 */
    ck_assert_msg(strstr(awl_last_error(), "holding 3 of 4 tokens") != NULL, "%s",
                  awl_last_error());
    awl_gpt_cache_free(cache);
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("generate", test_cached_attention_matches_uncached,
                            test_key_mask_hides_keys, test_cache_matches_recompute,
                            test_recompute_batch_of_one_length, test_generate_past_the_block, test_stop_token_and_callback,
                            test_sampler, test_errors);
}
