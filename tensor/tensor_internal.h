/*
 * tensor/tensor_internal.h - helpers shared by the files of tensor/ (and by
 * autograd/, which builds on the same tensor struct). Not part of the public
 * API.
 */
#ifndef AWL_TENSOR_INTERNAL_H
#define AWL_TENSOR_INTERNAL_H

#include "tensor/tensor.h"

/* malloc/calloc for small host bookkeeping (tensor structs, graph nodes).
 * Running out of host memory for these is not recoverable in any useful
 * way, so they print and abort; device and data buffers, which are large and
 * can fail for a reason the user can fix, go through the backend and return
 * errors instead. */
void *awl_xmalloc(size_t size);
void *awl_xcalloc(size_t count, size_t size);
void *awl_xrealloc(void *ptr, size_t size);

/* A new tensor struct viewing `storage` (one more reference to it), owned by
 * the current scope, with no autograd state. */
awl_tensor *awl_tensor_wrap(awl_storage *storage, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset, awl_dtype dtype);

/* A new contiguous tensor on `device`, owned by the current scope; NULL after
 * an error naming `op`. */
awl_tensor *awl_tensor_alloc(const char *op, awl_device device, int ndim, const int64_t *shape,
                             awl_dtype dtype);

/* Drops a tensor the caller has just created and will not return (after a
 * failed kernel, say): takes it out of the current scope and releases it, so
 * nothing leaks when no scope is open. */
void awl_discard(awl_tensor *t);

/* Takes t's reference out of the current scope and returns it: the caller
 * now owns that reference (graph nodes keeping a tensor they created). */
awl_tensor *awl_take(awl_tensor *t);

/* Gives the current scope one reference the caller owned (a tensor made in
 * an inner scope and retained across its end). */
awl_tensor *awl_adopt(awl_tensor *t);

/* Row-major strides for shape. */
void awl_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* Normalises a possibly negative axis; records an error naming op when it is
 * out of range. */
int awl_normalize_dim(const char *op, int dim, int ndim, int *out);

/* Formats a shape as "(2,3,4)". */
const char *awl_format_shape(int ndim, const int64_t *shape, char *buf, size_t size);

/* Records a status from a backend call that failed without a message. */
int awl_backend_status(const char *op, int status);

#endif
