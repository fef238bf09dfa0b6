/*
 * backends/cpu/cpu_backend.c - the CPU backend's table, memory and settings.
 *
 * Memory is plain host memory from posix_memalign, 64-byte aligned so that
 * every buffer starts on a cache line and vector loads of a contiguous
 * tensor's first element are aligned. There is no caching allocator: glibc's
 * malloc already keeps freed blocks for reuse, so memory_reserved and
 * empty_cache are left NULL. Host <-> device copies are memcpy and work is
 * synchronous, so synchronize has nothing to wait for.
 *
 * Threads: kernels use OpenMP; matmuls use OpenBLAS, which in its OpenMP build
 * shares the OpenMP thread pool and runs single-threaded when called inside a
 * parallel region. set_num_threads sets both, so one call bounds all work.
 */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"

static int cpu_device_count(void) { return 1; }

/* Bytes of physical memory still free, for the out-of-memory message. */
static double available_mib(void)
{
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page / (1024.0 * 1024.0) : -1.0;
}

static void *cpu_alloc(int device, size_t nbytes)
{
    (void)device;
    void *ptr = NULL;
    /* Zero bytes still gets a real, freeable block: NULL means failure. */
    size_t size = nbytes ? (nbytes + 63) & ~(size_t)63 : 64;
    if (size < nbytes || posix_memalign(&ptr, 64, size) != 0) {
        awl_error(AWL_ERR_OOM, "awl_cpu alloc: out of memory allocating %zu bytes (%.0f MiB free)",
                  nbytes, available_mib());
        return NULL;
    }
    return ptr;
}

static void cpu_free(int device, void *ptr, size_t nbytes)
{
    (void)device;
    (void)nbytes;
    free(ptr);
}

static int cpu_copy_bytes(int device, void *dst, const void *src, size_t nbytes)
{
    (void)device;
    if (nbytes) memcpy(dst, src, nbytes);
    return AWL_OK;
}

static int cpu_synchronize(int device)
{
    (void)device;
    return AWL_OK;
}

static void cpu_set_num_threads(int n)
{
    if (n < 1) n = 1;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

static const awl_backend cpu_backend = {
    .name = "cpu",
    .device_count = cpu_device_count,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_from_host = cpu_copy_bytes,
    .copy_to_host = cpu_copy_bytes,
    .synchronize = cpu_synchronize,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .where = cpu_where,
    .reduce = cpu_reduce,
    .matmul = cpu_matmul,
    .index_select = cpu_index_select,
    .index_add = cpu_index_add,
    .gather = cpu_gather,
    .scatter_add = cpu_scatter_add,
    .random = cpu_random,
    .memory_reserved = NULL,
    .empty_cache = NULL,
    .set_num_threads = cpu_set_num_threads,
    .set_matmul_fast_fp32 = NULL,
    .softmax_forward = cpu_softmax_forward,
    .softmax_backward = cpu_softmax_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .cross_entropy_forward = cpu_cross_entropy_forward,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .gelu_backward = cpu_gelu_backward,
    .adamw_step = cpu_adamw_step,
};

const awl_backend *awl_cpu_backend(void) { return &cpu_backend; }
