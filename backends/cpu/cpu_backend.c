/*
 * backends/cpu/cpu_backend.c - the CPU backend's table, memory and settings.
 *
 * Memory is host memory, with large freed blocks cached for reuse
 * (cpu_memory.c). Host <-> device copies are memcpy and work is
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

#include "backends/cpu/cpu_internal.h"

static int cpu_device_count(void) { return 1; }

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
    .host_memory = true,
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
    .memory_reserved = cpu_memory_reserved,
    .empty_cache = cpu_empty_cache,
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
