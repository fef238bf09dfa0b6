/*
 * tests/test_safetensors.c - the safetensors reader and writer, and
 * training checkpoints built on them.
 *
 * Round trips must be bitwise. The file layout is checked byte by byte
 * here, independently of the reader (the header is matched as text, the
 * data and CRCs recomputed with zlib). Crash safety is checked with real
 * failures: a rename onto a directory, and writes cut off by RLIMIT_FSIZE.
 * Malformed files are made by editing a good file (its header as text, or
 * its bytes), and each must be rejected with AWL_ERR_FORMAT while the model
 * and optimizer keep every bit they had.
 */
#include <check.h>
#include <math.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "autograd/autograd.h"
#include "nn/checkpoint_io.h"
#include "nn/optim.h"
#include "nn/safetensors.h"

static char dir[64];

static void setup(void)
{
    awl_clear_error();
    strcpy(dir, "/tmp/awl_st_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Removes the test directory (files, and the one level of subdirectories
 * the crash test makes). */
static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char child[512];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        if (unlink(child) < 0) remove_tree(child);
    }
    closedir(d);
    rmdir(path);
}

static void teardown(void) { remove_tree(dir); }

static char *path_in_dir(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(*n + 1);
    ck_assert_uint_eq(fread(buf, 1, *n, f), *n);
    fclose(f);
    return buf;
}

static void write_all(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static bool any_temp_file(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) found = true;
    closedir(d);
    return found;
}

/* ---- a tiny model with an AdamW optimizer ------------------------------------------ */

typedef struct model {
    awl_param_list params;
    awl_optimizer *opt;
} model;

/* "w" (2, 3) and "b" (3) float32 and "h" (2, 2) float64, filled from
 * `seed`, with AdamW state after `steps` steps. */
static void model_init(model *m, uint64_t seed, int steps)
{
    memset(m, 0, sizeof m[0]);
    awl_manual_seed(seed);
    struct {
        const char *name;
        int ndim;
        int64_t shape[2];
        awl_dtype dtype;
    } spec[3] = {{"w", 2, {2, 3}, AWL_F32}, {"b", 1, {3}, AWL_F32}, {"h", 2, {2, 2}, AWL_F64}};
    for (int i = 0; i < 3; i++) {
        awl_tensor *t =
            awl_requires_grad_(awl_randn(spec[i].ndim, spec[i].shape, spec[i].dtype, "cpu"), true);
        ck_assert_int_eq(awl_param_list_add(&m->params, spec[i].name, t), 0);
        awl_release(t);
    }
    m->opt = awl_adamw_new(&m->params, 0.01, 0.9, 0.95, 1e-8, 0.1);
    ck_assert_ptr_nonnull(m->opt);
    for (int s = 0; s < steps; s++) {
        awl_scope_begin();
        for (int i = 0; i < 3; i++) {
            awl_tensor *p = m->params.items[i].tensor;
            ck_assert_int_eq(awl_backward(awl_sum_all(awl_mul(p, awl_exp(p)))), 0);
        }
        awl_scope_end();
        ck_assert_int_eq(awl_optimizer_step(m->opt), 0);
        ck_assert_int_eq(awl_optimizer_zero_grad(m->opt), 0);
    }
}

static void model_free(model *m)
{
    awl_optimizer_free(m->opt);
    awl_param_list_clear(&m->params);
}

/* Every byte of the parameters and optimizer state, and the step counts. */
static unsigned char *snapshot(const model *m, size_t *n)
{
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    int n_states = awl_optimizer_num_states(m->opt);
    for (int i = 0; i < m->params.count + n_states; i++) {
        awl_tensor *t = i < m->params.count
                            ? m->params.items[i].tensor
                            : awl_optimizer_state(m->opt, i - m->params.count, NULL);
        size_t nb = (size_t)awl_numel(t) * awl_dtype_size(t->dtype);
        ck_assert_uint_lt(len + nb, cap);
        ck_assert_int_eq(awl_to_host(t, buf + len, nb), 0);
        len += nb;
    }
    for (int i = 0; i < awl_optimizer_num_params(m->opt); i++) {
        int64_t s = awl_optimizer_param_step(m->opt, i);
        memcpy(buf + len, &s, sizeof s);
        len += sizeof s;
    }
    int64_t count = awl_optimizer_step_count(m->opt);
    memcpy(buf + len, &count, sizeof count);
    *n = len + sizeof count;
    return buf;
}

static void fill_state(awl_train_state *st)
{
    memset(st, 0, sizeof *st);
    st->step = 1234;
    st->rng_seed = 0xFFFFFFFFFFFFFFFFull; /* the full range survives */
    st->rng_offset = 987654321012345ull;
    st->data_seed = 1337;
    st->data_position[0] = 250;
    st->data_position[1] = 17;
    awl_train_state_set_tokenizer(st, "char:0a2021");
    awl_train_state_set_config(
        st, "{\"n_layer\":2,\"name\":\"q\\\"uote\\\\ \\u00e9\",\n\"tab\":\"\t\"}");
    awl_train_state_set_extra(st, "best_val_loss", "1.8531");
    awl_train_state_set_extra(st, "note",
                              "caf\xc3\xa9 \xf0\x9f\x98\x80"); /* UTF-8, 2 and 4 bytes */
}

/* ---- round trip ------------------------------------------------------------------------ */

START_TEST(test_checkpoint_round_trip)
{
    model a, b;
    model_init(&a, 1, 3);
    model_init(&b, 2, 1); /* different values and step counts */
    awl_train_state st;
    fill_state(&st);
    const char *path = path_in_dir("ckpt.safetensors");
    ck_assert_int_eq(awl_checkpoint_save(path, &a.params, a.opt, &st), 0);
    ck_assert(!any_temp_file());

    awl_train_state in = {0};
    ck_assert_int_eq(awl_checkpoint_load(path, &b.params, b.opt, &in), 0);
    size_t na, nb;
    unsigned char *sa = snapshot(&a, &na), *sb = snapshot(&b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(sa, sb, na); /* weights, state, step counts: every bit */
    free(sa);
    free(sb);
    ck_assert_int_eq(awl_optimizer_step_count(b.opt), 3);

    ck_assert_int_eq(in.step, st.step);
    ck_assert_uint_eq(in.rng_seed, st.rng_seed);
    ck_assert_uint_eq(in.rng_offset, st.rng_offset);
    ck_assert_uint_eq(in.data_seed, st.data_seed);
    ck_assert_uint_eq(in.data_position[0], 250);
    ck_assert_uint_eq(in.data_position[1], 17);
    ck_assert_str_eq(in.tokenizer, st.tokenizer);
    ck_assert_str_eq(in.config_json, st.config_json);
    ck_assert_int_eq(in.n_extra, 2);
    ck_assert_str_eq(awl_train_state_get_extra(&in, "best_val_loss"), "1.8531");
    ck_assert_str_eq(awl_train_state_get_extra(&in, "note"), "caf\xc3\xa9 \xf0\x9f\x98\x80");

    /* weights only: opt NULL ignores the optimizer's tensors; state NULL */
    model c;
    model_init(&c, 3, 0);
    ck_assert_int_eq(awl_checkpoint_load(path, &c.params, NULL, NULL), 0);
    for (int i = 0; i < 3; i++) {
        double x[6], y[6];
        awl_scope_begin();
        awl_to_host(awl_tensor_cast(a.params.items[i].tensor, AWL_F64), x, sizeof x);
        awl_to_host(awl_tensor_cast(c.params.items[i].tensor, AWL_F64), y, sizeof y);
        awl_scope_end();
        ck_assert_mem_eq(x, y, (size_t)awl_numel(a.params.items[i].tensor) * sizeof(double));
    }
    ck_assert_int_eq(awl_optimizer_step_count(c.opt), 0);

    awl_train_state_clear(&st);
    awl_train_state_clear(&in);
    ck_assert_ptr_null(in.tokenizer);
    model_free(&a);
    model_free(&b);
    model_free(&c);
}
END_TEST

START_TEST(test_generic_reader_and_dtypes)
{
    awl_scope_begin();
    float f[6] = {1.5f, -2, 3, 0, -0.0f, 1e-30f};
    double d[2] = {3.141592653589793, -1e300};
    int32_t i[4] = {-7, 0, 2147483647, -2147483647 - 1};
    awl_tensor *bf = awl_tensor_cast(awl_from_data(f, AWL_SHAPE(6), AWL_F32, "cpu"), AWL_BF16);
    awl_tensor *scalar = awl_full(0, NULL, 42.0, AWL_F64, "cpu");
    awl_tensor *empty = awl_zeros(AWL_SHAPE(0, 3), AWL_F32, "cpu");
    /* a non-contiguous view is written row-major */
    awl_tensor *tr = awl_tensor_transpose(awl_from_data(f, AWL_SHAPE(2, 3), AWL_F32, "cpu"), 0, 1);
    awl_tensor *ts[6] = {awl_from_data(d, AWL_SHAPE(2), AWL_F64, "cpu"),
                         awl_from_data(i, AWL_SHAPE(2, 2), AWL_I32, "cpu"),
                         bf,
                         scalar,
                         empty,
                         tr};
    const char *names[6] = {"double", "int", "bf16", "scalar", "empty", "transposed"};
    const char *keys[2] = {"format", "k\"ey"}, *vals[2] = {"pt", "v\\al\n"};
    const char *path = path_in_dir("generic.safetensors");
    ck_assert_int_eq(awl_safetensors_save(path, 6, names, ts, 2, keys, vals), 0);

    awl_safetensors *file = awl_safetensors_open(path);
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(awl_safetensors_count(file), 6);
    ck_assert_str_eq(awl_safetensors_metadata_get(file, "format"), "pt");
    ck_assert_str_eq(awl_safetensors_metadata_get(file, "k\"ey"), "v\\al\n");
    ck_assert_int_eq(awl_safetensors_metadata_count(file), 2 + 6); /* + the CRCs */
    for (int k = 0; k < 6; k++) {
        int idx = awl_safetensors_find(file, names[k]);
        ck_assert_int_eq(idx, k); /* header order is the order given */
        awl_safetensors_info info;
        ck_assert_int_eq(awl_safetensors_info_at(file, idx, &info), 0);
        ck_assert_str_eq(info.name, names[k]);
        ck_assert_int_eq(info.dtype, ts[k]->dtype);
        ck_assert_int_eq(info.ndim, ts[k]->ndim);
        ck_assert(info.has_crc);
        awl_tensor *back = awl_safetensors_load(file, idx, "cpu");
        ck_assert(awl_same_shape(back, ts[k]));
        size_t nbytes = (size_t)awl_numel(back) * awl_dtype_size(back->dtype);
        unsigned char want[64], got[64];
        ck_assert_int_eq(awl_to_host(ts[k], want, nbytes), 0);
        ck_assert_int_eq(awl_to_host(back, got, nbytes), 0);
        ck_assert_mem_eq(want, got, nbytes);
        ck_assert_mem_eq(awl_safetensors_data(file, idx), want, nbytes);
    }
    ck_assert_int_eq(awl_safetensors_find(file, "nope"), -1);
    ck_assert_int_lt(awl_safetensors_info_at(file, 6, &(awl_safetensors_info){0}), 0);
    awl_safetensors_close(file);

    /* bad arguments write nothing */
    const char *dup[2] = {"a", "a"};
    awl_tensor *two[2] = {scalar, scalar};
    ck_assert_int_eq(awl_safetensors_save(path_in_dir("x"), 2, dup, two, 0, NULL, NULL),
                     AWL_ERR_INVALID);
    const char *crc_key[1] = {"crc32.a"}, *crc_val[1] = {"00000000"};
    const char *one[1] = {"a"};
    ck_assert_int_eq(awl_safetensors_save(path_in_dir("x"), 1, one, two, 1, crc_key, crc_val),
                     AWL_ERR_INVALID);
    const char *bad_utf8[1] = {"\xff"};
    ck_assert_int_eq(awl_safetensors_save(path_in_dir("x"), 1, bad_utf8, two, 0, NULL, NULL),
                     AWL_ERR_INVALID);
    ck_assert_int_eq(access(path_in_dir("x"), F_OK), -1);
    awl_scope_end();
}
END_TEST

/* ---- the layout, checked without the reader ---------------------------------------------- */

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

/* A good checkpoint split into its header text (without padding) and data. */
typedef struct good_file {
    char *header;
    unsigned char *data;
    size_t n_data;
    unsigned char *bytes; /* the whole file */
    size_t size;
} good_file;

static void good_file_read(good_file *g, const char *path)
{
    g->bytes = read_all(path, &g->size);
    uint64_t n = le64(g->bytes);
    g->header = malloc(n + 1);
    memcpy(g->header, g->bytes + 8, n);
    g->header[n] = '\0';
    size_t end = strlen(g->header);
    while (end > 0 && g->header[end - 1] == ' ') g->header[--end] = '\0';
    g->data = g->bytes + 8 + n;
    g->n_data = g->size - 8 - n;
}

START_TEST(test_file_layout)
{
    model m;
    model_init(&m, 5, 2);
    const char *path = path_in_dir("layout.safetensors");
    ck_assert_int_eq(awl_checkpoint_save(path, &m.params, m.opt, NULL), 0);
    good_file g;
    good_file_read(&g, path);
    uint64_t n = le64(g.bytes);
    ck_assert_uint_eq((8 + n) % 8, 0); /* data 8-byte aligned */
    const char *header = g.header;     /* without its padding */
    for (size_t k = 8 + strlen(header); k < 8 + n; k++) ck_assert_int_eq(g.bytes[k], ' ');
    ck_assert_uint_eq(strncmp(header, "{\"__metadata__\":{", 17), 0);
    ck_assert_int_eq(header[strlen(header) - 1], '}');
    ck_assert_ptr_nonnull(strstr(header, "\"awl.format\":\"checkpoint\""));
    ck_assert_ptr_nonnull(strstr(header, "\"awl.format_version\":\"2\""));
    ck_assert_ptr_nonnull(strstr(header, "\"awl.metadata_crc32\":\""));
    ck_assert_ptr_nonnull(strstr(header, "\"optimizer\":\"adamw\""));
    ck_assert_ptr_nonnull(strstr(header, "\"optimizer.step.w\":\"2\""));

    /* parameters first, then the optimizer's state, back to back */
    struct {
        const char *name, *dtype, *shape;
        int64_t nbytes;
        awl_tensor *t;
    } want[9] = {
        {"w", "F32", "[2,3]", 24, m.params.items[0].tensor},
        {"b", "F32", "[3]", 12, m.params.items[1].tensor},
        {"h", "F64", "[2,2]", 32, m.params.items[2].tensor},
        {"optimizer.w.exp_avg", "F32", "[2,3]", 24, awl_optimizer_state(m.opt, 0, NULL)},
        {"optimizer.w.exp_avg_sq", "F32", "[2,3]", 24, awl_optimizer_state(m.opt, 1, NULL)},
        {"optimizer.b.exp_avg", "F32", "[3]", 12, awl_optimizer_state(m.opt, 2, NULL)},
        {"optimizer.b.exp_avg_sq", "F32", "[3]", 12, awl_optimizer_state(m.opt, 3, NULL)},
        {"optimizer.h.exp_avg", "F64", "[2,2]", 32, awl_optimizer_state(m.opt, 4, NULL)},
        {"optimizer.h.exp_avg_sq", "F64", "[2,2]", 32, awl_optimizer_state(m.opt, 5, NULL)},
    };
    int64_t offset = 0;
    const char *previous = header;
    const unsigned char *data = g.data;
    for (int k = 0; k < 9; k++) {
        char entry[256];
        snprintf(entry, sizeof entry,
                 "\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%lld,%lld]}",
                 want[k].name, want[k].dtype, want[k].shape, (long long)offset,
                 (long long)(offset + want[k].nbytes));
        const char *at = strstr(header, entry);
        ck_assert_msg(at != NULL, "no entry %s in %s", entry, header);
        ck_assert(at > previous); /* in order */
        previous = at;
        unsigned char bytes[64];
        ck_assert_int_eq(awl_to_host(want[k].t, bytes, (size_t)want[k].nbytes), 0);
        ck_assert_mem_eq(data + offset, bytes, (size_t)want[k].nbytes);
        char crc[64];
        snprintf(crc, sizeof crc, "\"crc32.%s\":\"%08lx\"", want[k].name,
                 crc32(0, bytes, (uInt)want[k].nbytes));
        ck_assert_msg(strstr(header, crc) != NULL, "no %s", crc);
        offset += want[k].nbytes;
    }
    ck_assert_uint_eq(g.size, 8 + n + (uint64_t)offset); /* nothing after the data */
    free(g.header);
    free(g.bytes);
    model_free(&m);
}
END_TEST

/* ---- crash safety ---------------------------------------------------------------------------- */

START_TEST(test_failed_save_keeps_old_file)
{
    model m;
    model_init(&m, 7, 1);
    const char *path = path_in_dir("keep.safetensors");
    ck_assert_int_eq(awl_checkpoint_save(path, &m.params, m.opt, NULL), 0);
    size_t n_old;
    unsigned char *old = read_all(path, &n_old);

    /* change the model so a successful save would change the file */
    awl_tensor_fill_(m.params.items[0].tensor, 9.0);

    /* writes cut off in the header, and in the last tensor's data */
    rlim_t limits[2] = {64, (rlim_t)n_old - 5};
    for (int k = 0; k < 2; k++) {
        struct rlimit saved, small;
        getrlimit(RLIMIT_FSIZE, &saved);
        small.rlim_cur = limits[k];
        small.rlim_max = saved.rlim_max;
        void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
        int status = awl_checkpoint_save(path, &m.params, m.opt, NULL);
        setrlimit(RLIMIT_FSIZE, &saved);
        signal(SIGXFSZ, old_handler);
        ck_assert_int_eq(status, AWL_ERR_IO);
        ck_assert_ptr_nonnull(strstr(awl_last_error(), ".tmp."));
        ck_assert(!any_temp_file());
        size_t n_now;
        unsigned char *now = read_all(path, &n_now);
        ck_assert_uint_eq(n_now, n_old);
        ck_assert_mem_eq(now, old, n_old);
        free(now);
    }

    /* the target is a directory: the rename fails, the directory stays */
    const char *as_dir = path_in_dir("a_directory");
    ck_assert_int_eq(mkdir(as_dir, 0755), 0);
    ck_assert_int_eq(awl_checkpoint_save(as_dir, &m.params, m.opt, NULL), AWL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "rename"));
    struct stat st;
    ck_assert_int_eq(stat(as_dir, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert(!any_temp_file());

    /* a directory that does not exist */
    ck_assert_int_eq(awl_checkpoint_save(path_in_dir("no/such/dir/x"), &m.params, NULL, NULL),
                     AWL_ERR_IO);

    /* and a save that works replaces the file */
    ck_assert_int_eq(awl_checkpoint_save(path, &m.params, m.opt, NULL), 0);
    size_t n_now;
    unsigned char *now = read_all(path, &n_now);
    ck_assert(n_now != n_old || memcmp(now, old, n_old) != 0);
    free(now);
    free(old);
    model_free(&m);
}
END_TEST

/* ---- malformed files ---------------------------------------------------------------------- */

/* Writes header + data as a safetensors file (length prefix recomputed). */
static void write_with_header(const char *path, const char *header, const void *data, size_t n)
{
    size_t h = strlen(header);
    unsigned char *buf = malloc(8 + h + n + 1);
    for (int k = 0; k < 8; k++) buf[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(buf + 8, header, h);
    memcpy(buf + 8 + h, data, n);
    write_all(path, buf, 8 + h + n);
    free(buf);
}

/* header with the first occurrence of `from` replaced by `to`. */
static char *replaced(const char *header, const char *from, const char *to)
{
    const char *at = strstr(header, from);
    ck_assert_msg(at != NULL, "'%s' not in the header", from);
    size_t pre = (size_t)(at - header), nf = strlen(from), nt = strlen(to);
    char *s = malloc(strlen(header) - nf + nt + 1);
    memcpy(s, header, pre);
    memcpy(s + pre, to, nt);
    strcpy(s + pre + nt, at + nf);
    return s;
}

/* Loading path into m fails with AWL_ERR_FORMAT naming the file and
 * mentioning `why`, and changes nothing. */
static void expect_rejected(model *m, const char *path, const char *why, const char *label)
{
    size_t n0, n1;
    unsigned char *before = snapshot(m, &n0);
    awl_train_state st = {0};
    awl_clear_error();
    int status = awl_checkpoint_load(path, &m->params, m->opt, &st);
    ck_assert_msg(status == AWL_ERR_FORMAT, "%s: status %d (%s)", label, status, awl_last_error());
    ck_assert_msg(strstr(awl_last_error(), path) && strstr(awl_last_error(), why),
                  "%s: message '%s' lacks '%s'", label, awl_last_error(), why);
    ck_assert_ptr_null(st.tokenizer);
    unsigned char *after = snapshot(m, &n1);
    ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0, "%s: the model changed", label);
    free(before);
    free(after);
}

START_TEST(test_malformed_files_rejected)
{
    model m, target;
    model_init(&m, 11, 2);
    model_init(&target, 12, 1);
    awl_train_state st;
    fill_state(&st);
    const char *good_path = path_in_dir("good.safetensors");
    ck_assert_int_eq(awl_checkpoint_save(good_path, &m.params, m.opt, &st), 0);
    awl_train_state_clear(&st);
    good_file g;
    good_file_read(&g, good_path);
    const char *bad = path_in_dir("bad.safetensors");

    /* truncated anywhere */
    size_t header_end = g.size - g.n_data;
    size_t cuts[] = {
        0, 4, 7, 8, 20, header_end / 2, header_end - 1, header_end, header_end + 1, g.size - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        write_all(bad, g.bytes, cuts[k]);
        char label[32];
        snprintf(label, sizeof label, "truncated at %zu", cuts[k]);
        const char *why = cuts[k] < 8            ? "fewer than the 8-byte"
                          : cuts[k] < header_end ? "exceeds"
                                                 : "data";
        expect_rejected(&target, bad, why, label);
    }

    /* header length larger than the file, and absurdly large */
    unsigned char *copy = malloc(g.size);
    uint64_t lengths[3] = {g.size - 8 + 1, 1ull << 40, ~0ull};
    const char *whys[3] = {"exceeds the", "exceeds the limit", "exceeds the limit"};
    for (int k = 0; k < 3; k++) {
        memcpy(copy, g.bytes, g.size);
        for (int b = 0; b < 8; b++) copy[b] = (unsigned char)(lengths[k] >> (8 * b));
        write_all(bad, copy, g.size);
        expect_rejected(&target, bad, whys[k], "header length");
    }

    /* extra bytes after the data */
    memcpy(copy, g.bytes, g.size);
    FILE *f = fopen(bad, "wb");
    fwrite(g.bytes, 1, g.size, f);
    fwrite("xx", 1, 2, f);
    fclose(f);
    expect_rejected(&target, bad, "cover", "trailing bytes");

    /* a flipped data byte, a flipped CRC digit */
    for (size_t at = 0; at < g.n_data; at += g.n_data / 5) {
        memcpy(copy, g.bytes, g.size);
        copy[header_end + at] ^= 0x10;
        write_all(bad, copy, g.size);
        expect_rejected(&target, bad, "CRC", "flipped data byte");
    }
    free(copy);
    char crc_key[64];
    const char *crc_at = strstr(g.header, "\"crc32.w\":\"") + strlen("\"crc32.w\":\"");
    snprintf(crc_key, sizeof crc_key, "\"crc32.w\":\"%.8s\"", crc_at);

    /* header edits: (from, to, expected words in the message) */
    const char *edits[][3] = {
        {"{\"__metadata__\"", "[\"__metadata__\"", "expected '{'"},
        {"\"dtype\":\"F32\"", "\"dtype\":\"F8\"", "unsupported dtype"},
        {"\"dtype\":\"F32\"", "\"dtype\":\"F16\"", "need 12"},
        {"\"dtype\":\"F32\"", "\"dtype\":\"Q99\"", "unsupported dtype"},
        {"\"dtype\":\"F32\"", "\"dtype\":F32", "expected a string"},
        {"\"shape\":[2,3]", "\"shape\":[3,3]", "need 36"},
        {"\"shape\":[2,3]", "\"shape\":[2,-3]", "negative"},
        {"\"shape\":[2,3]", "\"shape\":[2,3.0]", "fraction"},
        {"\"shape\":[2,3]", "\"shape\":[2,03]", "leading zero"},
        {"\"shape\":[2,3]", "\"shape\":[2,99999999999999999999]", "too large"},
        {"\"shape\":[2,3]", "\"shape\":[2,3,1,1,1,1,1,1,1]", "more than 8"},
        {"\"shape\":[2,3]", "\"shape\":[4611686018427387904,4]", "overflows"},
        {"\"shape\":[2,3]", "\"shape\":[2,3],\"extra\":1", "unknown field"},
        {"\"shape\":[2,3]", "\"shape\":[2,3],\"shape\":[2,3]", "repeated"},
        {",\"shape\":[2,3]", "", "has no shape"},
        {"\"data_offsets\":[0,24]", "\"data_offsets\":[0,24,48]", "more than 2"},
        {"\"data_offsets\":[0,24]", "\"data_offsets\":[24]", "2 integers"},
        {"\"data_offsets\":[0,24]", "\"data_offsets\":[24,0]", "outside"},
        {"\"data_offsets\":[0,24]", "\"data_offsets\":[0,9000024]", "outside"},
        {"\"data_offsets\":[24,36]", "\"data_offsets\":[12,24]", "overlap"},
        {"\"awl.format\"", "\"awl.format\":\"checkpoint\",\"awl.format\"", "twice"},
        {"{\"__metadata__\":{", "{\"__metadata__\":{},\"__metadata__\":{", "twice"},
        {"\"step\":\"1234\"", "\"step\":\"12x4\"", "not an integer"},
        {"\"step\":\"1234\"", "\"step\":\"99999999999999999999\"", "not an integer"},
        {"\"step\":\"1234\"", "\"step\":1234", "expected a string"},
        {"\"awl.format_version\":\"2\"", "\"awl.format_version\":\"3\"", "format_version"},
        {"\"step\":\"1234\"", "\"step\":\"1235\"", "the metadata is corrupt"},
        {"\"extra.note\"", "\"extra.nota\"", "the metadata is corrupt"},
        {"\"optimizer\":\"adamw\"", "\"optimizer\":\"sgd\"", "sgd optimizer state"},
        {"\"optimizer.step.b\":\"2\"", "\"optimizer.stepx.b\":\"2\"",
         "optimizer.step.b is missing"},
        {"\"extra.note\"", "\"extra.no\\u0000te\"", "NUL"},
        {"\"extra.note\"", "\"extra.no\\qte\"", "invalid escape"},
        {"\"extra.note\"", "\"extra.no\xc3\x28te\"", "UTF-8"},
        {"\"extra.note\"", "\"extra.no\\ud800te\"", "surrogate"},
        {"\"extra.note\"", "\"extra.no\nte\"", "control character"},
        {crc_key, "\"crc32.w\":\"0000000g\"", "hex digits"},
        {crc_key, "\"crc32.w\":\"00000000\"", "CRC"},
        {"\"crc32.b\"", "\"crc32.nobody\"", "names no tensor"},
        {"\"crc32.b\"", "\"crc32x.b\"", "has no crc32"},
    };
    for (size_t k = 0; k < sizeof edits / sizeof *edits; k++) {
        char *h = replaced(g.header, edits[k][0], edits[k][1]);
        write_with_header(bad, h, g.data, g.n_data);
        free(h);
        expect_rejected(&target, bad, edits[k][2], edits[k][1]);
    }
    char *h = malloc(strlen(g.header) + 4);
    sprintf(h, "%s,", g.header); /* a trailing comma after the object */
    write_with_header(bad, h, g.data, g.n_data);
    expect_rejected(&target, bad, "after the header", "trailing comma");
    strcpy(h, g.header);
    h[strlen(h) - 1] = '\0'; /* the closing brace missing */
    write_with_header(bad, h, g.data, g.n_data);
    expect_rejected(&target, bad, "unexpected end", "unclosed object");
    free(h);

    /* the file is fine but does not fit the model */
    model other;
    memset(&other, 0, sizeof other);
    awl_tensor *w_t = awl_requires_grad_(awl_zeros(AWL_SHAPE(3, 2), AWL_F32, "cpu"), true);
    awl_tensor *b_f64 = awl_requires_grad_(awl_zeros(AWL_SHAPE(3), AWL_F64, "cpu"), true);
    awl_tensor *h_ok = awl_requires_grad_(awl_zeros(AWL_SHAPE(2, 2), AWL_F64, "cpu"), true);
    awl_tensor *x = awl_requires_grad_(awl_zeros(AWL_SHAPE(1), AWL_F32, "cpu"), true);
    awl_param_list_add(&other.params, "w", w_t);
    awl_param_list_add(&other.params, "b", target.params.items[1].tensor);
    awl_param_list_add(&other.params, "h", h_ok);
    other.opt = awl_adamw_new(&other.params, 0.1, 0.9, 0.95, 1e-8, 0);
    expect_rejected(&other, good_path, "tensor w is float32 (2,3) in the file but float32 (3,2)",
                    "wrong shape");
    awl_optimizer_free(other.opt);
    awl_param_list_clear(&other.params);
    awl_param_list_add(&other.params, "w", target.params.items[0].tensor);
    awl_param_list_add(&other.params, "b", b_f64);
    awl_param_list_add(&other.params, "h", h_ok);
    other.opt = awl_adamw_new(&other.params, 0.1, 0.9, 0.95, 1e-8, 0);
    expect_rejected(&other, good_path, "float32 (3) in the file but float64 (3)", "wrong dtype");
    awl_optimizer_free(other.opt);
    awl_param_list_clear(&other.params);
    for (int i = 0; i < 3; i++)
        awl_param_list_add(&other.params, target.params.items[i].name,
                           target.params.items[i].tensor);
    awl_param_list_add(&other.params, "x", x);
    other.opt = awl_adamw_new(&other.params, 0.1, 0.9, 0.95, 1e-8, 0);
    expect_rejected(&other, good_path, "missing tensor x", "missing tensor");
    awl_optimizer_free(other.opt);
    awl_param_list_clear(&other.params);
    for (int i = 0; i < 2; i++)
        awl_param_list_add(&other.params, target.params.items[i].name,
                           target.params.items[i].tensor);
    other.opt = awl_adamw_new(&other.params, 0.1, 0.9, 0.95, 1e-8, 0);
    expect_rejected(&other, good_path, "unexpected tensor h", "unexpected tensor");
    awl_optimizer_free(other.opt);
    awl_param_list_add(&other.params, "h", h_ok);
    other.opt = awl_sgd_new(&other.params, 0.1, 0.9, 0);
    expect_rejected(&other, good_path, "holds adamw optimizer state, not sgd", "optimizer kind");
    awl_optimizer_free(other.opt);
    awl_param_list_clear(&other.params);
    awl_release(w_t);
    awl_release(b_f64);
    awl_release(h_ok);
    awl_release(x);

    /* not a regular file / missing: I/O errors, not format errors */
    ck_assert_int_eq(awl_checkpoint_load(dir, &target.params, target.opt, NULL), AWL_ERR_IO);
    ck_assert_int_eq(awl_checkpoint_load(path_in_dir("missing"), &target.params, target.opt, NULL),
                     AWL_ERR_IO);

    /* and after all that, the good file still loads */
    ck_assert_int_eq(awl_checkpoint_load(good_path, &target.params, target.opt, NULL), 0);
    size_t n0, n1;
    unsigned char *s0 = snapshot(&m, &n0), *s1 = snapshot(&target, &n1);
    ck_assert_mem_eq(s0, s1, n0);
    free(s0);
    free(s1);
    free(g.header);
    free(g.bytes);
    model_free(&m);
    model_free(&target);
}
END_TEST

START_TEST(test_foreign_file)
{
    /* as another tool writes it: no awl metadata, no CRCs, tensors in an
     * order other than the data's, \u escapes in strings */
    const char *header = "{\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,36]},"
                         "\"__metadata__\":{\"format\":\"pt\",\"s\":\"\\u00e9\\ud83d\\ude00\"},"
                         "\"w\":{\"data_offsets\":[0,24],\"shape\":[2,3],\"dtype\":\"F32\"}}   ";
    float data[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const char *path = path_in_dir("foreign.safetensors");
    write_with_header(path, header, data, sizeof data);
    awl_safetensors *f = awl_safetensors_open(path);
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(awl_safetensors_metadata_get(f, "s"), "\xc3\xa9\xf0\x9f\x98\x80");
    awl_safetensors_info info;
    awl_safetensors_info_at(f, awl_safetensors_find(f, "b"), &info);
    ck_assert(!info.has_crc);
    awl_safetensors_close(f);

    awl_param_list params = {0};
    awl_tensor *w = awl_zeros(AWL_SHAPE(2, 3), AWL_F32, "cpu");
    awl_tensor *b = awl_zeros(AWL_SHAPE(3), AWL_F32, "cpu");
    awl_param_list_add(&params, "w", w);
    awl_param_list_add(&params, "b", b);
    awl_train_state st = {0};
    ck_assert_int_eq(awl_checkpoint_load(path, &params, NULL, &st), 0);
    float got[3];
    awl_to_host(b, got, sizeof got);
    ck_assert_mem_eq(got, data + 6, sizeof got);
    ck_assert_int_eq(st.step, 0);
    ck_assert_ptr_null(st.tokenizer);
    awl_release(w);
    awl_release(b);
    awl_param_list_clear(&params);
}
END_TEST

/* What train_gpt relies on besides the format: a non-finite tensor is never
 * saved, a killed save's temporary file goes away with the next save, and
 * PyTorch's float16 reads as float32. */
START_TEST(test_non_finite_stale_and_float16)
{
    model m;
    model_init(&m, 21, 1);
    const char *path = path_in_dir("finite.safetensors");
    ck_assert_int_eq(awl_checkpoint_save(path, &m.params, m.opt, NULL), 0);
    size_t n0;
    unsigned char *before = read_all(path, &n0);
    awl_tensor *b = m.params.items[1].tensor;
    float values[3];
    ck_assert_int_eq(awl_to_host(b, values, sizeof values), 0);
    values[2] = NAN;
    awl_scope_begin();
    ck_assert_int_eq(awl_tensor_copy_(b, awl_from_data(values, AWL_SHAPE(3), AWL_F32, "cpu")), 0);
    awl_scope_end();
    double bad = 0;
    ck_assert_int_eq(awl_tensor_first_non_finite(b, &bad), 2);
    ck_assert(isnan(bad));
    ck_assert_int_eq(awl_tensor_first_non_finite(m.params.items[0].tensor, &bad), -1);
    ck_assert_int_eq(awl_checkpoint_save(path, &m.params, m.opt, NULL), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "tensor b holds NaN at element 2"));
    size_t n1;
    unsigned char *after = read_all(path, &n1);
    ck_assert_uint_eq(n0, n1);
    ck_assert_mem_eq(before, after, n0); /* nothing written */
    free(after);

    /* a dead process's temporary file is removed, a live one's kept */
    char stale[4200], live[4200];
    snprintf(stale, sizeof stale, "%s.tmp.99999999", path);
    snprintf(live, sizeof live, "%s.tmp.%ld", path, (long)getppid());
    write_all(stale, "x", 1);
    write_all(live, "x", 1);
    ck_assert_int_eq(awl_safetensors_save(path, 0, NULL, NULL, 0, NULL, NULL), 0);
    ck_assert_int_eq(access(stale, F_OK), -1);
    ck_assert_int_eq(access(live, F_OK), 0);
    unlink(live);

    /* float16 from memory: 1, -2, 0.5, the smallest subnormal, inf */
    const char header[] = "{\"h\":{\"dtype\":\"F16\",\"shape\":[5],\"data_offsets\":[0,10]}}";
    size_t hlen = sizeof header - 1;
    unsigned char file[128] = {0};
    file[0] = (unsigned char)hlen;
    memcpy(file + 8, header, hlen);
    uint16_t halves[5] = {0x3c00, 0xc000, 0x3800, 0x0001, 0x7c00};
    memcpy(file + 8 + hlen, halves, sizeof halves);
    awl_safetensors *f = awl_safetensors_open_memory(file, 8 + hlen + sizeof halves, "mem");
    ck_assert_ptr_nonnull(f);
    awl_safetensors_info info;
    ck_assert_int_eq(awl_safetensors_info_at(f, 0, &info), 0);
    ck_assert(info.float16);
    ck_assert_int_eq(info.dtype, AWL_F32);
    awl_scope_begin();
    float got[5];
    ck_assert_int_eq(awl_to_host(awl_safetensors_load(f, 0, "cpu"), got, sizeof got), 0);
    awl_scope_end();
    ck_assert(got[0] == 1.0f && got[1] == -2.0f && got[2] == 0.5f);
    ck_assert(got[3] == ldexpf(1.0f, -24) && isinf(got[4]));
    awl_safetensors_close(f);
    ck_assert_ptr_null(awl_safetensors_open_memory(file, 8 + hlen + 9, "mem"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "mem"));
    free(before);
    model_free(&m);
}
END_TEST

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_checkpoint_round_trip);
    tcase_add_test(tc, test_generic_reader_and_dtypes);
    tcase_add_test(tc, test_file_layout);
    tcase_add_test(tc, test_failed_save_keeps_old_file);
    tcase_add_test(tc, test_malformed_files_rejected);
    tcase_add_test(tc, test_foreign_file);
    tcase_add_test(tc, test_non_finite_stale_and_float16);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(safetensors_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
