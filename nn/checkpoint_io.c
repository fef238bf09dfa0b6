/*
 * nn/checkpoint_io.c - training checkpoints on top of safetensors (see
 * checkpoint_io.h).
 *
 * Loading is two-phase so that a bad file changes nothing. Phase one opens
 * the file (nn/safetensors.c validates the format and every CRC), then
 * builds a plan: for each destination tensor (parameter or optimizer state)
 * the file entry that feeds it, checking names, dtypes and shapes, and
 * parses every metadata value it will use. Only when the whole plan stands
 * does phase two copy the tensors (awl_tensor_copy_, so any device) and set
 * the step counts. The only failures left in phase two are device faults.
 *
 * Everything the trainer needs besides tensors travels as metadata strings,
 * integers in decimal, parsed strictly (digits only, range-checked), because
 * safetensors metadata is a string-to-string map that Python tools show as
 * is.
 */
#include "nn/checkpoint_io.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "nn/safetensors.h"
#include "common/alloc.h"

#define FORMAT_NAME "checkpoint"
#define FORMAT_VERSION "2"
/* version 1 is version 2 without awl.metadata_crc32: still read */
#define FORMAT_VERSION_OLD "1"
#define METADATA_CRC_KEY "awl.metadata_crc32"

static char *copy_string(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *c = awl_xmalloc(n);
    memcpy(c, s, n);
    return c;
}

static char *concat(const char *a, const char *b)
{
    char *s = awl_xmalloc(strlen(a) + strlen(b) + 1);
    strcpy(s, a);
    strcat(s, b);
    return s;
}

/* ---- the train state ------------------------------------------------------------- */

int awl_train_state_set_tokenizer(awl_train_state *s, const char *tokenizer)
{
    if (!s) return AWL_ERR_INVALID;
    free(s->tokenizer);
    s->tokenizer = copy_string(tokenizer);
    return AWL_OK;
}

int awl_train_state_set_config(awl_train_state *s, const char *config_json)
{
    if (!s) return AWL_ERR_INVALID;
    free(s->config_json);
    s->config_json = copy_string(config_json);
    return AWL_OK;
}

int awl_train_state_set_extra(awl_train_state *s, const char *key, const char *value)
{
    if (!s || !key || !value) return AWL_ERR_INVALID;
    for (int i = 0; i < s->n_extra; i++) {
        if (strcmp(s->extra_keys[i], key) == 0) {
            free(s->extra_values[i]);
            s->extra_values[i] = copy_string(value);
            return AWL_OK;
        }
    }
    size_t n = (size_t)s->n_extra + 1;
    s->extra_keys = awl_xrealloc(s->extra_keys, n * sizeof *s->extra_keys);
    s->extra_values = awl_xrealloc(s->extra_values, n * sizeof *s->extra_values);
    s->extra_keys[s->n_extra] = copy_string(key);
    s->extra_values[s->n_extra++] = copy_string(value);
    return AWL_OK;
}

const char *awl_train_state_get_extra(const awl_train_state *s, const char *key)
{
    for (int i = 0; s && key && i < s->n_extra; i++)
        if (strcmp(s->extra_keys[i], key) == 0) return s->extra_values[i];
    return NULL;
}

void awl_train_state_clear(awl_train_state *s)
{
    if (!s) return;
    free(s->tokenizer);
    free(s->config_json);
    for (int i = 0; i < s->n_extra; i++) {
        free(s->extra_keys[i]);
        free(s->extra_values[i]);
    }
    free(s->extra_keys);
    free(s->extra_values);
    memset(s, 0, sizeof *s);
}

/* ---- saving ----------------------------------------------------------------------- */

/* Metadata being assembled: owned copies of keys and values. */
typedef struct kv_list {
    int n, cap;
    char **keys, **values;
} kv_list;

static void kv_add(kv_list *l, char *key, char *value) /* takes both */
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->keys = awl_xrealloc(l->keys, (size_t)l->cap * sizeof *l->keys);
        l->values = awl_xrealloc(l->values, (size_t)l->cap * sizeof *l->values);
    }
    l->keys[l->n] = key;
    l->values[l->n++] = value;
}

static void kv_addf(kv_list *l, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void kv_addf(kv_list *l, const char *key, const char *fmt, ...)
{
    char value[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    kv_add(l, copy_string(key), copy_string(value));
}

static void kv_free(kv_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->keys[i]);
        free(l->values[i]);
    }
    free(l->keys);
    free(l->values);
}

/* ---- the metadata's CRC ------------------------------------------------------------ */

/* CRC-32 of the metadata entries, sorted by key, each as key NUL value NUL,
 * leaving out the tensors' crc32.* entries (their tensors check them) and
 * the metadata CRC itself. Sorting makes it independent of header order. */
static int by_key(const void *a, const void *b)
{
    return strcmp(**(char *const *const *)a, **(char *const *const *)b);
}

static uint32_t metadata_crc(int n, char *const *keys, char *const *values)
{
    const char *const **order = awl_xmalloc(((size_t)n + 1) * sizeof *order);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(keys[i], "crc32.", 6) != 0 && strcmp(keys[i], METADATA_CRC_KEY) != 0)
            order[m++] = (const char *const *)&keys[i];
    qsort(order, (size_t)m, sizeof *order, by_key);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < m; i++) {
        const char *key = *order[i], *value = values[order[i] - (const char *const *)keys];
        crc = crc32(crc, (const Bytef *)key, (uInt)strlen(key) + 1);
        crc = crc32(crc, (const Bytef *)value, (uInt)strlen(value) + 1);
    }
    free(order);
    return (uint32_t)crc;
}

/* ---- refusing non-finite values ------------------------------------------------------ */

int64_t awl_tensor_first_non_finite(awl_tensor *t, double *value)
{
    if (!t || t->dtype == AWL_I32 || awl_numel(t) == 0) return -1;
    awl_scope_begin();
    awl_tensor *f = awl_tensor_cast(t, AWL_F64);
    int64_t n = awl_numel(t), bad = -1;
    double *host = f ? awl_xmalloc((size_t)n * sizeof *host) : NULL;
    if (host && awl_to_host(f, host, (size_t)n * sizeof *host) == 0)
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (!isfinite(host[i])) {
                bad = i;
                *value = host[i];
            }
    free(host);
    awl_scope_end();
    return bad;
}

static int check_finite(int n, const char *const *names, awl_tensor *const *tensors)
{
    for (int i = 0; i < n; i++) {
        double v = 0;
        int64_t at = awl_tensor_first_non_finite(tensors[i], &v);
        if (at >= 0)
            return awl_error(AWL_ERR_INVALID,
                             "awl_checkpoint_save: tensor %s holds %s at element %lld: a "
                             "checkpoint never holds non-finite values, nothing was written",
                             names[i],
                             isnan(v) ? "NaN"
                             : v > 0  ? "+inf"
                                      : "-inf",
                             (long long)at);
    }
    return AWL_OK;
}

static void add_state_metadata(kv_list *kv, const awl_train_state *s)
{
    kv_addf(kv, "step", "%lld", (long long)s->step);
    kv_addf(kv, "rng.seed", "%llu", (unsigned long long)s->rng_seed);
    kv_addf(kv, "rng.offset", "%llu", (unsigned long long)s->rng_offset);
    kv_addf(kv, "data.seed", "%llu", (unsigned long long)s->data_seed);
    kv_addf(kv, "data.position.train", "%llu", (unsigned long long)s->data_position[0]);
    kv_addf(kv, "data.position.val", "%llu", (unsigned long long)s->data_position[1]);
    if (s->tokenizer) kv_add(kv, copy_string("tokenizer"), copy_string(s->tokenizer));
    if (s->config_json) kv_add(kv, copy_string("config"), copy_string(s->config_json));
    for (int i = 0; i < s->n_extra; i++)
        kv_add(kv, concat("extra.", s->extra_keys[i]), copy_string(s->extra_values[i]));
}

static void add_optimizer_metadata(kv_list *kv, const awl_optimizer *opt)
{
    kv_add(kv, copy_string("optimizer"), copy_string(awl_optimizer_kind_name(opt)));
    kv_addf(kv, "optimizer.step_count", "%lld", (long long)awl_optimizer_step_count(opt));
    kv_addf(kv, "optimizer.lr", "%.17g", awl_optimizer_get_lr(opt));
    for (int i = 0; i < awl_optimizer_num_params(opt); i++) {
        char *key = concat("optimizer.step.", awl_optimizer_param_name(opt, i));
        kv_addf(kv, key, "%lld", (long long)awl_optimizer_param_step(opt, i));
        free(key);
    }
}

int awl_checkpoint_save(const char *path, const awl_param_list *params, const awl_optimizer *opt,
                        const awl_train_state *state)
{
    if (!path || !params) return AWL_ERR_INVALID;
    int n_states = opt ? awl_optimizer_num_states(opt) : 0;
    int n = params->count + n_states;
    const char **names = awl_xcalloc((size_t)n + 1, sizeof *names);
    awl_tensor **tensors = awl_xcalloc((size_t)n + 1, sizeof *tensors);
    char **state_names = awl_xcalloc((size_t)n_states + 1, sizeof *state_names);
    for (int i = 0; i < params->count; i++) {
        names[i] = params->items[i].name;
        tensors[i] = params->items[i].tensor;
    }
    for (int i = 0; i < n_states; i++) {
        const char *name;
        tensors[params->count + i] = awl_optimizer_state(opt, i, &name);
        state_names[i] = concat("optimizer.", name);
        names[params->count + i] = state_names[i];
    }
    kv_list kv = {0};
    kv_add(&kv, copy_string("awl.format"), copy_string(FORMAT_NAME));
    kv_add(&kv, copy_string("awl.format_version"), copy_string(FORMAT_VERSION));
    if (state) add_state_metadata(&kv, state);
    if (opt) add_optimizer_metadata(&kv, opt);
    char crc_text[9];
    snprintf(crc_text, sizeof crc_text, "%08x", (unsigned)metadata_crc(kv.n, kv.keys, kv.values));
    kv_add(&kv, copy_string(METADATA_CRC_KEY), copy_string(crc_text));

    int status = check_finite(n, names, tensors);
    if (status == AWL_OK)
        status = awl_safetensors_save(path, n, names, tensors, kv.n, (const char *const *)kv.keys,
                                      (const char *const *)kv.values);
    kv_free(&kv);
    for (int i = 0; i < n_states; i++) free(state_names[i]);
    free(state_names);
    free(names);
    free(tensors);
    return status;
}

/* ---- loading ----------------------------------------------------------------------- */

static int load_error(const awl_safetensors *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int load_error(const awl_safetensors *f, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return awl_error(AWL_ERR_FORMAT, "awl_checkpoint_load: %s: %s", awl_safetensors_path(f), what);
}

/* A metadata integer in [0, max]: *out untouched when the key is absent and
 * not required. */
static int meta_uint(const awl_safetensors *f, const char *key, uint64_t max, bool required,
                     uint64_t *out)
{
    const char *s = awl_safetensors_metadata_get(f, key);
    if (!s) return required ? load_error(f, "metadata %s is missing", key) : AWL_OK;
    uint64_t v = 0;
    bool ok = *s != '\0' && !(s[0] == '0' && s[1] != '\0');
    for (const char *c = s; ok && *c; c++) {
        unsigned d = (unsigned)(*c - '0');
        ok = d <= 9 && v <= (max - d) / 10;
        v = v * 10 + d;
    }
    if (!ok)
        return load_error(f, "metadata %s = \"%.40s\" is not an integer in [0, %llu]", key, s,
                          (unsigned long long)max);
    *out = v;
    return AWL_OK;
}

/* One tensor to copy: the destination and the file entry. */
typedef struct copy_plan {
    awl_tensor *dst;
    int src;
} copy_plan;

/* Checks that the file holds `name` with dst's dtype and shape (and a CRC
 * when the file is awl's) and records the copy. */
static int plan_copy(const awl_safetensors *f, bool ours, const char *name, awl_tensor *dst,
                     bool *used, copy_plan *plan, int *n_plan)
{
    int i = awl_safetensors_find(f, name);
    if (i < 0) return load_error(f, "missing tensor %s", name);
    awl_safetensors_info info;
    awl_safetensors_info_at(f, i, &info);
    bool same = info.dtype == dst->dtype && info.ndim == dst->ndim;
    for (int d = 0; same && d < info.ndim; d++) same = info.shape[d] == dst->shape[d];
    if (!same) {
        char s1[128], s2[128];
        awl_format_shape(info.ndim, info.shape, s1, sizeof s1);
        return load_error(f, "tensor %s is %s %s in the file but %s %s in the model", name,
                          awl_dtype_name(info.dtype), s1, awl_dtype_name(dst->dtype),
                          awl_shape_str(dst, s2, sizeof s2));
    }
    if (ours && !info.has_crc) return load_error(f, "tensor %s has no crc32 entry", name);
    if (info.float16)
        return load_error(f, "tensor %s is float16 in the file: a checkpoint holds %s", name,
                          awl_dtype_name(dst->dtype));
    used[i] = true;
    plan[(*n_plan)++] = (copy_plan){dst, i};
    return AWL_OK;
}

/* Plans the optimizer's tensors and reads its step counts into steps[]
 * (per parameter) and *count. */
static int plan_optimizer(const awl_safetensors *f, bool ours, awl_optimizer *opt, bool *used,
                          copy_plan *plan, int *n_plan, int64_t *steps, int64_t *count)
{
    const char *kind = awl_safetensors_metadata_get(f, "optimizer");
    if (!kind) return load_error(f, "holds no optimizer state (metadata optimizer is missing)");
    if (strcmp(kind, awl_optimizer_kind_name(opt)) != 0)
        return load_error(f, "holds %.20s optimizer state, not %s", kind,
                          awl_optimizer_kind_name(opt));
    for (int i = 0; i < awl_optimizer_num_states(opt); i++) {
        const char *name;
        awl_tensor *t = awl_optimizer_state(opt, i, &name);
        char *full = concat("optimizer.", name);
        int status = plan_copy(f, ours, full, t, used, plan, n_plan);
        free(full);
        if (status < 0) return status;
    }
    uint64_t v = 0;
    if (meta_uint(f, "optimizer.step_count", INT64_MAX, true, &v) < 0) return AWL_ERR_FORMAT;
    *count = (int64_t)v;
    for (int i = 0; i < awl_optimizer_num_params(opt); i++) {
        char *key = concat("optimizer.step.", awl_optimizer_param_name(opt, i));
        int status = meta_uint(f, key, INT64_MAX, true, &v);
        free(key);
        if (status < 0) return status;
        steps[i] = (int64_t)v;
    }
    return AWL_OK;
}

/* The train state from the metadata (absent entries stay 0 / NULL). */
static int read_state(const awl_safetensors *f, awl_train_state *s)
{
    uint64_t step = 0;
    if (meta_uint(f, "step", INT64_MAX, false, &step) < 0 ||
        meta_uint(f, "rng.seed", UINT64_MAX, false, &s->rng_seed) < 0 ||
        meta_uint(f, "rng.offset", UINT64_MAX, false, &s->rng_offset) < 0 ||
        meta_uint(f, "data.seed", UINT64_MAX, false, &s->data_seed) < 0 ||
        meta_uint(f, "data.position.train", UINT64_MAX, false, &s->data_position[0]) < 0 ||
        meta_uint(f, "data.position.val", UINT64_MAX, false, &s->data_position[1]) < 0)
        return AWL_ERR_FORMAT;
    s->step = (int64_t)step;
    awl_train_state_set_tokenizer(s, awl_safetensors_metadata_get(f, "tokenizer"));
    awl_train_state_set_config(s, awl_safetensors_metadata_get(f, "config"));
    for (int i = 0; i < awl_safetensors_metadata_count(f); i++) {
        const char *key = awl_safetensors_metadata_key(f, i);
        if (strncmp(key, "extra.", 6) == 0)
            awl_train_state_set_extra(s, key + 6, awl_safetensors_metadata_value(f, i));
    }
    return AWL_OK;
}

/* awl's format and version, when the file says it is awl's (*ours). */
static int check_format(const awl_safetensors *f, bool *ours)
{
    const char *format = awl_safetensors_metadata_get(f, "awl.format");
    *ours = format != NULL;
    if (!format) return AWL_OK;
    const char *version = awl_safetensors_metadata_get(f, "awl.format_version");
    if (strcmp(format, FORMAT_NAME) != 0)
        return load_error(f, "awl.format is \"%.40s\", not \"" FORMAT_NAME "\"", format);
    if (!version ||
        (strcmp(version, FORMAT_VERSION) != 0 && strcmp(version, FORMAT_VERSION_OLD) != 0))
        return load_error(
            f,
            "unsupported awl.format_version \"%.20s\" (this build reads " FORMAT_VERSION_OLD
            " and " FORMAT_VERSION ")",
            version ? version : "");
    return AWL_OK;
}

/* The metadata CRC of an awl file of version 2 matches its metadata. */
static int check_metadata_crc(const awl_safetensors *f)
{
    const char *version = awl_safetensors_metadata_get(f, "awl.format_version");
    if (!version || strcmp(version, FORMAT_VERSION_OLD) == 0) return AWL_OK;
    const char *want = awl_safetensors_metadata_get(f, METADATA_CRC_KEY);
    if (!want) return load_error(f, "metadata " METADATA_CRC_KEY " is missing");
    int n = awl_safetensors_metadata_count(f);
    char **keys = awl_xmalloc(((size_t)n + 1) * sizeof *keys);
    char **values = awl_xmalloc(((size_t)n + 1) * sizeof *values);
    for (int i = 0; i < n; i++) {
        keys[i] = (char *)awl_safetensors_metadata_key(f, i);
        values[i] = (char *)awl_safetensors_metadata_value(f, i);
    }
    char have[9];
    snprintf(have, sizeof have, "%08x", (unsigned)metadata_crc(n, keys, values));
    free(keys);
    free(values);
    if (strcmp(have, want) != 0)
        return load_error(
            f, "the metadata is corrupt: its CRC-32 is %s, " METADATA_CRC_KEY " says \"%.20s\"",
            have, want);
    return AWL_OK;
}

int awl_checkpoint_read_state(const awl_safetensors *f, awl_train_state *out)
{
    if (!f || !out) return AWL_ERR_INVALID;
    memset(out, 0, sizeof *out);
    bool ours;
    int status = check_format(f, &ours);
    if (status == AWL_OK && !ours)
        status = load_error(f, "is not an awl checkpoint (metadata awl.format is missing)");
    awl_train_state state = {0};
    if (status == AWL_OK) status = read_state(f, &state);
    if (status == AWL_OK) status = check_metadata_crc(f);
    if (status == AWL_OK)
        *out = state;
    else
        awl_train_state_clear(&state);
    return status;
}

/* Phase one: everything that can be wrong with the file, checked. */
static int plan_load(const awl_safetensors *f, const awl_param_list *params, awl_optimizer *opt,
                     copy_plan *plan, int *n_plan, int64_t *steps, int64_t *count,
                     awl_train_state *state)
{
    bool ours;
    if (check_format(f, &ours) < 0) return AWL_ERR_FORMAT;
    int n_file = awl_safetensors_count(f);
    bool *used = awl_xcalloc((size_t)n_file + 1, sizeof *used);
    int status = AWL_OK;
    for (int i = 0; i < params->count && status >= 0; i++)
        status =
            plan_copy(f, ours, params->items[i].name, params->items[i].tensor, used, plan, n_plan);
    if (status >= 0 && opt) status = plan_optimizer(f, ours, opt, used, plan, n_plan, steps, count);
    for (int i = 0; i < n_file && status >= 0; i++) {
        awl_safetensors_info info;
        awl_safetensors_info_at(f, i, &info);
        bool optimizer_tensor = strncmp(info.name, "optimizer.", 10) == 0;
        if (!used[i] && (opt || !optimizer_tensor))
            status = load_error(f, "unexpected tensor %s (not in the %s)", info.name,
                                optimizer_tensor ? "optimizer" : "model");
    }
    free(used);
    if (status >= 0 && state) status = read_state(f, state);
    if (status >= 0 && ours) status = check_metadata_crc(f);
    return status;
}

int awl_checkpoint_load(const char *path, const awl_param_list *params, awl_optimizer *opt,
                        awl_train_state *state_out)
{
    if (!path || !params) return AWL_ERR_INVALID;
    awl_safetensors *f = awl_safetensors_open(path);
    if (!f) return awl_last_error_code();
    int n_opt = opt ? awl_optimizer_num_params(opt) : 0;
    int max_plan = params->count + (opt ? awl_optimizer_num_states(opt) : 0);
    copy_plan *plan = awl_xcalloc((size_t)max_plan + 1, sizeof *plan);
    int64_t *steps = awl_xcalloc((size_t)n_opt + 1, sizeof *steps);
    int64_t count = 0;
    int n_plan = 0;
    awl_train_state state = {0};
    int status = plan_load(f, params, opt, plan, &n_plan, steps, &count, &state);

    /* phase two: copy (only device faults can fail from here on) */
    char device[32];
    for (int k = 0; k < n_plan && status >= 0; k++) {
        awl_scope_begin();
        awl_tensor *dst = plan[k].dst;
        awl_tensor *src = awl_safetensors_load(f, plan[k].src,
                                               awl_tensor_device_name(dst, device, sizeof device));
        status = src ? awl_tensor_copy_(dst, src) : awl_last_error_code();
        awl_scope_end();
    }
    if (status >= 0 && opt) {
        for (int i = 0; i < n_opt; i++) awl_optimizer_set_param_step(opt, i, steps[i]);
        awl_optimizer_set_step_count(opt, count);
    }
    if (status >= 0 && state_out)
        *state_out = state;
    else
        awl_train_state_clear(&state);
    free(plan);
    free(steps);
    awl_safetensors_close(f);
    return status < 0 ? status : AWL_OK;
}
