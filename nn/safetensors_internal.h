/*
 * nn/safetensors_internal.h - the JSON side of the safetensors format,
 * shared by nn/safetensors.c (files) and nn/safetensors_json.c (parser and
 * writer helpers). Not part of the public API.
 */
#ifndef AWL_NN_SAFETENSORS_INTERNAL_H
#define AWL_NN_SAFETENSORS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/safetensors.h"

/* One tensor entry of a header, as parsed (not yet checked against the
 * data section). */
typedef struct awl_st_tensor {
    char *name;
    awl_dtype dtype; /* AWL_F32 for a float16 entry */
    bool float16;    /* stored as IEEE float16 ("F16") */
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    uint64_t begin, end;
} awl_st_tensor;

/* A parsed header: tensors and metadata in the order they appear. All
 * strings are malloc'd, NUL-free, valid UTF-8. */
typedef struct awl_st_header {
    int n_tensors, cap_tensors;
    awl_st_tensor *tensors;
    int n_meta, cap_meta;
    char **keys, **values;
} awl_st_header;

/* Parses the header json[0..len) strictly: one object whose members are
 * tensors {"dtype", "shape", "data_offsets"} (each exactly once, nothing
 * else) and at most one "__metadata__" object of strings; no duplicate
 * names or keys; integers non-negative and at most INT64_MAX; only
 * whitespace after the object. Returns 0, or AWL_ERR_FORMAT with a
 * description (naming the byte offset) in err; *out is empty after a
 * failure. Records no error itself: the caller adds the file's name. */
int awl_st_header_parse(const char *json, size_t len, awl_st_header *out, char *err,
                        size_t err_size);
void awl_st_header_clear(awl_st_header *h);

/* A growable byte buffer for building a header. */
typedef struct awl_st_buf {
    char *data;
    size_t len, cap;
} awl_st_buf;

void awl_st_buf_append(awl_st_buf *b, const char *s, size_t n);
void awl_st_buf_printf(awl_st_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal (quoted, escaped); s must be valid
 * UTF-8 (awl_st_utf8_valid). */
void awl_st_buf_string(awl_st_buf *b, const char *s);
void awl_st_buf_free(awl_st_buf *b);

/* Whether s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF). */
bool awl_st_utf8_valid(const char *s, size_t n);

/* "F32" -> AWL_F32 and so on; negative for any other name. */
int awl_st_dtype_parse(const char *name, awl_dtype *out);

#endif
