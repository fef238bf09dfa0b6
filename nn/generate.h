/*
 * nn/generate.h - text generation with a GPT: a key/value cache, sampling
 * (temperature, top-k, top-p) and the generation loop.
 *
 *     awl_generate_options o = awl_generate_defaults();
 *     o.max_new_tokens = 200;
 *     o.temperature = 0.8;
 *     o.top_k = 200;
 *     const int32_t *prompts[2] = {a, b};          // token ids
 *     int n_prompt[2] = {na, nb}, n_out[2];
 *     int32_t *out[2] = {out_a, out_b};            // room for n_prompt + max_new_tokens
 *     if (awl_gpt_generate(model, 2, prompts, n_prompt, &o, out, n_out) < 0) ...
 *
 * Without a cache, every new token would run the model over the whole
 * context again: T tokens of context cost T times a token's arithmetic. The
 * cache keeps every layer's keys and values of the tokens already seen, so
 * generation runs the prompt once (the prefill) and then one token at a
 * time (decoding), each new token's query attending to the cached keys.
 * docs/generation.md describes the layout and its memory, docs/performance.md
 * the speed.
 *
 * A batch of prompts of different lengths is left-padded to the longest:
 * the padding columns are hidden from every query (the cache's key mask)
 * and each row's positions count from its first real token, so a row
 * computes what it would alone (up to rounding), and every decoding step
 * writes the same cache column for all rows.
 *
 * Everything here runs without recording autograd history, in evaluation
 * mode, on any device whose backend has the required primitives: it is
 * written with tensor ops only.
 */
#ifndef AWL_NN_GENERATE_H
#define AWL_NN_GENERATE_H

#include "nn/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the key/value cache ------------------------------------------------------------ */

typedef struct awl_gpt_cache awl_gpt_cache;

/* A cache for `batch` rows of at most `capacity` tokens (1 <= capacity <=
 * the model's block), on the model's device, in the dtype its attention
 * computes in (the autocast dtype when autocast is on, else the
 * parameters'). One allocation of 2 * n_layer * batch * capacity * n_embd
 * elements, zero-filled. NULL after an error. */
awl_gpt_cache *awl_gpt_cache_new(awl_gpt *model, int batch, int capacity);

/* Frees the cache. NULL is a no-op. */
void awl_gpt_cache_free(awl_gpt_cache *cache);

/* Empties the cache for a new batch. n_pad NULL: no row is padded; else
 * n_pad[b] of row b's first columns are padding (hidden from every query;
 * the row's positions start after them). Returns 0 or negative (a count
 * outside [0, capacity)). */
int awl_gpt_cache_reset(awl_gpt_cache *cache, const int *n_pad);

/* Columns filled so far (the same for every row), and the most there can be. */
int awl_gpt_cache_length(const awl_gpt_cache *cache);
int awl_gpt_cache_capacity(const awl_gpt_cache *cache);

/* Device bytes the keys and values take. */
int64_t awl_gpt_cache_nbytes(const awl_gpt_cache *cache);

/* Runs the model over the next T tokens of each row, idx int32 (batch, T),
 * appending their keys and values to the cache (its length grows by T; it
 * must have room), and returns the logits after each row's last token,
 * (batch, vocab), owned by the current scope. A row's token in column c
 * sits at position c - n_pad[b]. Records no graph; call it in evaluation
 * mode (awl_gpt_generate sets it). NULL after an error, after which the
 * cache must be reset. */
awl_tensor *awl_gpt_forward_cached(awl_gpt *model, awl_gpt_cache *cache, awl_tensor *idx);

/* ---- sampling and the loop ----------------------------------------------------------- */

typedef struct awl_generate_options {
    int max_new_tokens; /* tokens to add to each row, at most            */
    double temperature; /* logits are divided by it; <= 0: greedy        */
    int top_k;          /* > 0: only the k most likely tokens; 0: all    */
    double top_p;       /* in (0, 1]: the fewest most likely tokens whose
                           probability reaches top_p (nucleus); 1: all   */
    int stop_token;     /* a row ends after producing it; -1: none       */
    uint64_t seed;      /* sampling's own Philox stream                  */
    bool use_cache;     /* false: run the whole context for every token
                           (the reference the cache is tested against)  */
    /* When not NULL, called after every step with the token each row has
     * just produced (-1 for a row that had already ended); a nonzero
     * return ends generation there. */
    int (*on_step)(void *user, const int32_t *tokens, int batch);
    void *user;
} awl_generate_options;

/* max_new_tokens 100, temperature 1, top_k 0, top_p 1, stop_token -1,
 * seed 0, use_cache true, no callback. */
awl_generate_options awl_generate_defaults(void);

/* Picks a token from logits[0..vocab) (overwritten) with o's temperature,
 * top_k and top_p, in that order, from u uniform in [0, 1): the token
 * whose interval of cumulative probability holds u. Tokens tied with the
 * last one top_k or top_p keeps are kept too. scratch holds vocab doubles.
 * Greedy (temperature <= 0) returns the first most likely token. */
int32_t awl_sample_logits(double *logits, int vocab, const awl_generate_options *o, double u,
                          double *scratch);

/* Continues batch prompts: prompts[b][0..n_prompt[b]) (n_prompt[b] >= 1,
 * ids in the vocabulary). out[b] receives the prompt and then the new
 * tokens (room for n_prompt[b] + max_new_tokens ids) and n_out[b] their
 * count: fewer than n_prompt[b] + max_new_tokens when the row produced
 * stop_token (which is kept) or on_step ended it. Row b's draw at step s
 * is word 0 of Philox block b * 2^32 + s under key seed, so a row's tokens
 * do not depend on the other rows of the batch (only on its index b).
 *
 * With the cache, the prompts are run at once (prefill), then one token
 * per row at a time. A context longer than the block has no exact cached
 * form (every position would move), so when the cache is full it starts
 * again from the last block / 2 tokens of each row (one prefill per block
 * / 2 new tokens); a prompt longer than the block starts from its last
 * block tokens. Without the cache, each step runs each row's last block
 * tokens, as nanoGPT's sample does; the two agree while the context fits
 * in the block (tests/test_generate.c).
 *
 * Runs in evaluation mode and without grad (both restored afterwards).
 * Returns 0, or negative after an error. */
int awl_gpt_generate(awl_gpt *model, int batch, const int32_t *const *prompts, const int *n_prompt,
                     const awl_generate_options *o, int32_t *const *out, int *n_out);

#ifdef __cplusplus
}
#endif

#endif
