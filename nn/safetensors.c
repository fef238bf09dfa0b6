/*
 * nn/safetensors.c - safetensors files: the crash-safe writer and the
 * validating reader (see safetensors.h; the JSON lives in
 * safetensors_json.c).
 *
 * Writing in one pass. The header must carry each tensor's CRC, which is
 * known only after its bytes have been produced, and the header precedes
 * the data. A CRC is always 8 hex digits, though, so the header's length
 * does not depend on the CRC values: the writer emits the header with
 * "00000000" placeholders, streams each tensor (copied to the host one at a
 * time, so the extra memory is one tensor, not the model), then rewrites
 * the header in place with the real CRCs.
 *
 * Reading through mmap. The whole file is mapped read-only, so validating
 * every CRC before anything is used costs no second copy of a large
 * checkpoint in host memory, and the loader can copy each tensor straight
 * from the mapping to its device. The header length is checked against the
 * file size before anything is allocated for it.
 *
 * All offsets are checked in unsigned 64-bit arithmetic with explicit
 * overflow tests; a tensor's byte length comes from its shape and dtype
 * and must equal end - begin; sorted by offset, the tensors must tile the
 * data section exactly (as the reference implementation requires), which
 * rules out overlaps, gaps and trailing bytes in one test.
 */
#include "nn/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "nn/safetensors_internal.h"
#include "common/alloc.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "awl's safetensors code assumes a little-endian host"
#endif

const char *awl_safetensors_dtype_name(awl_dtype dtype)
{
    switch (dtype) {
    case AWL_F32: return "F32";
    case AWL_F64: return "F64";
    case AWL_I32: return "I32";
    case AWL_BF16: return "BF16";
    default: return NULL;
    }
}

/* zlib's crc32 takes a uInt length: feed large buffers in pieces. */
static uint32_t crc_of(const void *data, uint64_t n)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    const Bytef *p = data;
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

/* ---- writing ------------------------------------------------------------------------- */

static int io_error(const char *path, const char *what)
{
    return awl_error(AWL_ERR_IO, "awl_safetensors_save: %s: %s: %s", path, what, strerror(errno));
}

/* write() until everything is out (it may write less, or be interrupted). */
static int write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int pwrite_all(int fd, const void *data, size_t n, off_t at)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        at += w;
        n -= (size_t)w;
    }
    return 0;
}

static int check_save_args(int n, const char *const *names, awl_tensor *const *tensors, int n_meta,
                           const char *const *keys, const char *const *values)
{
    const char *op = "awl_safetensors_save";
    if (n < 0 || n_meta < 0 || (n > 0 && (!names || !tensors)) ||
        (n_meta > 0 && (!keys || !values)))
        return awl_error(AWL_ERR_INVALID, "%s: bad counts or NULL arrays", op);
    for (int i = 0; i < n; i++) {
        if (!tensors[i] || !names[i])
            return awl_error(AWL_ERR_INVALID, "%s: tensor %d or its name is NULL", op, i);
        if (!awl_st_utf8_valid(names[i], strlen(names[i])) || strcmp(names[i], "__metadata__") == 0)
            return awl_error(AWL_ERR_INVALID, "%s: invalid tensor name \"%s\"", op, names[i]);
        if (!awl_safetensors_dtype_name(tensors[i]->dtype))
            return awl_error(AWL_ERR_INVALID, "%s: tensor %s has an unsupported dtype", op,
                             names[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return awl_error(AWL_ERR_INVALID, "%s: tensor name %s given twice", op, names[i]);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!keys[i] || !values[i])
            return awl_error(AWL_ERR_INVALID, "%s: metadata entry %d is NULL", op, i);
        if (!awl_st_utf8_valid(keys[i], strlen(keys[i])) ||
            !awl_st_utf8_valid(values[i], strlen(values[i])) || strncmp(keys[i], "crc32.", 6) == 0)
            return awl_error(AWL_ERR_INVALID,
                             "%s: invalid metadata key \"%s\" (keys and values must be UTF-8; "
                             "crc32.* keys are reserved)",
                             op, keys[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(keys[i], keys[j]) == 0)
                return awl_error(AWL_ERR_INVALID, "%s: metadata key %s given twice", op, keys[i]);
    }
    return AWL_OK;
}

/* The header with CRC placeholders; crc_at[i] is where tensor i's 8 digits
 * start. Padded with spaces so the data section starts 8-byte aligned. */
static void build_header(awl_st_buf *h, int n, const char *const *names, awl_tensor *const *tensors,
                         int n_meta, const char *const *keys, const char *const *values,
                         size_t *crc_at)
{
    awl_st_buf_append(h, "{\"__metadata__\":{", 17);
    for (int i = 0; i < n_meta; i++) {
        if (i > 0) awl_st_buf_append(h, ",", 1);
        awl_st_buf_string(h, keys[i]);
        awl_st_buf_append(h, ":", 1);
        awl_st_buf_string(h, values[i]);
    }
    for (int i = 0; i < n; i++) {
        if (i > 0 || n_meta > 0) awl_st_buf_append(h, ",", 1);
        char *key = awl_xmalloc(strlen(names[i]) + 7);
        strcpy(key, "crc32.");
        strcat(key, names[i]);
        awl_st_buf_string(h, key);
        free(key);
        awl_st_buf_append(h, ":\"", 2);
        crc_at[i] = h->len;
        awl_st_buf_append(h, "00000000\"", 9);
    }
    awl_st_buf_append(h, "}", 1);
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const awl_tensor *t = tensors[i];
        uint64_t nbytes = (uint64_t)awl_numel(t) * awl_dtype_size(t->dtype);
        awl_st_buf_append(h, ",", 1);
        awl_st_buf_string(h, names[i]);
        awl_st_buf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[",
                          awl_safetensors_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            awl_st_buf_printf(h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        awl_st_buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                          (unsigned long long)(offset + nbytes));
        offset += nbytes;
    }
    awl_st_buf_append(h, "}", 1);
    while ((8 + h->len) % 8 != 0) awl_st_buf_append(h, " ", 1);
}

/* Writes the whole file to fd: header, data, real CRCs, fsync. Returns 0;
 * SYSTEM_ERROR with errno set and *what naming the step; or a negative awl
 * status (message recorded) when a tensor could not be read back. */
#define SYSTEM_ERROR 1

static int write_file(int fd, awl_st_buf *h, const size_t *crc_at, int n,
                      awl_tensor *const *tensors, const char **what)
{
    unsigned char len_le[8];
    uint64_t hlen = h->len;
    for (int k = 0; k < 8; k++) len_le[k] = (unsigned char)(hlen >> (8 * k));
    *what = "writing";
    if (write_all(fd, len_le, 8) < 0 || write_all(fd, h->data, h->len) < 0) return SYSTEM_ERROR;
    for (int i = 0; i < n; i++) {
        size_t nbytes = (size_t)awl_numel(tensors[i]) * awl_dtype_size(tensors[i]->dtype);
        void *host = awl_xmalloc(nbytes ? nbytes : 1);
        int status = awl_to_host(tensors[i], host, nbytes);
        if (status < 0) {
            free(host);
            return status;
        }
        char digits[9];
        snprintf(digits, sizeof digits, "%08x", (unsigned)crc_of(host, nbytes));
        memcpy(h->data + crc_at[i], digits, 8);
        int w = write_all(fd, host, nbytes);
        free(host);
        if (w < 0) return SYSTEM_ERROR;
    }
    if (pwrite_all(fd, h->data, h->len, 8) < 0) return SYSTEM_ERROR;
    *what = "syncing";
    return fsync(fd) < 0 ? SYSTEM_ERROR : 0;
}

/* fsync on the directory holding path, so the rename itself is durable. */
static int sync_directory(const char *path)
{
    char *copy = awl_xmalloc(strlen(path) + 1);
    strcpy(copy, path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0) return -1;
    int status = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return status;
}

/* Removes "<path>.tmp.<pid>" files left by saves whose process is gone
 * (killed mid-save). A live process's file is its save in progress. */
static void remove_stale_temporaries(const char *path)
{
    char *copy = awl_xmalloc(strlen(path) + 1), *copy2 = awl_xmalloc(strlen(path) + 1);
    strcpy(copy, path);
    strcpy(copy2, path);
    const char *dir_name = dirname(copy), *base = basename(copy2);
    size_t base_len = strlen(base);
    DIR *dir = opendir(dir_name);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        const char *name = e->d_name;
        if (strncmp(name, base, base_len) != 0 || strncmp(name + base_len, ".tmp.", 5) != 0)
            continue;
        const char *digits = name + base_len + 5;
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (*digits < '1' || *digits > '9' || *end || errno || pid <= 0 || pid > INT_MAX ||
            pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        size_t size = strlen(dir_name) + strlen(name) + 2;
        char *full = awl_xmalloc(size);
        snprintf(full, size, "%s/%s", dir_name, name);
        unlink(full);
        free(full);
    }
    if (dir) closedir(dir);
    free(copy);
    free(copy2);
}

int awl_safetensors_save(const char *path, int n, const char *const *names,
                         awl_tensor *const *tensors, int n_meta, const char *const *keys,
                         const char *const *values)
{
    if (!path) return AWL_ERR_INVALID;
    if (check_save_args(n, names, tensors, n_meta, keys, values) < 0) return AWL_ERR_INVALID;

    awl_st_buf header = {0};
    size_t *crc_at = awl_xcalloc((size_t)n + 1, sizeof *crc_at);
    build_header(&header, n, names, tensors, n_meta, keys, values, crc_at);

    remove_stale_temporaries(path);
    size_t tmp_size = strlen(path) + 32;
    char *tmp = awl_xmalloc(tmp_size);
    snprintf(tmp, tmp_size, "%s.tmp.%ld", path, (long)getpid());
    int status = AWL_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        status = io_error(tmp, "cannot create the temporary file");
    } else {
        const char *what = "writing";
        int w = write_file(fd, &header, crc_at, n, tensors, &what);
        if (w == SYSTEM_ERROR)
            status = io_error(tmp, what);
        else if (w < 0)
            status = w;
        if (close(fd) < 0 && status == AWL_OK) status = io_error(tmp, "closing");
        if (status == AWL_OK && rename(tmp, path) < 0)
            status = io_error(path, "cannot rename the temporary file over it");
        if (status < 0)
            unlink(tmp);
        else if (sync_directory(path) < 0)
            status = io_error(path, "syncing its directory");
    }
    free(tmp);
    free(crc_at);
    awl_st_buf_free(&header);
    return status;
}

/* ---- reading --------------------------------------------------------------------------- */

/* IEEE binary16 -> binary32, exactly (every half is a float): subnormals
 * are normalised, infinities and NaNs keep their payload's top bits. */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | mant << 13;
    } else if (exp != 0) {
        bits = sign | (exp + 112) << 23 | mant << 13;
    } else if (mant == 0) {
        bits = sign;
    } else {
        int shift = 0;
        while (!(mant & 0x400)) {
            mant <<= 1;
            shift++;
        }
        bits = sign | (uint32_t)(113 - shift) << 23 | (mant & 0x3ff) << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

struct awl_safetensors {
    char *path;
    unsigned char *map; /* the whole file, read-only */
    size_t size;
    bool mapped;               /* map is an mmap of the file (else borrowed memory) */
    const unsigned char *data; /* the data section */
    awl_st_header h;
    int *by_name;  /* tensor indices sorted by name, for find */
    bool *has_crc; /* per tensor */
};

static int format_error(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int format_error(const char *path, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return awl_error(AWL_ERR_FORMAT, "awl_safetensors_open: %s: %s", path, what);
}

/* Byte length of a tensor from its shape, or false on overflow. */
static bool tensor_bytes(const awl_st_tensor *t, uint64_t *out)
{
    uint64_t n = t->float16 ? 2 : awl_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        if (__builtin_mul_overflow(n, (uint64_t)t->shape[d], &n)) return false;
    *out = n;
    return true;
}

/* qsort has no context argument, so the comparators find the entries
 * through this (per-thread) pointer. */
static _Thread_local const awl_st_tensor *sort_base;

static int by_offset(const void *a, const void *b)
{
    const awl_st_tensor *x = &sort_base[*(const int *)a], *y = &sort_base[*(const int *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(sort_base[*(const int *)a].name, sort_base[*(const int *)b].name);
}

/* The tensor indices 0..n-1 sorted with cmp (malloc'd). */
static int *sorted_indices(const awl_st_header *h, int (*cmp)(const void *, const void *))
{
    int *idx = awl_xmalloc(((size_t)h->n_tensors + 1) * sizeof *idx);
    for (int i = 0; i < h->n_tensors; i++) idx[i] = i;
    sort_base = h->tensors;
    qsort(idx, (size_t)h->n_tensors, sizeof *idx, cmp);
    return idx;
}

/* Every entry's length matches its shape and the entries tile the data
 * section [0, data_len) exactly. */
static int check_layout(const awl_safetensors *f, uint64_t data_len)
{
    const awl_st_header *h = &f->h;
    for (int i = 0; i < h->n_tensors; i++) {
        const awl_st_tensor *t = &h->tensors[i];
        uint64_t nbytes;
        if (!tensor_bytes(t, &nbytes))
            return format_error(f->path, "tensor %s: shape overflows", t->name);
        if (t->begin > t->end || t->end > data_len)
            return format_error(f->path,
                                "tensor %s: data_offsets [%llu, %llu] outside the data section "
                                "of %llu bytes",
                                t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                                (unsigned long long)data_len);
        if (t->end - t->begin != nbytes)
            return format_error(f->path,
                                "tensor %s: %llu bytes at [%llu, %llu] but its shape and dtype "
                                "need %llu",
                                t->name, (unsigned long long)(t->end - t->begin),
                                (unsigned long long)t->begin, (unsigned long long)t->end,
                                (unsigned long long)nbytes);
    }
    int *order = sorted_indices(h, by_offset);
    uint64_t expected = 0;
    int status = AWL_OK;
    for (int k = 0; k < h->n_tensors && status == AWL_OK; k++) {
        const awl_st_tensor *t = &h->tensors[order[k]];
        if (t->begin != expected)
            status =
                format_error(f->path,
                             "tensor %s starts at %llu, expected %llu (tensors overlap or "
                             "leave a gap)",
                             t->name, (unsigned long long)t->begin, (unsigned long long)expected);
        expected = t->end;
    }
    free(order);
    if (status == AWL_OK && expected != data_len)
        status = format_error(f->path, "the data section has %llu bytes but the tensors cover %llu",
                              (unsigned long long)data_len, (unsigned long long)expected);
    return status;
}

/* "crc32.<name>" entries: well-formed, naming a tensor, and matching. */
static int check_crcs(awl_safetensors *f)
{
    for (int m = 0; m < f->h.n_meta; m++) {
        const char *key = f->h.keys[m], *value = f->h.values[m];
        if (strncmp(key, "crc32.", 6) != 0) continue;
        int i = awl_safetensors_find(f, key + 6);
        if (i < 0) return format_error(f->path, "metadata %s names no tensor", key);
        unsigned long want = 0;
        bool ok = strlen(value) == 8;
        for (int k = 0; ok && k < 8; k++) {
            char c = value[k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            ok = d >= 0;
            want = want * 16 + (unsigned long)d;
        }
        if (!ok)
            return format_error(f->path, "metadata %s = \"%.40s\" is not 8 lowercase hex digits",
                                key, value);
        const awl_st_tensor *t = &f->h.tensors[i];
        uint32_t have = crc_of(f->data + t->begin, t->end - t->begin);
        if (have != want)
            return format_error(f->path, "tensor %s is corrupt: CRC-32 %08x, the header says %s",
                                t->name, (unsigned)have, value);
        f->has_crc[i] = true;
    }
    return AWL_OK;
}

/* Checks the 8-byte length le[] against the size of the file. */
static int check_header_length(const char *path, const unsigned char *le, size_t size,
                               uint64_t *header_len)
{
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = (n << 8) | le[k];
    if (n > AWL_SAFETENSORS_MAX_HEADER)
        return format_error(path, "header length %llu exceeds the limit of %llu bytes",
                            (unsigned long long)n, AWL_SAFETENSORS_MAX_HEADER);
    if (n > size - 8)
        return format_error(path, "header length %llu exceeds the %zu bytes after it in the file",
                            (unsigned long long)n, size - 8);
    if (n < 2)
        return format_error(path, "header length %llu is too short for a JSON object",
                            (unsigned long long)n);
    *header_len = n;
    return AWL_OK;
}

static int too_short(const char *path, size_t size)
{
    return format_error(path, "the file has %zu bytes, fewer than the 8-byte header length", size);
}

/* Reads the 8-byte length and checks it against the file before mapping. */
static int check_sizes(const char *path, int fd, size_t size, uint64_t *header_len)
{
    if (size < 8) return too_short(path, size);
    unsigned char le[8];
    ssize_t r;
    do r = pread(fd, le, 8, 0);
    while (r < 0 && errno == EINTR);
    if (r != 8)
        return awl_error(AWL_ERR_IO, "awl_safetensors_open: %s: cannot read: %s", path,
                         r < 0 ? strerror(errno) : "short read");
    return check_header_length(path, le, size, header_len);
}

static int check_contents(awl_safetensors *f, uint64_t hlen);

static int open_checked(awl_safetensors *f)
{
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return awl_error(AWL_ERR_IO, "awl_safetensors_open: %s: %s", f->path, strerror(errno));
    struct stat st;
    int status = AWL_OK;
    uint64_t hlen = 0;
    if (fstat(fd, &st) < 0)
        status = awl_error(AWL_ERR_IO, "awl_safetensors_open: %s: %s", f->path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        status = awl_error(AWL_ERR_IO, "awl_safetensors_open: %s: not a regular file", f->path);
    else
        status = check_sizes(f->path, fd, (size_t)st.st_size, &hlen);
    if (status == AWL_OK) {
        f->size = (size_t)st.st_size;
        void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            status = awl_error(AWL_ERR_IO, "awl_safetensors_open: %s: mmap: %s", f->path,
                               strerror(errno));
        else
            f->map = map;
        f->mapped = f->map != NULL;
    }
    close(fd);
    return status < 0 ? status : check_contents(f, hlen);
}

/* The header and data of f->map[0..size), whose length field said hlen. */
static int check_contents(awl_safetensors *f, uint64_t hlen)
{
    char err[512];
    if (awl_st_header_parse((const char *)f->map + 8, hlen, &f->h, err, sizeof err) < 0)
        return format_error(f->path, "invalid header: %s", err);
    f->data = f->map + 8 + hlen;
    f->by_name = sorted_indices(&f->h, by_name);
    f->has_crc = awl_xcalloc((size_t)f->h.n_tensors + 1, sizeof *f->has_crc);
    int status = check_layout(f, f->size - 8 - hlen);
    return status < 0 ? status : check_crcs(f);
}

static awl_safetensors *new_file(const char *path)
{
    awl_safetensors *f = awl_xcalloc(1, sizeof *f);
    f->path = awl_xmalloc(strlen(path) + 1);
    strcpy(f->path, path);
    return f;
}

awl_safetensors *awl_safetensors_open(const char *path)
{
    if (!path) return NULL;
    awl_safetensors *f = new_file(path);
    if (open_checked(f) < 0) {
        awl_safetensors_close(f);
        return NULL;
    }
    return f;
}

awl_safetensors *awl_safetensors_open_memory(const void *data, size_t size, const char *name)
{
    if (!data && size > 0) return NULL;
    awl_safetensors *f = new_file(name ? name : "(memory)");
    f->map = (unsigned char *)data;
    f->size = size;
    uint64_t hlen = 0;
    int status =
        size < 8 ? too_short(f->path, size) : check_header_length(f->path, data, size, &hlen);
    if (status < 0 || check_contents(f, hlen) < 0) {
        awl_safetensors_close(f);
        return NULL;
    }
    return f;
}

void awl_safetensors_close(awl_safetensors *f)
{
    if (!f) return;
    if (f->map && f->mapped) munmap(f->map, f->size);
    awl_st_header_clear(&f->h);
    free(f->by_name);
    free(f->has_crc);
    free(f->path);
    free(f);
}

const char *awl_safetensors_path(const awl_safetensors *f) { return f ? f->path : NULL; }

int awl_safetensors_count(const awl_safetensors *f) { return f ? f->h.n_tensors : -1; }

int awl_safetensors_find(const awl_safetensors *f, const char *name)
{
    if (!f || !name) return -1;
    int lo = 0, hi = f->h.n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->h.tensors[f->by_name[mid]].name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

int awl_safetensors_info_at(const awl_safetensors *f, int i, awl_safetensors_info *out)
{
    if (!f || !out) return AWL_ERR_INVALID;
    if (i < 0 || i >= f->h.n_tensors)
        return awl_error(AWL_ERR_INVALID, "awl_safetensors_info_at: index %d of %d tensors", i,
                         f->h.n_tensors);
    const awl_st_tensor *t = &f->h.tensors[i];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->begin = t->begin;
    out->end = t->end;
    out->has_crc = f->has_crc[i];
    out->float16 = t->float16;
    return AWL_OK;
}

const void *awl_safetensors_data(const awl_safetensors *f, int i)
{
    if (!f || i < 0 || i >= f->h.n_tensors) return NULL;
    return f->data + f->h.tensors[i].begin;
}

awl_tensor *awl_safetensors_load(const awl_safetensors *f, int i, const char *device)
{
    if (!f) return NULL;
    if (i < 0 || i >= f->h.n_tensors) {
        awl_error(AWL_ERR_INVALID, "awl_safetensors_load: index %d of %d tensors", i,
                  f->h.n_tensors);
        return NULL;
    }
    const awl_st_tensor *t = &f->h.tensors[i];
    if (!t->float16) return awl_from_data(f->data + t->begin, t->ndim, t->shape, t->dtype, device);
    size_t n = (size_t)(t->end - t->begin) / 2;
    float *host = awl_xmalloc((n ? n : 1) * sizeof *host);
    const unsigned char *src = f->data + t->begin;
    for (size_t k = 0; k < n; k++)
        host[k] = half_to_float((uint16_t)(src[2 * k] | src[2 * k + 1] << 8));
    awl_tensor *out = awl_from_data(host, t->ndim, t->shape, AWL_F32, device);
    free(host);
    return out;
}

int awl_safetensors_metadata_count(const awl_safetensors *f) { return f ? f->h.n_meta : -1; }

const char *awl_safetensors_metadata_key(const awl_safetensors *f, int i)
{
    return f && i >= 0 && i < f->h.n_meta ? f->h.keys[i] : NULL;
}

const char *awl_safetensors_metadata_value(const awl_safetensors *f, int i)
{
    return f && i >= 0 && i < f->h.n_meta ? f->h.values[i] : NULL;
}

const char *awl_safetensors_metadata_get(const awl_safetensors *f, const char *key)
{
    for (int i = 0; f && key && i < f->h.n_meta; i++)
        if (strcmp(f->h.keys[i], key) == 0) return f->h.values[i];
    return NULL;
}
