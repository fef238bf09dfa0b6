/*
 * data/dataset.c - a tokenized text corpus and its random batches.
 *
 * The whole corpus is read, encoded once and kept as one int32 array, like
 * nanoGPT's train.bin/val.bin: a few megabytes of text is a few megabytes of
 * tokens, and sampling a window is then a memcpy. The split is positional
 * (the first train_fraction of the tokens trains, the rest validates), so
 * validation text is never seen in training, not even inside a window.
 *
 * Files are read through zlib's gz* functions, which pass plain files through
 * unchanged and inflate gzip ones, so a caller never says which it is. A
 * gzip file cut short is an error, not a silently shorter corpus.
 *
 * Sampling. Row b of the k-th batch drawn from a split starts at
 *     philox4x32(key = seed, counter = k << 32 | b)  mod  (tokens - block),
 * using words 0-1 of the block for the training split and words 2-3 for
 * validation. No state but (seed, k) per split exists, so:
 *   - the same seed gives the same batches, on any device and thread count;
 *   - evaluating validation batches does not shift the training stream;
 *   - a checkpoint restores the stream by storing seed and the two positions.
 * The modulo's bias is below (tokens / 2^64): invisible. Only the low 32
 * bits of k reach the counter, so a stream repeats after 2^32 batches.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/philox.h"
#include "data/data.h"

struct awl_text_dataset {
    int32_t *tokens; /* training tokens, then validation tokens */
    size_t n_tokens, n_train;
    const awl_tokenizer *tok;
    awl_tokenizer *owned_tok; /* tok when the dataset built it, else NULL */
    int block;
    uint64_t seed;
    uint64_t position[2]; /* batches drawn, per split */
};

static const char *const OPEN = "awl_text_dataset_open";
static const char *const FROM_TEXT = "awl_text_dataset_from_text";

static const char *split_name(awl_data_split split)
{
    return split == AWL_SPLIT_TRAIN ? "train" : "val";
}

/* Reads the whole of a plain or gzip file into *text (malloc'd). */
static int read_file(const char *path, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return awl_error(AWL_ERR_IO, "%s: cannot open '%s': %s", OPEN, path, strerror(errno));
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return awl_error(AWL_ERR_OOM, "%s: out of memory opening '%s'", OPEN, path);
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    int rc = 0, zerr = Z_OK;
    for (;;) {
        if (!buf) {
            rc = awl_error(AWL_ERR_OOM, "%s: out of memory reading '%s' (%zu bytes)", OPEN, path,
                           cap);
            break;
        }
        if (n == cap) {
            char *bigger = realloc(buf, 2 * cap);
            if (!bigger) free(buf);
            buf = bigger;
            cap *= 2;
            continue;
        }
        size_t want = cap - n < INT_MAX ? cap - n : INT_MAX;
        int got = gzread(gz, buf + n, (unsigned)want);
        if (got < 0) {
            const char *msg = gzerror(gz, &zerr);
            rc =
                zerr == Z_ERRNO
                    ? awl_error(AWL_ERR_IO, "%s: cannot read '%s': %s", OPEN, path, strerror(errno))
                    : awl_error(AWL_ERR_FORMAT, "%s: '%s' is not valid gzip: %s", OPEN, path, msg);
            break;
        }
        if (got == 0) {
            /* zlib stops quietly at a truncated stream; gzerror tells. */
            gzerror(gz, &zerr);
            if (zerr == Z_BUF_ERROR)
                rc = awl_error(AWL_ERR_FORMAT, "%s: '%s' is a truncated gzip file", OPEN, path);
            break;
        }
        n += (size_t)got;
    }
    gzclose(gz);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *text = buf;
    *len = n;
    return 0;
}

/* Re-records the last error with `op` and `where` in front, so that an
 * encoding failure names the file it came from. */
static int prefix_error(const char *op, const char *where)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", awl_last_error());
    return awl_error(awl_last_error_code(), "%s: %s: %s", op, where, msg);
}

/* The dataset over text; `op` is the public function, `where` names the
 * source in messages. */
static awl_text_dataset *dataset_new(const char *text, size_t len, const awl_tokenizer *tok,
                                     int block, double train_fraction, const char *op,
                                     const char *where)
{
    if (block < 1) {
        awl_error(AWL_ERR_INVALID, "%s: block must be at least 1, got %d", op, block);
        return NULL;
    }
    if (!(train_fraction > 0 && train_fraction <= 1)) {
        awl_error(AWL_ERR_INVALID, "%s: train_fraction must be in (0, 1], got %g", op,
                  train_fraction);
        return NULL;
    }
    if (len == 0) {
        awl_error(AWL_ERR_INVALID, "%s: %s is empty", op, where);
        return NULL;
    }
    awl_text_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) {
        awl_error(AWL_ERR_OOM, "%s: out of memory", op);
        return NULL;
    }
    ds->block = block;
    ds->tok = tok;
    if (!tok) {
        ds->owned_tok = awl_tokenizer_char_from_text(text, len);
        ds->tok = ds->owned_tok;
        if (!ds->tok) goto fail;
    }
    if (awl_tokenizer_encode(ds->tok, text, len, &ds->tokens, &ds->n_tokens) != 0) {
        prefix_error(op, where);
        goto fail;
    }
    /* nanoGPT's split: int(n * 0.9) tokens train. */
    ds->n_train = (size_t)((double)ds->n_tokens * train_fraction);
    size_t n_val = ds->n_tokens - ds->n_train;
    if (ds->n_train < (size_t)block + 1 || (n_val > 0 && n_val < (size_t)block + 1)) {
        awl_error(AWL_ERR_INVALID,
                  "%s: %s is too short: %zu tokens split into %zu (train) and %zu (val), but a "
                  "non-empty split needs block + 1 = %d",
                  op, where, ds->n_tokens, ds->n_train, n_val, block + 1);
        goto fail;
    }
    return ds;
fail:
    awl_text_dataset_free(ds);
    return NULL;
}

awl_text_dataset *awl_text_dataset_open(const char *path, const awl_tokenizer *tok, int block,
                                        double train_fraction)
{
    if (!path) {
        awl_error(AWL_ERR_INVALID, "%s: path is NULL", OPEN);
        return NULL;
    }
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return NULL;
    size_t where_len = strlen(path) + 3;
    char *where = malloc(where_len);
    awl_text_dataset *ds = NULL;
    if (where) {
        snprintf(where, where_len, "'%s'", path);
        ds = dataset_new(text, len, tok, block, train_fraction, OPEN, where);
    } else {
        awl_error(AWL_ERR_OOM, "%s: out of memory", OPEN);
    }
    free(where);
    free(text);
    return ds;
}

awl_text_dataset *awl_text_dataset_from_text(const char *text, size_t len, const awl_tokenizer *tok,
                                             int block, double train_fraction)
{
    if (!text && len > 0) {
        awl_error(AWL_ERR_INVALID, "%s: text is NULL", FROM_TEXT);
        return NULL;
    }
    return dataset_new(text, len, tok, block, train_fraction, FROM_TEXT, "the text");
}

void awl_text_dataset_free(awl_text_dataset *ds)
{
    if (!ds) return;
    free(ds->tokens);
    awl_tokenizer_free(ds->owned_tok);
    free(ds);
}

const awl_tokenizer *awl_text_dataset_tokenizer(const awl_text_dataset *ds)
{
    return ds ? ds->tok : NULL;
}

static bool split_ok(awl_data_split split)
{
    return split == AWL_SPLIT_TRAIN || split == AWL_SPLIT_VAL;
}

const int32_t *awl_text_dataset_tokens(const awl_text_dataset *ds, awl_data_split split, size_t *n)
{
    if (n) *n = 0;
    if (!ds || !n || !split_ok(split)) return NULL;
    *n = split == AWL_SPLIT_TRAIN ? ds->n_train : ds->n_tokens - ds->n_train;
    return split == AWL_SPLIT_TRAIN ? ds->tokens : ds->tokens + ds->n_train;
}

int64_t awl_text_dataset_num_tokens(const awl_text_dataset *ds, awl_data_split split)
{
    size_t n;
    return awl_text_dataset_tokens(ds, split, &n) ? (int64_t)n : -1;
}

int awl_text_dataset_block(const awl_text_dataset *ds) { return ds ? ds->block : -1; }

void awl_text_dataset_seed(awl_text_dataset *ds, uint64_t seed)
{
    if (!ds) return;
    ds->seed = seed;
    ds->position[AWL_SPLIT_TRAIN] = 0;
    ds->position[AWL_SPLIT_VAL] = 0;
}

uint64_t awl_text_dataset_get_seed(const awl_text_dataset *ds) { return ds ? ds->seed : 0; }

uint64_t awl_text_dataset_get_position(const awl_text_dataset *ds, awl_data_split split)
{
    return ds && split_ok(split) ? ds->position[split] : 0;
}

int awl_text_dataset_set_position(awl_text_dataset *ds, awl_data_split split, uint64_t position)
{
    if (!ds) return AWL_ERR_INVALID;
    if (!split_ok(split))
        return awl_error(AWL_ERR_INVALID, "awl_text_dataset_set_position: bad split %d",
                         (int)split);
    ds->position[split] = position;
    return 0;
}

int awl_text_dataset_batch(awl_text_dataset *ds, awl_data_split split, int batch,
                           const char *device, awl_tensor **x, awl_tensor **y)
{
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (!ds) return AWL_ERR_INVALID;
    if (!split_ok(split))
        return awl_error(AWL_ERR_INVALID, "awl_text_dataset_batch: bad split %d", (int)split);
    int rc =
        awl_text_dataset_batch_at(ds, split, ds->seed, ds->position[split], batch, device, x, y);
    if (rc == 0) ds->position[split]++;
    return rc;
}

int awl_text_dataset_batch_at(const awl_text_dataset *ds, awl_data_split split, uint64_t seed,
                              uint64_t k, int batch, const char *device, awl_tensor **x,
                              awl_tensor **y)
{
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (!ds) return AWL_ERR_INVALID;
    if (!x || !y) return awl_error(AWL_ERR_INVALID, "awl_text_dataset_batch: NULL output");
    if (!split_ok(split))
        return awl_error(AWL_ERR_INVALID, "awl_text_dataset_batch: bad split %d", (int)split);
    if (batch < 1)
        return awl_error(AWL_ERR_INVALID,
                         "awl_text_dataset_batch: batch must be at least 1, got %d", batch);
    size_t n;
    const int32_t *tokens = awl_text_dataset_tokens(ds, split, &n);
    size_t block = (size_t)ds->block;
    if (n < block + 1)
        return awl_error(AWL_ERR_INVALID,
                         "awl_text_dataset_batch: the %s split is empty (train_fraction 1?)",
                         split_name(split));

    size_t count = (size_t)batch * block;
    int32_t *host =
        count <= SIZE_MAX / (2 * sizeof *host) ? malloc(2 * count * sizeof *host) : NULL;
    if (!host)
        return awl_error(AWL_ERR_OOM, "awl_text_dataset_batch: out of memory for (%d,%zu)", batch,
                         block);
    uint64_t n_starts = n - block;
    for (int b = 0; b < batch; b++) {
        awl_philox_block r = awl_philox4x32(seed, k << 32 | (uint32_t)b);
        int w = split == AWL_SPLIT_TRAIN ? 0 : 2;
        uint64_t start = ((uint64_t)r.w[w + 1] << 32 | r.w[w]) % n_starts;
        memcpy(host + (size_t)b * block, tokens + start, block * sizeof *host);
        memcpy(host + count + (size_t)b * block, tokens + start + 1, block * sizeof *host);
    }

    /* A private scope frees x if making y fails; on success both move out to
     * the caller's scope. */
    awl_scope_begin();
    awl_tensor *tx = awl_from_data(host, AWL_SHAPE(batch, (int64_t)block), AWL_I32, device);
    awl_tensor *ty = awl_from_data(host + count, AWL_SHAPE(batch, (int64_t)block), AWL_I32, device);
    bool ok = tx && ty;
    if (ok) {
        *x = awl_keep(tx);
        *y = awl_keep(ty);
    }
    awl_scope_end();
    free(host);
    if (!ok) return awl_last_error_code() < 0 ? awl_last_error_code() : AWL_ERR_INVALID;
    return 0;
}
