/*
 * common/alloc.c - host allocations that abort when memory runs out (see
 * alloc.h).
 */
#include "common/alloc.h"

#include <stdio.h>
#include <stdlib.h>

static void out_of_host_memory(size_t size)
{
    fprintf(stderr, "awl: out of host memory allocating %zu bytes of bookkeeping\n", size);
    abort();
}

void *awl_xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p) out_of_host_memory(size);
    return p;
}

void *awl_xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_host_memory(count * size);
    return p;
}

void *awl_xrealloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size ? size : 1);
    if (!p) out_of_host_memory(size);
    return p;
}
