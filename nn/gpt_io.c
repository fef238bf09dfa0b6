/*
 * nn/gpt_io.c - a GPT's configuration as JSON, and weights from other tools
 * (see gpt.h).
 *
 * The configuration travels in a checkpoint's "config" metadata, which a
 * trainer reads before it builds the model, so the parser is as strict as
 * the safetensors header's: one flat object of known keys, each at most
 * once, integers as plain digits in range, and nothing else. A checkpoint
 * edited by hand or cut short is refused with the byte offset and the key.
 *
 * Weights from PyTorch. A nanoGPT model's state_dict uses the same names as
 * awl's parameters, with three differences handled here: the tied head
 * appears a second time as "lm_head.weight" (or only under that name, when
 * safetensors' save_model dropped the other alias), older nanoGPT versions
 * keep the causal mask as a buffer "transformer.h.<i>.attn.bias", and
 * torch.compile prefixes every name with "_orig_mod.". float16, bfloat16
 * and float64 weights are converted to the parameters' dtype.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "nn/gpt.h"

/* ---- the configuration as JSON --------------------------------------------------- */

int awl_gpt_config_to_json(const awl_gpt_config *c, char *buf, size_t size)
{
    if (!c || !buf) return AWL_ERR_INVALID;
    int n = snprintf(buf, size,
                     "{\"vocab\":%d,\"block\":%d,\"n_layer\":%d,\"n_head\":%d,\"n_embd\":%d,"
                     "\"batch\":%d,\"dropout\":%.17g,\"bias\":%s}",
                     c->vocab, c->block, c->n_layer, c->n_head, c->n_embd, c->batch, c->dropout,
                     c->bias ? "true" : "false");
    if (n < 0 || (size_t)n >= size)
        return awl_error(AWL_ERR_INVALID,
                         "awl_gpt_config_to_json: a buffer of %zu bytes is too small", size);
    return AWL_OK;
}

static const char *const FROM_JSON = "awl_gpt_config_from_json";

typedef struct cursor {
    const char *s;
    size_t pos;
} cursor;

static int json_error(const cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int json_error(const cursor *c, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return awl_error(AWL_ERR_FORMAT, "%s: at byte %zu: %s", FROM_JSON, c->pos, what);
}

static void skip_space(cursor *c)
{
    while (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' || c->s[c->pos] == '\n' ||
           c->s[c->pos] == '\r')
        c->pos++;
}

static bool accept(cursor *c, char ch)
{
    skip_space(c);
    if (c->s[c->pos] != ch) return false;
    c->pos++;
    return true;
}

/* A key: a plain string of letters, digits and '_' (all the schema has). */
static int read_key(cursor *c, char *key, size_t size)
{
    if (!accept(c, '"')) return json_error(c, "expected a key");
    size_t n = 0;
    char ch;
    while ((ch = c->s[c->pos]) && ch != '"') {
        bool plain = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
        if (!plain || n + 1 >= size) return json_error(c, "unknown key");
        key[n++] = ch;
        c->pos++;
    }
    if (!ch) return json_error(c, "unexpected end in a key");
    key[n] = '\0';
    c->pos++;
    return AWL_OK;
}

/* A JSON number's text at the cursor: its length, 0 when there is none. */
static size_t number_length(const char *s, bool *integer)
{
    size_t i = 0;
    *integer = true;
    if (s[i] == '-') i++;
    if (s[i] == '0')
        i++;
    else if (s[i] >= '1' && s[i] <= '9')
        while (s[i] >= '0' && s[i] <= '9') i++;
    else
        return 0;
    if (s[i] == '.') {
        *integer = false;
        if (!(s[++i] >= '0' && s[i] <= '9')) return 0;
        while (s[i] >= '0' && s[i] <= '9') i++;
    }
    if (s[i] == 'e' || s[i] == 'E') {
        *integer = false;
        i++;
        if (s[i] == '+' || s[i] == '-') i++;
        if (!(s[i] >= '0' && s[i] <= '9')) return 0;
        while (s[i] >= '0' && s[i] <= '9') i++;
    }
    return i;
}

static int read_number(cursor *c, const char *key, double *out, bool *integer)
{
    skip_space(c);
    size_t n = number_length(c->s + c->pos, integer);
    if (n == 0 || n > 64) return json_error(c, "%s must be a number", key);
    char text[65];
    memcpy(text, c->s + c->pos, n);
    text[n] = '\0';
    *out = strtod(text, NULL);
    if (!isfinite(*out)) return json_error(c, "%s = %s is out of range", key, text);
    c->pos += n;
    return AWL_OK;
}

static int read_int(cursor *c, const char *key, int min, int *out)
{
    double v;
    bool integer;
    size_t at = c->pos;
    if (read_number(c, key, &v, &integer) < 0) return AWL_ERR_FORMAT;
    if (!integer || v < min || v > 2147483647.0) {
        c->pos = at;
        return json_error(c, "%s must be an integer in [%d, 2147483647]", key, min);
    }
    *out = (int)v;
    return AWL_OK;
}

static int read_bool(cursor *c, const char *key, bool *out)
{
    skip_space(c);
    if (strncmp(c->s + c->pos, "true", 4) == 0) {
        *out = true;
        c->pos += 4;
    } else if (strncmp(c->s + c->pos, "false", 5) == 0) {
        *out = false;
        c->pos += 5;
    } else {
        return json_error(c, "%s must be true or false", key);
    }
    return AWL_OK;
}

int awl_gpt_config_from_json(const char *json, awl_gpt_config *out)
{
    if (!json || !out) return awl_error(AWL_ERR_INVALID, "%s: NULL argument", FROM_JSON);
    static const char *const keys[] = {"vocab",  "block", "n_layer", "n_head",
                                       "n_embd", "batch", "dropout", "bias"};
    enum { N_KEYS = 8, N_REQUIRED = 5 };
    awl_gpt_config c = {.batch = 1, .dropout = 0.0, .bias = true};
    int *ints[] = {&c.vocab, &c.block, &c.n_layer, &c.n_head, &c.n_embd, &c.batch};
    bool seen[N_KEYS] = {false};
    cursor cur = {json, 0};
    if (!accept(&cur, '{')) return json_error(&cur, "expected '{'");
    if (!accept(&cur, '}')) {
        do {
            char key[16];
            if (read_key(&cur, key, sizeof key) < 0) return AWL_ERR_FORMAT;
            int k = 0;
            while (k < N_KEYS && strcmp(keys[k], key) != 0) k++;
            if (k == N_KEYS) return json_error(&cur, "unknown key \"%s\"", key);
            if (seen[k]) return json_error(&cur, "key \"%s\" given twice", key);
            seen[k] = true;
            if (!accept(&cur, ':')) return json_error(&cur, "expected ':' after \"%s\"", key);
            int status;
            if (k < 6) {
                status = read_int(&cur, key, 1, ints[k]);
            } else if (k == 6) {
                bool integer;
                size_t at = cur.pos;
                status = read_number(&cur, key, &c.dropout, &integer);
                if (status == AWL_OK && !(c.dropout >= 0 && c.dropout < 1)) {
                    cur.pos = at;
                    status = json_error(&cur, "dropout must be in [0, 1)");
                }
            } else {
                status = read_bool(&cur, key, &c.bias);
            }
            if (status < 0) return status;
        } while (accept(&cur, ','));
        if (!accept(&cur, '}')) return json_error(&cur, "expected ',' or '}'");
    }
    skip_space(&cur);
    if (json[cur.pos]) return json_error(&cur, "unexpected text after the object");
    for (int k = 0; k < N_REQUIRED; k++)
        if (!seen[k]) return json_error(&cur, "key \"%s\" is missing", keys[k]);
    if (c.n_embd % c.n_head != 0)
        return json_error(&cur, "n_embd %d is not a multiple of n_head %d", c.n_embd, c.n_head);
    *out = c;
    return AWL_OK;
}

/* ---- weights from other tools ------------------------------------------------------- */

static const char *const FROM_WEIGHTS = "awl_gpt_config_from_weights";
static const char *const LOAD = "awl_gpt_load_weights";
#define COMPILED_PREFIX "_orig_mod."
#define HEAD "lm_head.weight"
#define WTE "transformer.wte.weight"

/* The index of `name` in f, also under torch.compile's prefix; -1. */
static int find_weight(const awl_safetensors *f, const char *name)
{
    int i = awl_safetensors_find(f, name);
    if (i >= 0) return i;
    char prefixed[256];
    snprintf(prefixed, sizeof prefixed, COMPILED_PREFIX "%s", name);
    return awl_safetensors_find(f, prefixed);
}

/* The token embedding: wte, or the tied head when only it was kept. */
static int find_embedding(const awl_safetensors *f)
{
    int i = find_weight(f, WTE);
    return i >= 0 ? i : find_weight(f, HEAD);
}

static bool is_float(const awl_safetensors_info *info)
{
    return info->dtype == AWL_F32 || info->dtype == AWL_F64 || info->dtype == AWL_BF16;
}

int awl_gpt_config_from_weights(const awl_safetensors *f, awl_gpt_config *cfg)
{
    if (!f || !cfg) return awl_error(AWL_ERR_INVALID, "%s: NULL argument", FROM_WEIGHTS);
    const char *path = awl_safetensors_path(f);
    awl_safetensors_info wte, wpe;
    int i_wte = find_embedding(f), i_wpe = find_weight(f, "transformer.wpe.weight");
    if (i_wte < 0 || i_wpe < 0)
        return awl_error(AWL_ERR_FORMAT,
                         "%s: %s holds no GPT weights with nanoGPT's names (" WTE
                         " and transformer.wpe.weight)",
                         FROM_WEIGHTS, path);
    awl_safetensors_info_at(f, i_wte, &wte);
    awl_safetensors_info_at(f, i_wpe, &wpe);
    if (wte.ndim != 2 || wpe.ndim != 2 || wte.shape[1] != wpe.shape[1] || wte.shape[0] < 1 ||
        wpe.shape[0] < 1 || wte.shape[1] < 1 || wte.shape[0] > INT32_MAX ||
        wpe.shape[0] > INT32_MAX || wte.shape[1] > INT32_MAX)
        return awl_error(AWL_ERR_FORMAT,
                         "%s: %s: the embeddings %s and %s do not have the shapes (vocab, n_embd) "
                         "and (block, n_embd)",
                         FROM_WEIGHTS, path, wte.name, wpe.name);
    awl_gpt_config c = *cfg;
    const char *saved = awl_safetensors_metadata_get(f, "config");
    awl_gpt_config from_file;
    if (saved && awl_gpt_config_from_json(saved, &from_file) == AWL_OK) {
        c.n_head = from_file.n_head;
    }
    c.vocab = (int)wte.shape[0];
    c.n_embd = (int)wte.shape[1];
    c.block = (int)wpe.shape[0];
    c.n_layer = 0;
    for (;;) {
        char name[64];
        snprintf(name, sizeof name, "transformer.h.%d.ln_1.weight", c.n_layer);
        if (find_weight(f, name) < 0) break;
        c.n_layer++;
    }
    c.bias = find_weight(f, "transformer.ln_f.bias") >= 0;
    if (c.n_layer == 0)
        return awl_error(AWL_ERR_FORMAT, "%s: %s holds no transformer.h.0 block", FROM_WEIGHTS,
                         path);
    if (c.n_head < 1 || c.n_embd % c.n_head != 0)
        return awl_error(AWL_ERR_INVALID, "%s: %s: n_embd %d is not a multiple of n_head %d",
                         FROM_WEIGHTS, path, c.n_embd, c.n_head);
    *cfg = c;
    return AWL_OK;
}

/* Whether a file entry is a buffer nanoGPT or Hugging Face keep beside the
 * weights (the causal mask), which awl computes instead. */
static bool is_mask_buffer(const char *name)
{
    size_t n = strlen(name);
    return (n > 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n > 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

/* Tensor i of f as float64 on the host (malloc'd), or NULL. */
static double *host_values(const awl_safetensors *f, int i, int64_t *n)
{
    awl_scope_begin();
    awl_tensor *t = awl_tensor_cast(awl_safetensors_load(f, i, "cpu"), AWL_F64);
    double *v = NULL;
    *n = t ? awl_numel(t) : 0;
    if (t) {
        v = awl_xmalloc(((size_t)*n + 1) * sizeof *v);
        if (awl_to_host(t, v, (size_t)*n * sizeof *v) < 0) {
            free(v);
            v = NULL;
        }
    }
    awl_scope_end();
    return v;
}

/* A separate lm_head.weight must equal the embedding: awl's head is tied. */
static int check_tied_head(const awl_safetensors *f, int i_wte, int i_head)
{
    int64_t n1, n2;
    double *a = host_values(f, i_wte, &n1), *b = host_values(f, i_head, &n2);
    bool same = a && b && n1 == n2;
    for (int64_t k = 0; same && k < n1; k++) same = a[k] == b[k];
    free(a);
    free(b);
    if (!same)
        return awl_error(AWL_ERR_FORMAT,
                         "%s: %s: " HEAD " differs from " WTE ": awl's GPT ties the head to the "
                         "token embedding, so it cannot hold an untied model",
                         LOAD, awl_safetensors_path(f));
    return AWL_OK;
}

/* Phase one of the load: every parameter's source entry, checked. */
static int plan_weights(awl_gpt *model, const awl_safetensors *f, int *src, bool *used)
{
    const char *path = awl_safetensors_path(f);
    const awl_param_list *params = awl_gpt_parameters(model);
    for (int p = 0; p < params->count; p++) {
        const char *name = params->items[p].name;
        awl_tensor *dst = params->items[p].tensor;
        int i = strcmp(name, WTE) == 0 ? find_embedding(f) : find_weight(f, name);
        if (i < 0) return awl_error(AWL_ERR_FORMAT, "%s: %s: missing tensor %s", LOAD, path, name);
        awl_safetensors_info info;
        awl_safetensors_info_at(f, i, &info);
        bool same = info.ndim == dst->ndim;
        for (int d = 0; same && d < info.ndim; d++) same = info.shape[d] == dst->shape[d];
        if (!same || !is_float(&info)) {
            char s1[128], s2[128];
            awl_format_shape(info.ndim, info.shape, s1, sizeof s1);
            return awl_error(AWL_ERR_FORMAT,
                             "%s: %s: tensor %s is %s %s in the file but %s %s in the model", LOAD,
                             path, info.name, info.float16 ? "float16" : awl_dtype_name(info.dtype),
                             s1, awl_dtype_name(dst->dtype), awl_shape_str(dst, s2, sizeof s2));
        }
        src[p] = i;
        used[i] = true;
    }
    int i_wte = find_weight(f, WTE), i_head = find_weight(f, HEAD);
    if (i_wte >= 0 && i_head >= 0) {
        if (check_tied_head(f, i_wte, i_head) < 0) return AWL_ERR_FORMAT;
        used[i_head] = true;
    }
    bool ours = awl_safetensors_metadata_get(f, "awl.format") != NULL;
    for (int i = 0; i < awl_safetensors_count(f); i++) {
        awl_safetensors_info info;
        awl_safetensors_info_at(f, i, &info);
        bool optimizer = ours && strncmp(info.name, "optimizer.", 10) == 0;
        if (!used[i] && !optimizer && !is_mask_buffer(info.name))
            return awl_error(AWL_ERR_FORMAT, "%s: %s: unexpected tensor %s (not in the model)",
                             LOAD, path, info.name);
    }
    return AWL_OK;
}

int awl_gpt_load_weights(awl_gpt *model, const awl_safetensors *f)
{
    if (!model || !f) return awl_error(AWL_ERR_INVALID, "%s: NULL argument", LOAD);
    const awl_param_list *params = awl_gpt_parameters(model);
    int *src = awl_xcalloc((size_t)params->count + 1, sizeof *src);
    bool *used = awl_xcalloc((size_t)awl_safetensors_count(f) + 1, sizeof *used);
    int status = plan_weights(model, f, src, used);
    char device[32];
    for (int p = 0; p < params->count && status == AWL_OK; p++) {
        awl_tensor *dst = params->items[p].tensor;
        awl_scope_begin();
        awl_tensor *t =
            awl_safetensors_load(f, src[p], awl_tensor_device_name(dst, device, sizeof device));
        status = t ? awl_tensor_copy_(dst, t) : awl_last_error_code();
        awl_scope_end();
    }
    free(src);
    free(used);
    return status < 0 ? status : AWL_OK;
}
