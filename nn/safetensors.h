/*
 * nn/safetensors.h - reading and writing tensors in the safetensors format.
 *
 * safetensors (Hugging Face) is a plain container that PyTorch, JAX and
 * NumPy users can open with `safetensors.torch.load_file`:
 *
 *     8 bytes    N, the header length, unsigned little-endian
 *     N bytes    a JSON object, UTF-8, padded with spaces:
 *                {"__metadata__": {"key": "value", ...},
 *                 "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
 *                 ...}
 *     the rest   the data section: each tensor's elements row-major,
 *                little-endian, at [begin, end) counted from the section's
 *                start; the tensors tile the section without gaps or
 *                overlaps.
 *
 * awl writes "__metadata__" first, then the tensors in the order given, each
 * right after the previous one, and pads the header with spaces so that the
 * data section starts at a multiple of 8 bytes (as the reference
 * implementation does). It adds one metadata entry per tensor,
 * "crc32.<name>" = the zlib CRC-32 of the tensor's bytes as 8 lowercase hex
 * digits, so a reader detects a corrupted byte anywhere in the data.
 *
 * Writing is crash-safe: the file is written as "<path>.tmp.<pid>", synced
 * to disk, renamed over `path` (atomic on POSIX file systems) and the
 * directory synced. A failure at any point removes the temporary file and
 * leaves whatever `path` held before untouched. A process killed while
 * saving leaves its temporary file behind: the next save to the same path
 * removes every "<path>.tmp.<pid>" whose process no longer exists.
 *
 * Reading trusts nothing: awl_safetensors_open checks the header length
 * against the file size (and a 100 MB limit) before allocating, parses the
 * header with a strict JSON parser (no duplicate keys, no unknown fields,
 * valid UTF-8), checks every dtype, shape, offset and length (no overflow;
 * the tensors tile the data section exactly) and every CRC the metadata
 * lists. Any problem gives AWL_ERR_FORMAT with the file's name and what is
 * wrong. Files written by other tools (no CRCs) open too.
 *
 * dtypes: F32, F64, I32 and BF16, awl's four, and, for reading only, F16
 * (PyTorch's float16), which loads as float32 (others are rejected as
 * unsupported, also with AWL_ERR_FORMAT). Tensors have at most AWL_MAX_DIMS
 * dimensions. The host must be little-endian (checked at compile time).
 */
#ifndef AWL_NN_SAFETENSORS_H
#define AWL_NN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest header accepted (the reference implementation's limit). */
#define AWL_SAFETENSORS_MAX_HEADER 100000000ull

/* Writes tensors[0..n) under names[0..n) (any device, any layout: each is
 * copied to the host row-major) and the metadata keys[i] = values[i],
 * i < n_meta, plus "crc32.<name>" for every tensor. Names, keys and values
 * must be valid UTF-8; names must be distinct and not "__metadata__", keys
 * distinct and not starting with "crc32.". Returns 0, AWL_ERR_INVALID for
 * bad arguments (nothing is written), or AWL_ERR_IO (the path and the
 * system's reason) when the file could not be written, in which case `path`
 * is unchanged and no temporary file remains. */
int awl_safetensors_save(const char *path, int n, const char *const *names,
                         awl_tensor *const *tensors, int n_meta, const char *const *keys,
                         const char *const *values);

/* An opened, fully validated file (its bytes mapped read-only). */
typedef struct awl_safetensors awl_safetensors;

/* Opens and validates `path` (see above). Returns NULL with AWL_ERR_IO when
 * the file cannot be read, AWL_ERR_FORMAT when it is malformed or corrupt.
 * Close with awl_safetensors_close. */
awl_safetensors *awl_safetensors_open(const char *path);
/* The same for a file's bytes in memory, data[0..size), borrowed until
 * close; `name` (NULL: "(memory)") names it in messages. */
awl_safetensors *awl_safetensors_open_memory(const void *data, size_t size, const char *name);
void awl_safetensors_close(awl_safetensors *f);

/* The path given to open (borrowed). */
const char *awl_safetensors_path(const awl_safetensors *f);

/* Number of tensors, in header order; the index of `name`, or -1. */
int awl_safetensors_count(const awl_safetensors *f);
int awl_safetensors_find(const awl_safetensors *f, const char *name);

/* What the header says about tensor i. name points into f. */
typedef struct awl_safetensors_info {
    const char *name;
    awl_dtype dtype; /* what awl_safetensors_load makes (AWL_F32 for float16) */
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    uint64_t begin, end; /* offsets into the data section */
    bool has_crc;        /* the metadata lists its CRC (checked at open) */
    bool float16;        /* stored as F16 (2 bytes an element) */
} awl_safetensors_info;

/* Fills *out for tensor i; AWL_ERR_INVALID when i is out of range. */
int awl_safetensors_info_at(const awl_safetensors *f, int i, awl_safetensors_info *out);

/* Tensor i's bytes (little-endian, row-major; end - begin of them),
 * borrowed until close. NULL when i is out of range. */
const void *awl_safetensors_data(const awl_safetensors *f, int i);

/* A new tensor on `device` (NULL: "cpu") holding tensor i (float16
 * converted to float32 exactly), owned by the current scope
 * (tensor/tensor.h). */
awl_tensor *awl_safetensors_load(const awl_safetensors *f, int i, const char *device);

/* The metadata, in header order (crc32 entries included): how many, the
 * i-th key and value (borrowed until close), and the value of `key` or
 * NULL. */
int awl_safetensors_metadata_count(const awl_safetensors *f);
const char *awl_safetensors_metadata_key(const awl_safetensors *f, int i);
const char *awl_safetensors_metadata_value(const awl_safetensors *f, int i);
const char *awl_safetensors_metadata_get(const awl_safetensors *f, const char *key);

/* "F32", "F64", "I32", "BF16" for awl's dtypes (NULL otherwise). */
const char *awl_safetensors_dtype_name(awl_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
