/*
 * data/corpus.c - reading a training corpus: UTF-8 text from a file, a gzip
 * file or a directory of files.
 *
 * A corpus is what a user points a trainer at, so it is checked as text
 * before anything is trained on it: a binary file (a model, an archive, the
 * index files beside Debian's fortunes) given by mistake must be refused
 * with its name and the offending offset, not tokenised into a vocabulary
 * of 256 "characters". Text means well-formed UTF-8 (common/utf8.h) without
 * NUL bytes.
 *
 * A file is read whole with read(2), then inflated in memory when it starts
 * with gzip's magic bytes: the check and the inflation work on bytes, so the
 * same code serves files and the fuzzer (tests/fuzz/). Concatenated gzip
 * members are one stream (as gzip -d reads them); anything else after a
 * member, or a member cut short, is an error rather than a silently shorter
 * corpus.
 *
 * A directory contributes its regular files in name order (so two machines
 * read the same corpus), skipping dot files, links and "*.dat" files: that
 * is exactly the text of Debian's fortunes package, whose directory holds
 * each text file, its binary index (.dat) and a link (.u8).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/utf8.h"
#include "data/data.h"

static const char *const OP = "awl_corpus_read";

/* A growable byte buffer; every failure is an allocation failure. */
typedef struct bytes {
    char *data;
    size_t len, cap;
} bytes;

static int reserve(bytes *b, size_t extra, const char *name)
{
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2) return awl_error(AWL_ERR_OOM, "%s: %s: too large", OP, name);
        cap *= 2;
    }
    char *grown = realloc(b->data, cap);
    if (!grown) return awl_error(AWL_ERR_OOM, "%s: %s: out of memory (%zu bytes)", OP, name, cap);
    b->data = grown;
    b->cap = cap;
    return 0;
}

/* Inflates the gzip members in[0..n) onto out. */
static int gunzip(const unsigned char *in, size_t n, const char *name, bytes *out)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        return awl_error(AWL_ERR_OOM, "%s: %s: cannot start zlib", OP, name);
    int rc = 0;
    size_t fed = 0; /* bytes of `in` handed to zlib so far */
    while (rc == 0) {
        if (z.avail_in == 0 && fed < n) {
            z.next_in = (Bytef *)(in + fed);
            z.avail_in = (uInt)(n - fed < (1u << 30) ? n - fed : (1u << 30));
            fed += z.avail_in;
        }
        if ((rc = reserve(out, 1 << 16, name)) != 0) break;
        size_t room = out->cap - out->len - 1;
        z.next_out = (Bytef *)out->data + out->len;
        z.avail_out = (uInt)(room < (1u << 30) ? room : (1u << 30));
        uInt before = z.avail_out;
        int zs = inflate(&z, Z_NO_FLUSH);
        out->len += before - z.avail_out;
        if (zs == Z_STREAM_END) {
            size_t used = fed - z.avail_in;
            if (used == n) break;
            /* another member may follow; anything else is not gzip */
            if (n - used < 2 || in[used] != 0x1f || in[used + 1] != 0x8b)
                rc = awl_error(AWL_ERR_FORMAT, "%s: %s: %zu bytes after the end of the gzip stream",
                               OP, name, n - used);
            else
                inflateReset(&z);
        } else if (zs == Z_BUF_ERROR) {
            /* output room is always there: zlib wants input */
            if (z.avail_in == 0 && fed == n)
                rc = awl_error(AWL_ERR_FORMAT, "%s: %s is a truncated gzip file", OP, name);
        } else if (zs != Z_OK) {
            rc = awl_error(AWL_ERR_FORMAT, "%s: %s is not valid gzip: %s", OP, name,
                           z.msg ? z.msg : "corrupt data");
        }
    }
    inflateEnd(&z);
    return rc;
}

/* UTF-8 text without NUL, or AWL_ERR_FORMAT naming the first bad byte. */
static int check_text(const char *text, size_t len, const char *name)
{
    if (len == 0) return awl_error(AWL_ERR_INVALID, "%s: %s is empty", OP, name);
    const char *nul = memchr(text, '\0', len);
    size_t bad = awl_utf8_first_invalid(text, nul ? (size_t)(nul - text) : len);
    if (nul && bad == (size_t)(nul - text))
        return awl_error(AWL_ERR_FORMAT,
                         "%s: %s holds a NUL byte at offset %zu: a corpus must be UTF-8 text, "
                         "not a binary file",
                         OP, name, bad);
    if (bad < len)
        return awl_error(AWL_ERR_FORMAT,
                         "%s: %s: byte 0x%02x at offset %zu is not valid UTF-8: a corpus must be "
                         "UTF-8 text",
                         OP, name, (unsigned char)text[bad], bad);
    return 0;
}

/* Appends one file's corpus text (inflated, checked) to out. */
static int append_bytes(const void *data, size_t n, const char *name, bytes *out)
{
    const unsigned char *in = data;
    size_t start = out->len;
    int rc;
    if (n >= 2 && in[0] == 0x1f && in[1] == 0x8b) {
        rc = gunzip(in, n, name, out);
    } else {
        rc = reserve(out, n, name);
        if (rc == 0 && n > 0) {
            memcpy(out->data + out->len, in, n);
            out->len += n;
        }
    }
    if (rc == 0) rc = check_text(out->data ? out->data + start : "", out->len - start, name);
    if (rc != 0) out->len = start;
    if (out->data) out->data[out->len] = '\0';
    return rc;
}

static void hand_over(bytes *b, char **text, size_t *len)
{
    *text = b->data;
    *len = b->len;
}

int awl_corpus_from_bytes(const void *data, size_t n, const char *name, char **text, size_t *len)
{
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!text || !len || (!data && n > 0))
        return awl_error(AWL_ERR_INVALID, "awl_corpus_from_bytes: NULL argument");
    bytes b = {0};
    int rc = append_bytes(data, n, name ? name : "the text", &b);
    if (rc != 0) {
        free(b.data);
        return rc;
    }
    hand_over(&b, text, len);
    return 0;
}

/* Reads a regular file whole (raw bytes) into *raw. */
static int slurp(const char *path, bytes *raw)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return awl_error(AWL_ERR_IO, "%s: cannot open %s: %s", OP, path, strerror(errno));
    int rc = 0;
    for (;;) {
        if ((rc = reserve(raw, 1 << 20, path)) != 0) break;
        ssize_t got = read(fd, raw->data + raw->len, raw->cap - raw->len - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            rc = awl_error(AWL_ERR_IO, "%s: cannot read %s: %s", OP, path, strerror(errno));
            break;
        }
        if (got == 0) break;
        raw->len += (size_t)got;
    }
    close(fd);
    return rc;
}

static int append_file(const char *path, bytes *out)
{
    bytes raw = {0};
    int rc = slurp(path, &raw);
    if (rc == 0) rc = append_bytes(raw.data, raw.len, path, out);
    free(raw.data);
    return rc;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool skipped_name(const char *name)
{
    size_t len = strlen(name);
    return name[0] == '.' || (len > 4 && strcmp(name + len - 4, ".dat") == 0);
}

static int append_directory(const char *path, bytes *out)
{
    DIR *dir = opendir(path);
    if (!dir) return awl_error(AWL_ERR_IO, "%s: cannot open %s: %s", OP, path, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(dir))) {
        if (skipped_name(e->d_name)) continue;
        size_t size = strlen(path) + strlen(e->d_name) + 2;
        char *full = malloc(size);
        char **grown = full ? realloc(names, (n + 1) * sizeof *names) : NULL;
        if (!grown) {
            free(full);
            rc = awl_error(AWL_ERR_OOM, "%s: %s: out of memory", OP, path);
            break;
        }
        names = grown;
        snprintf(full, size, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(full);
            continue;
        }
        names[n++] = full;
    }
    closedir(dir);
    if (names) qsort(names, n, sizeof *names, compare_names);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) rc = append_file(names[i], out);
        free(names[i]);
    }
    free(names);
    if (rc == 0 && out->len == 0)
        rc = awl_error(AWL_ERR_INVALID, "%s: %s holds no text files", OP, path);
    return rc;
}

int awl_corpus_read(const char *path, char **text, size_t *len)
{
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!path || !text || !len) return awl_error(AWL_ERR_INVALID, "%s: NULL argument", OP);
    struct stat st;
    if (stat(path, &st) != 0)
        return awl_error(AWL_ERR_IO, "%s: cannot open %s: %s", OP, path, strerror(errno));
    bytes b = {0};
    int rc = S_ISDIR(st.st_mode) ? append_directory(path, &b) : append_file(path, &b);
    if (rc != 0) {
        free(b.data);
        return rc;
    }
    hand_over(&b, text, len);
    return 0;
}
