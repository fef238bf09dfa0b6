/*
 * common/alloc.h - allocation of small host bookkeeping.
 *
 * Tensor structs, graph nodes, parameter lists, parsed checkpoint headers:
 * running out of host memory for these is not recoverable in any useful
 * way, so these wrappers print a message and abort. Device and data
 * buffers, which are large and can fail for a reason the user can fix (a
 * batch too large), go through a backend's alloc and return AWL_ERR_OOM
 * instead (common/error.h).
 *
 * A request of 0 bytes returns a valid, unique pointer, so callers never
 * special-case empty arrays; free() releases every result.
 */
#ifndef AWL_COMMON_ALLOC_H
#define AWL_COMMON_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *awl_xmalloc(size_t size);
void *awl_xcalloc(size_t count, size_t size);
void *awl_xrealloc(void *ptr, size_t size);

#ifdef __cplusplus
}
#endif

#endif
