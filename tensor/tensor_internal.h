/*
 * tensor/tensor_internal.h - helpers shared by the files of tensor/ alone.
 * Not part of the public API: no file outside tensor/ includes it
 * (scripts/check_layers.sh fails the build's tests when one does).
 */
#ifndef AWL_TENSOR_INTERNAL_H
#define AWL_TENSOR_INTERNAL_H

#include "common/alloc.h"
#include "tensor/profiler_internal.h"
#include "tensor/tensor.h"

/* A new storage of nbytes on device, one reference held by the caller, and
 * counted in the device's memory statistics (tensor/storage.c); NULL after
 * an error naming op. awl_storage_release drops one reference and frees the
 * memory with the last. */
awl_storage *awl_storage_new(const char *op, awl_device device, size_t nbytes);
void awl_storage_release(awl_storage *s);

/* t's storage is about to be written in place (awl_tensor_version). */
static inline void awl_tensor_written(awl_tensor *t) { t->storage->version++; }

/* A new tensor struct viewing `storage` (one more reference to it), owned by
 * the current scope, with no autograd state. */
awl_tensor *awl_tensor_wrap(awl_storage *storage, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset, awl_dtype dtype);

/* A new contiguous tensor on `device`, owned by the current scope; NULL after
 * an error naming `op`. */
awl_tensor *awl_tensor_alloc(const char *op, awl_device device, int ndim, const int64_t *shape,
                             awl_dtype dtype);
/* The same on a device named as the creation functions take it (NULL:
 * "cpu"), with the shape checked. */
awl_tensor *awl_tensor_create(const char *op, int ndim, const int64_t *shape, awl_dtype dtype,
                              const char *device);

/* Drops a tensor the caller has just created and will not return (after a
 * failed kernel, say): takes it out of the current scope and releases it, so
 * nothing leaks when no scope is open. */
void awl_discard(awl_tensor *t);

/* Row-major strides for shape. */
void awl_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* Whether awl_set_float32_matmul_precision last allowed a faster float32
 * matmul ("high" or "medium"). */
bool awl_float32_matmul_fast(void);

/* Records a status from a backend call that failed without a message. */
int awl_backend_status(const char *op, int status);

#endif
