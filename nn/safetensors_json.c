/*
 * nn/safetensors_json.c - the strict JSON parser for safetensors headers,
 * and the small helpers that write them.
 *
 * A safetensors header is a fixed, shallow schema, so the parser is
 * schema-directed rather than general: it reads the top-level object member
 * by member and parses each value as what it must be (a tensor entry or the
 * metadata object). That keeps it short, needs no tree or recursion, and
 * lets each error say what was expected where ("at byte 57 of the header:
 * data_offsets must hold 2 integers"). Everything a general parser would
 * accept but the schema does not (floats, negative or huge integers,
 * unknown fields, nested values, duplicate keys) is rejected: a checkpoint
 * that is not exactly what a writer produces is corrupt.
 *
 * Strings are checked as JSON requires (escapes, no raw control
 * characters, well-formed UTF-8, \u escapes including surrogate pairs) and
 * must not contain NUL, which C strings cannot hold.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "nn/safetensors_internal.h"
#include "common/alloc.h"

/* ---- UTF-8 and dtypes -------------------------------------------------------------- */

bool awl_st_utf8_valid(const char *s, size_t n) { return awl_utf8_first_invalid(s, n) == n; }

int awl_st_dtype_parse(const char *name, awl_dtype *out)
{
    for (int d = 0; d < AWL_DTYPE_COUNT; d++) {
        if (strcmp(name, awl_safetensors_dtype_name((awl_dtype)d)) == 0) {
            *out = (awl_dtype)d;
            return AWL_OK;
        }
    }
    return AWL_ERR_FORMAT;
}

/* ---- the parser ----------------------------------------------------------------------- */

typedef struct parser {
    const char *s;
    size_t len, pos;
    char *err;
    size_t err_size;
} parser;

static int fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(parser *p, const char *fmt, ...)
{
    int n = snprintf(p->err, p->err_size, "at byte %zu of the header: ", p->pos);
    if (n >= 0 && (size_t)n < p->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->err_size - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return AWL_ERR_FORMAT;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* Skips whitespace and consumes c, or fails naming what was expected. */
static int expect(parser *p, char c, const char *what)
{
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end, expected %s", what);
    if (p->s[p->pos] != c) return fail(p, "expected %s", what);
    p->pos++;
    return AWL_OK;
}

/* Consumes c when it is next (after whitespace); says whether it was. */
static bool accept(parser *p, char c)
{
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == c) {
        p->pos++;
        return true;
    }
    return false;
}

static int hex4(parser *p, unsigned *out)
{
    if (p->len - p->pos < 4) return fail(p, "truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->pos + (size_t)k];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return fail(p, "bad hex digit in \\u escape");
        v = v * 16 + d;
    }
    p->pos += 4;
    *out = v;
    return AWL_OK;
}

/* Appends code point cp (valid, not a surrogate, not 0) as UTF-8. */
static void put_utf8(awl_st_buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    awl_st_buf_append(b, u, n);
}

/* The code point of a \u escape (the "\u" already consumed), joining a
 * surrogate pair. */
static int unicode_escape(parser *p, unsigned *cp)
{
    unsigned hi;
    if (hex4(p, &hi) < 0) return AWL_ERR_FORMAT;
    if (hi >= 0xDC00 && hi <= 0xDFFF) return fail(p, "lone low surrogate in \\u escape");
    if (hi >= 0xD800 && hi <= 0xDBFF) {
        unsigned lo;
        if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return fail(p, "high surrogate without its low half");
        p->pos += 2;
        if (hex4(p, &lo) < 0) return AWL_ERR_FORMAT;
        if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "high surrogate without its low half");
        hi = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (hi == 0) return fail(p, "string contains NUL (\\u0000)");
    *cp = hi;
    return AWL_OK;
}

/* A JSON string, decoded into a malloc'd C string. */
static int parse_string(parser *p, char **out)
{
    *out = NULL;
    if (expect(p, '"', "a string") < 0) return AWL_ERR_FORMAT;
    awl_st_buf b = {0};
    while (true) {
        if (p->pos >= p->len) {
            awl_st_buf_free(&b);
            return fail(p, "unterminated string");
        }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            awl_st_buf_free(&b);
            return fail(p, "raw control character 0x%02x in a string", c);
        }
        if (c == '\\') {
            p->pos++;
            char e = p->pos < p->len ? p->s[p->pos++] : '\0';
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *hit = e ? strchr(from, e) : NULL;
            if (hit) {
                awl_st_buf_append(&b, to + (hit - from), 1);
            } else if (e == 'u') {
                unsigned cp = 0;
                if (unicode_escape(p, &cp) < 0) {
                    awl_st_buf_free(&b);
                    return AWL_ERR_FORMAT;
                }
                put_utf8(&b, cp);
            } else {
                awl_st_buf_free(&b);
                return fail(p, "invalid escape in a string");
            }
            continue;
        }
        size_t n = awl_utf8_sequence((const unsigned char *)p->s + p->pos, p->len - p->pos);
        if (!n) {
            awl_st_buf_free(&b);
            return fail(p, "invalid UTF-8 in a string");
        }
        awl_st_buf_append(&b, p->s + p->pos, n);
        p->pos += n;
    }
    awl_st_buf_append(&b, "", 1); /* the terminator; len counts it */
    *out = b.data;
    return AWL_OK;
}

/* A JSON number that must be an integer in [0, INT64_MAX]. */
static int parse_uint(parser *p, uint64_t *out)
{
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end, expected an integer");
    if (p->s[p->pos] == '-') return fail(p, "negative integer");
    if (p->s[p->pos] < '0' || p->s[p->pos] > '9') return fail(p, "expected an integer");
    if (p->s[p->pos] == '0' && p->pos + 1 < p->len && p->s[p->pos + 1] >= '0' &&
        p->s[p->pos + 1] <= '9')
        return fail(p, "integer with a leading zero");
    uint64_t v = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return fail(p, "integer too large");
        v = v * 10 + d;
        p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
        return fail(p, "expected an integer, found a fraction or exponent");
    *out = v;
    return AWL_OK;
}

/* [i0, i1, ...] with at most max entries. */
static int parse_uint_array(parser *p, const char *field, uint64_t *vals, int max, int *count)
{
    *count = 0;
    if (expect(p, '[', "'[' opening an array") < 0) return AWL_ERR_FORMAT;
    if (accept(p, ']')) return AWL_OK;
    do {
        if (*count == max) return fail(p, "%s has more than %d entries", field, max);
        if (parse_uint(p, &vals[(*count)++]) < 0) return AWL_ERR_FORMAT;
    } while (accept(p, ','));
    return expect(p, ']', "',' or ']' in an array");
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} in any order. */
static int parse_tensor(parser *p, awl_st_tensor *t)
{
    bool seen[3] = {false, false, false};
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    if (expect(p, '{', "'{' opening a tensor entry") < 0) return AWL_ERR_FORMAT;
    do {
        char *key;
        if (parse_string(p, &key) < 0) return AWL_ERR_FORMAT;
        int f = 0;
        while (f < 3 && strcmp(key, fields[f]) != 0) f++;
        if (f == 3) {
            fail(p, "unknown field \"%.40s\" in tensor \"%.200s\"", key, t->name);
            free(key);
            return AWL_ERR_FORMAT;
        }
        free(key);
        if (seen[f]) return fail(p, "field %s repeated in tensor \"%.200s\"", fields[f], t->name);
        seen[f] = true;
        if (expect(p, ':', "':' after a key") < 0) return AWL_ERR_FORMAT;
        if (f == 0) {
            char *dtype;
            if (parse_string(p, &dtype) < 0) return AWL_ERR_FORMAT;
            /* float16 is no awl dtype: such a tensor loads as float32 */
            t->float16 = strcmp(dtype, "F16") == 0;
            if (t->float16) t->dtype = AWL_F32;
            int status = t->float16 ? AWL_OK : awl_st_dtype_parse(dtype, &t->dtype);
            if (status < 0)
                fail(p, "unsupported dtype \"%.20s\" of tensor \"%.200s\"", dtype, t->name);
            free(dtype);
            if (status < 0) return AWL_ERR_FORMAT;
        } else if (f == 1) {
            uint64_t dims[AWL_MAX_DIMS];
            if (parse_uint_array(p, "shape", dims, AWL_MAX_DIMS, &t->ndim) < 0)
                return AWL_ERR_FORMAT;
            for (int d = 0; d < t->ndim; d++) t->shape[d] = (int64_t)dims[d];
        } else {
            uint64_t offs[2];
            int n;
            if (parse_uint_array(p, "data_offsets", offs, 2, &n) < 0) return AWL_ERR_FORMAT;
            if (n != 2) return fail(p, "data_offsets must hold 2 integers");
            t->begin = offs[0];
            t->end = offs[1];
        }
    } while (accept(p, ','));
    if (expect(p, '}', "',' or '}' in a tensor entry") < 0) return AWL_ERR_FORMAT;
    for (int f = 0; f < 3; f++)
        if (!seen[f]) return fail(p, "tensor \"%.200s\" has no %s", t->name, fields[f]);
    return AWL_OK;
}

static int parse_metadata(parser *p, awl_st_header *h)
{
    if (expect(p, '{', "'{' opening __metadata__") < 0) return AWL_ERR_FORMAT;
    if (accept(p, '}')) return AWL_OK;
    do {
        char *key, *value;
        if (parse_string(p, &key) < 0) return AWL_ERR_FORMAT;
        if (expect(p, ':', "':' after a key") < 0 || parse_string(p, &value) < 0) {
            free(key);
            return AWL_ERR_FORMAT;
        }
        if (h->n_meta == h->cap_meta) {
            h->cap_meta = h->cap_meta ? 2 * h->cap_meta : 16;
            h->keys = awl_xrealloc(h->keys, (size_t)h->cap_meta * sizeof *h->keys);
            h->values = awl_xrealloc(h->values, (size_t)h->cap_meta * sizeof *h->values);
        }
        h->keys[h->n_meta] = key;
        h->values[h->n_meta++] = value;
    } while (accept(p, ','));
    return expect(p, '}', "',' or '}' in __metadata__");
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The first string that occurs twice in strs[0..n), or NULL (n log n, so a
 * hostile header of a million entries costs no more than reading it). */
static const char *find_duplicate(char *const *strs, int n)
{
    if (n < 2) return NULL;
    char **sorted = awl_xmalloc((size_t)n * sizeof *sorted);
    memcpy(sorted, strs, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_strings);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) dup = sorted[i];
    free(sorted);
    return dup;
}

static int check_duplicates(parser *p, const awl_st_header *h)
{
    char **names = awl_xmalloc(((size_t)h->n_tensors + 1) * sizeof *names);
    for (int i = 0; i < h->n_tensors; i++) names[i] = h->tensors[i].name;
    const char *dup = find_duplicate(names, h->n_tensors);
    int status = dup ? fail(p, "tensor \"%.200s\" appears twice", dup) : AWL_OK;
    free(names);
    if (status < 0) return status;
    dup = find_duplicate(h->keys, h->n_meta);
    return dup ? fail(p, "metadata key \"%.200s\" appears twice", dup) : AWL_OK;
}

static int parse_members(parser *p, awl_st_header *h)
{
    if (expect(p, '{', "'{' opening the header") < 0) return AWL_ERR_FORMAT;
    bool seen_metadata = false;
    if (!accept(p, '}')) {
        do {
            char *name;
            if (parse_string(p, &name) < 0) return AWL_ERR_FORMAT;
            if (expect(p, ':', "':' after a key") < 0) {
                free(name);
                return AWL_ERR_FORMAT;
            }
            if (strcmp(name, "__metadata__") == 0) {
                free(name);
                if (seen_metadata) return fail(p, "__metadata__ appears twice");
                seen_metadata = true;
                if (parse_metadata(p, h) < 0) return AWL_ERR_FORMAT;
                continue;
            }
            if (h->n_tensors == h->cap_tensors) {
                h->cap_tensors = h->cap_tensors ? 2 * h->cap_tensors : 16;
                h->tensors = awl_xrealloc(h->tensors, (size_t)h->cap_tensors * sizeof *h->tensors);
            }
            awl_st_tensor *t = &h->tensors[h->n_tensors++];
            memset(t, 0, sizeof *t);
            t->name = name;
            if (parse_tensor(p, t) < 0) return AWL_ERR_FORMAT;
        } while (accept(p, ','));
        if (expect(p, '}', "',' or '}' in the header") < 0) return AWL_ERR_FORMAT;
    }
    skip_ws(p);
    if (p->pos != p->len) return fail(p, "unexpected bytes after the header object");
    return check_duplicates(p, h);
}

int awl_st_header_parse(const char *json, size_t len, awl_st_header *out, char *err,
                        size_t err_size)
{
    memset(out, 0, sizeof *out);
    parser p = {json, len, 0, err, err_size};
    int status = parse_members(&p, out);
    if (status < 0) awl_st_header_clear(out);
    return status;
}

void awl_st_header_clear(awl_st_header *h)
{
    for (int i = 0; i < h->n_tensors; i++) free(h->tensors[i].name);
    for (int i = 0; i < h->n_meta; i++) {
        free(h->keys[i]);
        free(h->values[i]);
    }
    free(h->tensors);
    free(h->keys);
    free(h->values);
    memset(h, 0, sizeof *h);
}

/* ---- writing ---------------------------------------------------------------------------- */

void awl_st_buf_append(awl_st_buf *b, const char *s, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->data = awl_xrealloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

void awl_st_buf_printf(awl_st_buf *b, const char *fmt, ...)
{
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        awl_st_buf_append(b, small, (size_t)n);
        return;
    }
    char *big = awl_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    awl_st_buf_append(b, big, (size_t)n);
    free(big);
}

void awl_st_buf_string(awl_st_buf *b, const char *s)
{
    awl_st_buf_append(b, "\"", 1);
    for (const char *c = s; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u == '"' || u == '\\') {
            char esc[2] = {'\\', (char)u};
            awl_st_buf_append(b, esc, 2);
        } else if (u < 0x20) {
            awl_st_buf_printf(b, "\\u%04x", u);
        } else {
            awl_st_buf_append(b, c, 1);
        }
    }
    awl_st_buf_append(b, "\"", 1);
}

void awl_st_buf_free(awl_st_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
