/*
 * nn/generate.c - generation with a key/value cache (see generate.h).
 *
 * The cache is one tensor, (n_layer, 2, B, H, capacity, D): layer l's keys
 * are [l][0] and its values [l][1], each a (B, H, capacity, D) view held in
 * an awl_attention_cache (nn/nn.h), so a head's keys lie one after another
 * and attention over the first S of them reads one (S, D) block. A forward
 * with the cache attaches each layer's view to its attention layer, runs
 * the model's own layers (nn/gpt_internal.h) with each token's position,
 * computes the head for the last column only, and detaches the views.
 *
 * Rows of different lengths are left-padded so that they end in the same
 * column: then every decoding step appends one column for all rows, and the
 * padding is hidden by one key mask per batch, (B, 1, 1, capacity), built
 * once when the cache is reset.
 *
 * Sampling runs on the host in double precision, on each row's logits of
 * the step (vocab numbers per row, copied as float32: for GPT-2, 200 KB a
 * row against the model's 500 MB of weights). Top-k finds its cutoff by
 * selection, not by sorting the vocabulary; top-p sorts what remains (all
 * of it when top-k is off). Greedy decoding on a device whose memory is not
 * the host's takes each row's argmax where the logits are, and only the
 * token crosses to the host: at batch 32 the rows' logits would be 6.4 MB a
 * step.
 */
#include "nn/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/philox.h"
#include "nn/gpt_internal.h"

struct awl_gpt_cache {
    int n_layer, batch, capacity;
    awl_tensor *kv;              /* (n_layer, 2, B, H, capacity, D) */
    awl_attention_cache *layers; /* per layer: views of kv, the length, the mask */
    awl_tensor *key_mask;        /* (B, 1, 1, capacity), 1 at padding; NULL without */
    int *n_pad;                  /* padding columns at the start of each row */
};

/* ---- the cache ---------------------------------------------------------------------------- */

static awl_tensor *embedding_weight(const awl_gpt *g)
{
    return awl_module_get_param(g->wte, "weight");
}

static const char *model_device(const awl_gpt *g, char *buf, size_t size)
{
    return awl_tensor_device_name(embedding_weight(g), buf, size);
}

/* The dtype the model's attention computes in. */
static awl_dtype compute_dtype(const awl_gpt *g)
{
    return g->autocast != AWL_F32 ? g->autocast : embedding_weight(g)->dtype;
}

awl_gpt_cache *awl_gpt_cache_new(awl_gpt *model, int batch, int capacity)
{
    if (!model) return NULL;
    const awl_gpt_config *c = &model->cfg;
    if (batch < 1 || capacity < 1 || capacity > c->block) {
        awl_error(AWL_ERR_INVALID,
                  "awl_gpt_cache_new: batch %d, capacity %d: both must be positive and the "
                  "capacity at most the block (%d)",
                  batch, capacity, c->block);
        return NULL;
    }
    int64_t L = c->n_layer, B = batch, H = c->n_head, S = capacity, D = c->n_embd / c->n_head;
    char device[32];
    awl_scope_begin();
    awl_tensor *kv = awl_zeros(AWL_SHAPE(L, 2, B, H, S, D), compute_dtype(model),
                               model_device(model, device, sizeof device));
    awl_gpt_cache *cache = NULL;
    if (kv) {
        cache = awl_xcalloc(1, sizeof *cache);
        *cache = (awl_gpt_cache){.n_layer = c->n_layer, .batch = batch, .capacity = capacity};
        cache->kv = awl_retain(kv);
        cache->layers = awl_xcalloc((size_t)L, sizeof *cache->layers);
        cache->n_pad = awl_xcalloc((size_t)B, sizeof *cache->n_pad);
        const int64_t strides[4] = {H * S * D, S * D, D, 1}, one = B * H * S * D;
        for (int64_t l = 0; l < L; l++) {
            awl_attention_cache *layer = &cache->layers[l];
            layer->k = awl_retain(awl_tensor_as_strided(kv, AWL_SHAPE(B, H, S, D), strides,
                                                        kv->offset + 2 * l * one));
            layer->v = awl_retain(awl_tensor_as_strided(kv, AWL_SHAPE(B, H, S, D), strides,
                                                        kv->offset + (2 * l + 1) * one));
        }
    }
    awl_scope_end();
    return cache;
}

void awl_gpt_cache_free(awl_gpt_cache *cache)
{
    if (!cache) return;
    for (int l = 0; l < cache->n_layer; l++) {
        awl_release(cache->layers[l].k);
        awl_release(cache->layers[l].v);
    }
    awl_release(cache->key_mask);
    awl_release(cache->kv);
    free(cache->layers);
    free(cache->n_pad);
    free(cache);
}

/* (B, 1, 1, capacity) in the cache's dtype: 1 at each row's padding. */
static awl_tensor *padding_mask(const awl_gpt_cache *c, const int *n_pad)
{
    int64_t B = c->batch, S = c->capacity;
    double *m = awl_xcalloc((size_t)(B * S), sizeof *m);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < n_pad[b]; j++) m[b * S + j] = 1.0;
    char device[32];
    awl_scope_begin();
    awl_tensor *mask = awl_retain(
        awl_tensor_cast(awl_from_data(m, AWL_SHAPE(B, 1, 1, S), AWL_F64,
                                      awl_tensor_device_name(c->kv, device, sizeof device)),
                        c->kv->dtype));
    awl_scope_end();
    free(m);
    return mask;
}

int awl_gpt_cache_reset(awl_gpt_cache *cache, const int *n_pad)
{
    if (!cache) return AWL_ERR_INVALID;
    bool padded = false;
    for (int b = 0; n_pad && b < cache->batch; b++) {
        if (n_pad[b] < 0 || n_pad[b] >= cache->capacity)
            return awl_error(AWL_ERR_INVALID,
                             "awl_gpt_cache_reset: row %d's %d padding columns are outside "
                             "[0, %d) (the capacity)",
                             b, n_pad[b], cache->capacity);
        padded |= n_pad[b] > 0;
    }
    awl_tensor *mask = padded ? padding_mask(cache, n_pad) : NULL;
    if (padded && !mask) return AWL_ERR_INVALID;
    awl_release(cache->key_mask);
    cache->key_mask = mask;
    for (int b = 0; b < cache->batch; b++) cache->n_pad[b] = n_pad ? n_pad[b] : 0;
    for (int l = 0; l < cache->n_layer; l++)
        cache->layers[l] = (awl_attention_cache){cache->layers[l].k, cache->layers[l].v, 0, mask};
    return AWL_OK;
}

int awl_gpt_cache_length(const awl_gpt_cache *cache)
{
    return cache ? (int)cache->layers[0].length : 0;
}

int awl_gpt_cache_capacity(const awl_gpt_cache *cache) { return cache ? cache->capacity : 0; }

int64_t awl_gpt_cache_nbytes(const awl_gpt_cache *cache)
{
    return cache ? awl_numel(cache->kv) * (int64_t)awl_dtype_size(cache->kv->dtype) : 0;
}

/* ---- the forward with the cache ------------------------------------------------------------ */

/* Each row's positions for the next T columns: column - n_pad (padding
 * itself sits at 0). */
static awl_tensor *next_positions(const awl_gpt_cache *c, int64_t T, const char *device)
{
    int64_t B = c->batch, first = awl_gpt_cache_length(c);
    int32_t *p = awl_xmalloc((size_t)(B * T) * sizeof *p);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < T; t++) {
            int64_t pos = first + t - c->n_pad[b];
            p[b * T + t] = (int32_t)(pos > 0 ? pos : 0);
        }
    }
    awl_tensor *pos = awl_from_data(p, AWL_SHAPE(B, T), AWL_I32, device);
    free(p);
    return pos;
}

/* Gives each block's attention layer its slice of the cache (NULL: none). */
static int attach_cache(awl_gpt *g, awl_gpt_cache *c)
{
    int status = AWL_OK;
    for (int l = 0; l < g->cfg.n_layer && status == AWL_OK; l++)
        status = awl_causal_self_attention_set_cache(awl_module_get_child(g->blocks[l], "attn"),
                                                     c ? &c->layers[l] : NULL);
    return status;
}

static int check_cached_input(const awl_gpt *g, const awl_gpt_cache *c, const awl_tensor *idx)
{
    char s[AWL_MAX_DIMS * 24];
    if (c->n_layer != g->cfg.n_layer || idx->ndim != 2 || idx->dtype != AWL_I32 ||
        idx->shape[0] != c->batch || idx->shape[1] < 1 ||
        awl_gpt_cache_length(c) + idx->shape[1] > c->capacity)
        return awl_error(AWL_ERR_INVALID,
                         "awl_gpt_forward_cached: idx %s %s does not fit a cache of %d layers "
                         "for %d rows holding %d of %d tokens (the model has %d layers)",
                         awl_dtype_name(idx->dtype), awl_shape_str(idx, s, sizeof s), c->n_layer,
                         c->batch, awl_gpt_cache_length(c), c->capacity, g->cfg.n_layer);
    return AWL_OK;
}

awl_tensor *awl_gpt_forward_cached(awl_gpt *model, awl_gpt_cache *cache, awl_tensor *idx)
{
    if (!model || !cache || !idx || check_cached_input(model, cache, idx) < 0) return NULL;
    int64_t B = idx->shape[0], T = idx->shape[1];
    char device[32];
    awl_no_grad_begin();
    awl_scope_begin();
    awl_tensor *logits = NULL;
    if (attach_cache(model, cache) == AWL_OK) {
        awl_dtype before = awl_gpt_autocast_enter(model);
        awl_tensor *pos = next_positions(cache, T, model_device(model, device, sizeof device));
        awl_tensor *h = awl_gpt_hidden(model, idx, pos);
        awl_tensor *last = awl_reshape(awl_slice(h, 1, T - 1, T, 1), AWL_SHAPE(B, -1));
        logits = awl_gpt_head(model, last);
        awl_autocast_set(before);
    }
    attach_cache(model, NULL);
    logits = awl_keep(logits);
    awl_scope_end();
    awl_no_grad_end();
    return logits;
}

/* ---- sampling ------------------------------------------------------------------------------- */

awl_generate_options awl_generate_defaults(void)
{
    return (awl_generate_options){.max_new_tokens = 100,
                                  .temperature = 1.0,
                                  .top_k = 0,
                                  .top_p = 1.0,
                                  .stop_token = -1,
                                  .seed = 0,
                                  .use_cache = true};
}

static int compare_descending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* The k-th largest of a[0..n), 1 <= k <= n (a is reordered): Hoare's
 * selection, linear on average, where sorting the vocabulary would be
 * n log n. */
static double kth_largest(double *a, int n, int k)
{
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        double pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) { /* larger values to the left */
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                double t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return a[want]; /* between the halves: equal to the pivot */
    }
    return a[want];
}

/* The smallest weight of the fewest largest weights w[0..n) (reordered)
 * whose sum reaches p * total. */
static double nucleus_floor(double *w, int n, double p, double total)
{
    qsort(w, (size_t)n, sizeof *w, compare_descending);
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += w[i];
        if (acc >= p * total) return w[i];
    }
    return w[n - 1]; /* rounding kept the sum short of the mark: keep all */
}

int32_t awl_sample_logits(double *logits, int vocab, const awl_generate_options *o, double u,
                          double *scratch)
{
    int best = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    if (o->temperature <= 0.0) return best;
    double cutoff = -INFINITY;
    if (o->top_k > 0 && o->top_k < vocab) {
        memcpy(scratch, logits, (size_t)vocab * sizeof *scratch);
        cutoff = kth_largest(scratch, vocab, o->top_k);
    }
    const double max = logits[best]; /* read once: the loop overwrites logits[best] */
    double total = 0.0;
    int kept = 0;
    for (int i = 0; i < vocab; i++) { /* logits become unnormalised probabilities */
        logits[i] = logits[i] < cutoff ? 0.0 : exp((logits[i] - max) / o->temperature);
        total += logits[i];
        if (logits[i] > 0.0) scratch[kept++] = logits[i];
    }
    if (o->top_p < 1.0) {
        double floor = nucleus_floor(scratch, kept, o->top_p, total);
        total = 0.0;
        for (int i = 0; i < vocab; i++) {
            if (logits[i] < floor) logits[i] = 0.0;
            total += logits[i];
        }
    }
    double target = u * total, acc = 0.0;
    for (int i = 0; i < vocab; i++) {
        acc += logits[i];
        if (logits[i] > 0.0 && acc > target) return i;
    }
    return best;
}

/* ---- the loop ------------------------------------------------------------------------------- */

typedef struct generation {
    awl_gpt *model;
    const awl_generate_options *o;
    int batch, vocab;
    int32_t *const *out;
    int *n_out;
    bool *ended;
    double *logits;  /* (batch, vocab): each row's logits for its next token */
    float *staged;   /* (batch, vocab): the same as they come from the device */
    double *scratch; /* vocab */
    int32_t *picked; /* (batch): a row's greedy token found on the device, or -1 */
    int32_t *tokens; /* (batch): the step's new tokens, -1 for ended rows */
} generation;

/* Each row's greedy token, the first largest of its logits (rows, vocab),
 * computed on their device, into g->picked from row `first` on. Returns
 * false, having picked nothing, when a row has no largest logit (a NaN):
 * the host then samples from the logits, as for any other row. */
static bool greedy_on_device(generation *g, awl_tensor *logits, int64_t rows, int first)
{
    char device[32];
    awl_tensor_device_name(logits, device, sizeof device);
    awl_tensor *l32 = awl_tensor_cast(logits, AWL_F32); /* float32 counts the vocabulary exactly */
    awl_tensor *table = awl_tensor_reshape(l32, 2, (int64_t[]){rows, g->vocab});
    awl_tensor *best = awl_tensor_reduce(AWL_REDUCE_MAX, table, 1, (int[]){1}, true);
    awl_tensor *column = awl_arange(0, g->vocab, 1, AWL_F32, device);
    awl_tensor *past_end = awl_full(1, (int64_t[]){1}, g->vocab, AWL_F32, device);
    /* each row's columns that hold its largest logit, the others past the end */
    awl_tensor *hits = awl_tensor_where(awl_tensor_binary(AWL_BINARY_EQ, table, best), column,
                                        past_end);
    awl_tensor *index = awl_tensor_reduce(AWL_REDUCE_MIN, hits, 1, (int[]){1}, false);
    float *host = g->staged; /* rows floats, the room of the logits not copied */
    if (!index || awl_to_host(index, host, (size_t)rows * sizeof *host) != AWL_OK) return false;
    for (int64_t r = 0; r < rows; r++)
        if (!(host[r] < (float)g->vocab)) return false;
    for (int64_t r = 0; r < rows; r++) g->picked[first + r] = (int32_t)host[r];
    return true;
}

/* logits (rows, vocab) into g->logits from row `first` on; for greedy
 * decoding off the host, only each row's token into g->picked. */
static int logits_to_host(generation *g, awl_tensor *logits, int first)
{
    if (!logits) return AWL_ERR_INVALID;
    const int64_t n = awl_numel(logits), rows = n / g->vocab;
    for (int64_t r = 0; r < rows; r++) g->picked[first + r] = -1;
    if (g->o->temperature <= 0.0 && !awl_tensor_is_host(logits) &&
        greedy_on_device(g, logits, rows, first))
        return AWL_OK;
    awl_tensor *l32 = awl_tensor_cast(logits, AWL_F32);
    if (!l32) return AWL_ERR_INVALID;
    int status = awl_to_host(l32, g->staged, (size_t)n * sizeof *g->staged);
    double *dst = g->logits + (size_t)first * (size_t)g->vocab;
    for (int64_t i = 0; status == AWL_OK && i < n; i++) dst[i] = g->staged[i];
    return status;
}

/* Samples each live row's next token and appends it. Returns true when
 * generation is over: every row has ended, or on_step said so. */
static bool sample_step(generation *g, int step)
{
    bool live = false;
    for (int b = 0; b < g->batch; b++) {
        g->tokens[b] = -1;
        if (g->ended[b]) continue;
        double u = awl_philox_uniform_at(g->o->seed, ((uint64_t)b << 32) + (uint64_t)step, 0);
        int32_t t = g->picked[b] >= 0
                        ? g->picked[b]
                        : awl_sample_logits(g->logits + (size_t)b * (size_t)g->vocab, g->vocab,
                                            g->o, u, g->scratch);
        g->out[b][g->n_out[b]++] = t;
        g->tokens[b] = t;
        g->ended[b] = t == g->o->stop_token;
        live |= !g->ended[b];
    }
    if (g->o->on_step && g->o->on_step(g->o->user, g->tokens, g->batch) != 0) return true;
    return !live;
}

/* The logits after the last of `rows` rows of T tokens each (ids, rows x T,
 * row-major), the whole context run through the model (the head for the
 * last column only), into the generation's rows from `first` on. */
static int recompute_rows(generation *g, const int32_t *ids, int rows, int64_t T, int first,
                          const char *device)
{
    awl_scope_begin();
    awl_tensor *idx = awl_from_data(ids, AWL_SHAPE(rows, T), AWL_I32, device);
    awl_dtype before = awl_gpt_autocast_enter(g->model);
    awl_tensor *h = awl_gpt_hidden(g->model, idx, NULL);
    awl_tensor *logits = awl_gpt_head(g->model, awl_slice(h, 1, T - 1, T, 1));
    awl_autocast_set(before);
    int status = logits_to_host(g, logits, first);
    awl_scope_end();
    return status;
}

/* Without a cache: every step runs each live row's last `block` tokens
 * through the whole model. While every row is live and all have one length
 * (prompts of one length, no row stopped), the rows go through together,
 * as one batch; otherwise one at a time. */
static int run_recompute(generation *g)
{
    const int block = g->model->cfg.block, B = g->batch;
    char device[32];
    model_device(g->model, device, sizeof device);
    int32_t *ids = awl_xmalloc((size_t)B * (size_t)block * sizeof *ids);
    int status = AWL_OK;
    for (int step = 0; step < g->o->max_new_tokens && status == AWL_OK; step++) {
        bool together = true;
        for (int b = 0; b < B; b++) together &= !g->ended[b] && g->n_out[b] == g->n_out[0];
        if (together) {
            int n = g->n_out[0], start = n > block ? n - block : 0;
            int64_t T = n - start;
            for (int b = 0; b < B; b++)
                memcpy(ids + (size_t)b * (size_t)T, g->out[b] + start, (size_t)T * sizeof *ids);
            status = recompute_rows(g, ids, B, T, 0, device);
        }
        for (int b = 0; !together && b < B && status == AWL_OK; b++) {
            if (g->ended[b]) continue;
            int n = g->n_out[b], start = n > block ? n - block : 0;
            status = recompute_rows(g, g->out[b] + start, 1, n - start, b, device);
        }
        if (status == AWL_OK && sample_step(g, step)) break;
    }
    free(ids);
    return status;
}

/* Starts the cache from each row's last `window` tokens (a shorter row
 * left-padded), leaving the logits after them in g->logits. */
static int prefill(generation *g, awl_gpt_cache *cache, int window)
{
    int B = g->batch, P = 0;
    int *n_pad = awl_xcalloc((size_t)B, sizeof *n_pad);
    for (int b = 0; b < B; b++) {
        n_pad[b] = g->n_out[b] < window ? g->n_out[b] : window; /* the row's tokens, for now */
        P = n_pad[b] > P ? n_pad[b] : P;
    }
    int32_t *ids = awl_xcalloc((size_t)B * (size_t)P, sizeof *ids); /* padding: token 0 */
    for (int b = 0; b < B; b++) {
        int n = n_pad[b];
        n_pad[b] = P - n;
        memcpy(ids + (size_t)b * P + n_pad[b], g->out[b] + g->n_out[b] - n,
               (size_t)n * sizeof *ids);
    }
    char device[32];
    int status = awl_gpt_cache_reset(cache, n_pad);
    awl_scope_begin();
    if (status == AWL_OK) {
        awl_tensor *idx = awl_from_data(ids, AWL_SHAPE(B, P), AWL_I32,
                                        model_device(g->model, device, sizeof device));
        status = logits_to_host(g, awl_gpt_forward_cached(g->model, cache, idx), 0);
    }
    awl_scope_end();
    free(ids);
    free(n_pad);
    return status;
}

/* With the cache: the prompts at once, then one token per row a step. */
static int run_cached(generation *g)
{
    const int block = g->model->cfg.block, n_new = g->o->max_new_tokens;
    int longest = 0;
    for (int b = 0; b < g->batch; b++) longest = g->n_out[b] > longest ? g->n_out[b] : longest;
    /* room for the prompt and every new token but the last, which is
     * sampled and never run */
    int64_t needed = (int64_t)(longest < block ? longest : block) + n_new - 1;
    int capacity = needed < block ? (int)needed : block;
    awl_gpt_cache *cache = awl_gpt_cache_new(g->model, g->batch, capacity);
    int32_t *next = awl_xmalloc((size_t)g->batch * sizeof *next);
    char device[32];
    model_device(g->model, device, sizeof device);
    int status = cache ? prefill(g, cache, block) : AWL_ERR_INVALID;
    for (int step = 0; step < n_new && status == AWL_OK; step++) {
        if (sample_step(g, step) || step == n_new - 1) break;
        if (awl_gpt_cache_length(cache) == capacity) { /* full: keep the last half block */
            status = prefill(g, cache, block > 1 ? block / 2 : 1);
            continue;
        }
        for (int b = 0; b < g->batch; b++) next[b] = g->out[b][g->n_out[b] - 1];
        awl_scope_begin();
        awl_tensor *idx = awl_from_data(next, AWL_SHAPE(g->batch, 1), AWL_I32, device);
        status = logits_to_host(g, awl_gpt_forward_cached(g->model, cache, idx), 0);
        awl_scope_end();
    }
    free(next);
    awl_gpt_cache_free(cache);
    return status;
}

static int check_request(const awl_gpt *model, int batch, const int32_t *const *prompts,
                         const int *n_prompt, const awl_generate_options *o, int32_t *const *out,
                         const int *n_out)
{
    const char *op = "awl_gpt_generate";
    if (!model || batch < 1 || !prompts || !n_prompt || !o || !out || !n_out)
        return awl_error(AWL_ERR_INVALID,
                         "%s: needs a model, a batch of at least one prompt, options and output "
                         "buffers",
                         op);
    const int V = model->cfg.vocab;
    if (o->max_new_tokens < 0 || o->top_k < 0 || !(o->top_p > 0.0 && o->top_p <= 1.0) ||
        isnan(o->temperature) || o->stop_token < -1 || o->stop_token >= V)
        return awl_error(AWL_ERR_INVALID,
                         "%s: max_new_tokens %d, top_k %d, top_p %g, temperature %g, stop_token "
                         "%d: expected max_new_tokens and top_k >= 0, top_p in (0, 1], a "
                         "temperature, a stop token in [-1, %d)",
                         op, o->max_new_tokens, o->top_k, o->top_p, o->temperature, o->stop_token,
                         V);
    for (int b = 0; b < batch; b++) {
        if (!prompts[b] || !out[b] || n_prompt[b] < 1)
            return awl_error(AWL_ERR_INVALID, "%s: prompt %d is empty or has no output buffer", op,
                             b);
        for (int i = 0; i < n_prompt[b]; i++)
            if (prompts[b][i] < 0 || prompts[b][i] >= V)
                return awl_error(AWL_ERR_INVALID,
                                 "%s: prompt %d's token %d at %d is outside the vocabulary [0, %d)",
                                 op, b, prompts[b][i], i, V);
    }
    return AWL_OK;
}

int awl_gpt_generate(awl_gpt *model, int batch, const int32_t *const *prompts, const int *n_prompt,
                     const awl_generate_options *o, int32_t *const *out, int *n_out)
{
    int status = check_request(model, batch, prompts, n_prompt, o, out, n_out);
    if (status < 0) return status;
    for (int b = 0; b < batch; b++) {
        memmove(out[b], prompts[b], (size_t)n_prompt[b] * sizeof *out[b]);
        n_out[b] = n_prompt[b];
    }
    if (o->max_new_tokens == 0) return AWL_OK;
    const int V = model->cfg.vocab;
    generation g = {.model = model,
                    .o = o,
                    .batch = batch,
                    .vocab = V,
                    .out = out,
                    .n_out = n_out,
                    .ended = awl_xcalloc((size_t)batch, sizeof(bool)),
                    .logits = awl_xmalloc((size_t)batch * (size_t)V * sizeof(double)),
                    .staged = awl_xmalloc((size_t)batch * (size_t)V * sizeof(float)),
                    .scratch = awl_xmalloc((size_t)V * sizeof(double)),
                    .picked = awl_xmalloc((size_t)batch * sizeof(int32_t)),
                    .tokens = awl_xmalloc((size_t)batch * sizeof(int32_t))};
    bool was_training = model->base.training;
    awl_module_train(&model->base, false);
    awl_no_grad_begin();
    status = o->use_cache ? run_cached(&g) : run_recompute(&g);
    awl_no_grad_end();
    awl_module_train(&model->base, was_training);
    free(g.ended);
    free(g.logits);
    free(g.staged);
    free(g.scratch);
    free(g.picked);
    free(g.tokens);
    return status;
}
