/*
 * data/tokenizer.c - the tokenizer object: the character tokenizer, the
 * operations both kinds share, and the serialised form.
 *
 * The character tokenizer follows nanoGPT's shakespeare_char: ids are the
 * ranks of the corpus's distinct bytes in sorted order, so two runs over the
 * same corpus agree, and the vocabulary is as small as the corpus allows (65
 * for tinyshakespeare, which keeps the embedding and the softmax cheap).
 * Bytes, not Unicode code points: a UTF-8 character outside ASCII becomes
 * several tokens, which keeps the tokenizer a 256-entry table.
 *
 * The serialised form lives in a checkpoint's JSON metadata, so it is plain
 * ASCII with nothing to escape: hex digits, '.', ',' and a kind prefix. Its
 * reader trusts nothing: a checkpoint may be truncated or edited by hand, and
 * a bad tokenizer must be rejected with a message, never crash or decode
 * garbage later.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_internal.h"

static const char HEX[] = "0123456789abcdef";

void awl_tokenizer_free(awl_tokenizer *tok)
{
    if (!tok) return;
    free(tok->offsets);
    free(tok->bytes);
    free(tok->merges);
    awl_pair_map_free(&tok->merge_rank);
    free(tok);
}

/* A character tokenizer over the bytes marked in present[]. */
static awl_tokenizer *char_from_set(const bool present[256], const char *op)
{
    awl_tokenizer *tok = calloc(1, sizeof *tok);
    if (tok) {
        tok->offsets = malloc(257 * sizeof *tok->offsets);
        tok->bytes = malloc(256);
    }
    if (!tok || !tok->offsets || !tok->bytes) {
        awl_tokenizer_free(tok);
        awl_error(AWL_ERR_OOM, "%s: out of memory", op);
        return NULL;
    }
    tok->kind = TOKENIZER_CHAR;
    tok->offsets[0] = 0;
    for (int c = 0; c < 256; c++) {
        tok->char_id[c] = -1;
        if (!present[c]) continue;
        tok->char_id[c] = (int16_t)tok->vocab_size;
        tok->bytes[tok->vocab_size] = (uint8_t)c;
        tok->vocab_size++;
        tok->offsets[tok->vocab_size] = (uint32_t)tok->vocab_size;
    }
    return tok;
}

awl_tokenizer *awl_tokenizer_char_from_text(const char *text, size_t len)
{
    if (!text || len == 0) {
        awl_error(AWL_ERR_INVALID, "awl_tokenizer_char_from_text: the text is empty");
        return NULL;
    }
    bool present[256] = {false};
    for (size_t i = 0; i < len; i++) present[(uint8_t)text[i]] = true;
    return char_from_set(present, "awl_tokenizer_char_from_text");
}

int awl_tokenizer_vocab_size(const awl_tokenizer *tok) { return tok ? tok->vocab_size : -1; }

const char *awl_tokenizer_kind(const awl_tokenizer *tok)
{
    if (!tok) return "";
    return tok->kind == TOKENIZER_CHAR ? "char" : "bpe";
}

/* ---- encode and decode --------------------------------------------------------- */

static int char_encode(const awl_tokenizer *tok, const uint8_t *text, size_t len, int32_t *out)
{
    for (size_t i = 0; i < len; i++) {
        int id = tok->char_id[text[i]];
        if (id < 0) {
            char shown[8] = "";
            if (text[i] >= 0x20 && text[i] < 0x7f) snprintf(shown, sizeof shown, " '%c'", text[i]);
            return awl_error(AWL_ERR_INVALID,
                             "awl_tokenizer_encode: byte 0x%02x%s at offset %zu is not in the "
                             "character vocabulary (%d characters)",
                             text[i], shown, i, tok->vocab_size);
        }
        out[i] = id;
    }
    return 0;
}

int awl_tokenizer_encode(const awl_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                         size_t *n)
{
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!tok) return AWL_ERR_INVALID;
    if (!ids || !n || (!text && len > 0))
        return awl_error(AWL_ERR_INVALID, "awl_tokenizer_encode: NULL text or output");
    if (tok->kind == TOKENIZER_BPE && len >= INT32_MAX)
        return awl_error(AWL_ERR_INVALID,
                         "awl_tokenizer_encode: %zu bytes is too long for BPE (at most 2 GiB "
                         "per call)",
                         len);
    int32_t *out = malloc((len ? len : 1) * sizeof *out);
    if (!out) return awl_error(AWL_ERR_OOM, "awl_tokenizer_encode: out of memory for %zu ids", len);
    size_t count = len;
    int rc = tok->kind == TOKENIZER_CHAR
                 ? char_encode(tok, (const uint8_t *)text, len, out)
                 : awl_bpe_encode(tok, (const uint8_t *)text, len, out, &count);
    if (rc != 0) {
        free(out);
        return rc;
    }
    int32_t *shrunk = count < len ? realloc(out, (count ? count : 1) * sizeof *out) : NULL;
    *ids = shrunk ? shrunk : out;
    *n = count;
    return 0;
}

int awl_tokenizer_decode(const awl_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                         size_t *len)
{
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!tok) return AWL_ERR_INVALID;
    if (!text || !len || (!ids && n > 0))
        return awl_error(AWL_ERR_INVALID, "awl_tokenizer_decode: NULL ids or output");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->vocab_size)
            return awl_error(AWL_ERR_INVALID,
                             "awl_tokenizer_decode: id %d at index %zu is outside the "
                             "vocabulary (0..%d)",
                             ids[i], i, tok->vocab_size - 1);
        total += tok->offsets[ids[i] + 1] - tok->offsets[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out)
        return awl_error(AWL_ERR_OOM, "awl_tokenizer_decode: out of memory for %zu bytes", total);
    char *dst = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t start = tok->offsets[ids[i]], end = tok->offsets[ids[i] + 1];
        memcpy(dst, tok->bytes + start, end - start);
        dst += end - start;
    }
    *dst = '\0';
    *text = out;
    *len = total;
    return 0;
}

/* ---- serialisation ---------------------------------------------------------------- */

/* Appends id in lowercase hex without leading zeros; returns the new end. */
static char *put_hex(char *dst, uint32_t id)
{
    char digits[8];
    int n = 0;
    do {
        digits[n++] = HEX[id & 15];
        id >>= 4;
    } while (id);
    while (n > 0) *dst++ = digits[--n];
    return dst;
}

int awl_tokenizer_serialize(const awl_tokenizer *tok, char **buf, size_t *len)
{
    if (buf) *buf = NULL;
    if (len) *len = 0;
    if (!tok) return AWL_ERR_INVALID;
    if (!buf || !len) return awl_error(AWL_ERR_INVALID, "awl_tokenizer_serialize: NULL output");
    /* Upper bound: "char:" + 2 per byte, or "bpe:" + 8 + '.' + 8 + ',' per merge. */
    size_t cap = tok->kind == TOKENIZER_CHAR ? 5 + 2 * (size_t)tok->vocab_size + 1
                                             : 4 + 18 * (size_t)tok->n_merges + 1;
    char *out = malloc(cap);
    if (!out) return awl_error(AWL_ERR_OOM, "awl_tokenizer_serialize: out of memory");
    char *dst = out;
    if (tok->kind == TOKENIZER_CHAR) {
        memcpy(dst, "char:", 5);
        dst += 5;
        for (int t = 0; t < tok->vocab_size; t++) {
            *dst++ = HEX[tok->bytes[t] >> 4];
            *dst++ = HEX[tok->bytes[t] & 15];
        }
    } else {
        memcpy(dst, "bpe:", 4);
        dst += 4;
        for (int r = 0; r < tok->n_merges; r++) {
            if (r > 0) *dst++ = ',';
            dst = put_hex(dst, (uint32_t)tok->merges[2 * r]);
            *dst++ = '.';
            dst = put_hex(dst, (uint32_t)tok->merges[2 * r + 1]);
        }
    }
    *dst = '\0';
    *buf = out;
    *len = (size_t)(dst - out);
    return 0;
}

static const char *const DESER = "awl_tokenizer_deserialize";

static int hex_value(char c)
{
    const char *p = c ? strchr(HEX, c) : NULL;
    return p ? (int)(p - HEX) : -1;
}

static awl_tokenizer *char_deserialize(const char *s, size_t len)
{
    if (len == 0 || len % 2 != 0) {
        awl_error(AWL_ERR_FORMAT,
                  "%s: \"char:\" needs a non-empty, even number of hex digits, got %zu", DESER,
                  len);
        return NULL;
    }
    bool present[256] = {false};
    int last = -1;
    for (size_t i = 0; i < len; i += 2) {
        int hi = hex_value(s[i]), lo = hex_value(s[i + 1]);
        if (hi < 0 || lo < 0) {
            awl_error(AWL_ERR_FORMAT, "%s: bad hex digit at offset %zu", DESER,
                      5 + i + (hi < 0 ? 0 : 1));
            return NULL;
        }
        int c = hi * 16 + lo;
        if (c <= last) {
            awl_error(AWL_ERR_FORMAT, "%s: byte 0x%02x at offset %zu is not above the one before",
                      DESER, c, 5 + i);
            return NULL;
        }
        present[c] = true;
        last = c;
    }
    return char_from_set(present, DESER);
}

/* Reads one id (1 to 8 lowercase hex digits, no leading zero) at s[*pos],
 * which must be below `limit`. */
static int parse_id(const char *s, size_t len, size_t *pos, int64_t limit, int32_t *id)
{
    size_t start = *pos;
    int64_t v = 0;
    while (*pos < len && hex_value(s[*pos]) >= 0 && *pos - start < 8)
        v = v * 16 + hex_value(s[(*pos)++]);
    if (*pos == start)
        return awl_error(AWL_ERR_FORMAT, "%s: expected a hex id at offset %zu", DESER, 4 + start);
    if (*pos - start > 1 && s[start] == '0')
        return awl_error(AWL_ERR_FORMAT, "%s: id with a leading zero at offset %zu", DESER,
                         4 + start);
    if (v >= limit)
        return awl_error(AWL_ERR_FORMAT,
                         "%s: id 0x%llx at offset %zu names a token not yet defined (%lld so far)",
                         DESER, (unsigned long long)v, 4 + start, (long long)limit);
    *id = (int32_t)v;
    return 0;
}

static awl_tokenizer *bpe_deserialize(const char *s, size_t len)
{
    /* Each merge takes at least 4 characters ("0.0,"). */
    size_t max_merges = (len + 1) / 4;
    int32_t *merges = malloc((2 * max_merges + 1) * sizeof *merges);
    awl_pair_map seen = {0};
    awl_tokenizer *tok = NULL;
    if (!merges) {
        awl_error(AWL_ERR_OOM, "%s: out of memory", DESER);
        return NULL;
    }
    if (awl_pair_map_init(&seen, max_merges, DESER) != 0) goto done;
    int n = 0;
    for (size_t pos = 0; pos < len; n++) {
        if (n > 0) {
            if (s[pos] != ',') {
                awl_error(AWL_ERR_FORMAT, "%s: expected ',' at offset %zu", DESER, 4 + pos);
                goto done;
            }
            pos++;
        }
        int32_t *m = merges + 2 * n;
        if (parse_id(s, len, &pos, 256 + n, &m[0]) != 0) goto done;
        if (pos >= len || s[pos] != '.') {
            awl_error(AWL_ERR_FORMAT, "%s: expected '.' at offset %zu", DESER, 4 + pos);
            goto done;
        }
        pos++;
        if (parse_id(s, len, &pos, 256 + n, &m[1]) != 0) goto done;
        int32_t earlier = awl_pair_map_get(&seen, m[0], m[1]);
        if (earlier >= 0) {
            awl_error(AWL_ERR_FORMAT, "%s: merge %d (%x.%x) repeats merge %d", DESER, n,
                      (unsigned)m[0], (unsigned)m[1], earlier);
            goto done;
        }
        if (awl_pair_map_put(&seen, m[0], m[1], n, DESER) != 0) goto done;
    }
    tok = awl_bpe_from_merges(merges, n, DESER);
done:
    awl_pair_map_free(&seen);
    free(merges);
    return tok;
}

awl_tokenizer *awl_tokenizer_deserialize(const char *buf, size_t len)
{
    if (!buf) {
        awl_error(AWL_ERR_FORMAT, "%s: no tokenizer string", DESER);
        return NULL;
    }
    if (len >= 5 && memcmp(buf, "char:", 5) == 0) return char_deserialize(buf + 5, len - 5);
    if (len >= 4 && memcmp(buf, "bpe:", 4) == 0) return bpe_deserialize(buf + 4, len - 4);
    awl_error(AWL_ERR_FORMAT, "%s: unknown kind, expected \"char:\" or \"bpe:\" at the start",
              DESER);
    return NULL;
}
