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
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_blas.h"
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
    awl_blas_set_num_threads(n);
}

static int cpu_get_num_threads(void) { return omp_get_max_threads(); }

/* bfloat16 is a storage type here: moved (fill, copy, where, index_select,
 * gather) and drawn, never computed with; the fused kernels are float32
 * (the products with a bias or a GELU float64 too, as matmul). */
static bool cpu_supports(awl_kernel kernel, int op, awl_dtype dtype)
{
    (void)op;
    switch (kernel) {
    case AWL_KERNEL_FILL:
    case AWL_KERNEL_COPY:
    case AWL_KERNEL_WHERE:
    case AWL_KERNEL_INDEX_SELECT:
    case AWL_KERNEL_GATHER:
    case AWL_KERNEL_RANDOM:
    case AWL_KERNEL_DROPOUT: return true;
    case AWL_KERNEL_UNARY:
    case AWL_KERNEL_BINARY:
    case AWL_KERNEL_REDUCE:
    case AWL_KERNEL_MATMUL:
    case AWL_KERNEL_INDEX_ADD:
    case AWL_KERNEL_SCATTER_ADD: return dtype != AWL_BF16;
    case AWL_KERNEL_MATMUL_BIAS:
    case AWL_KERNEL_MATMUL_BIAS_GELU:
    case AWL_KERNEL_MATMUL_GELU_BACKWARD: return dtype == AWL_F32 || dtype == AWL_F64;
    default: return dtype == AWL_F32;
    }
}

static const awl_backend cpu_backend = {
    .name = "cpu",
    .host_memory = true,
    .device_count = cpu_device_count,
    .alloc = awl_cpu_alloc,
    .free = awl_cpu_free,
    .copy_from_host = cpu_copy_bytes,
    .copy_to_host = cpu_copy_bytes,
    .synchronize = cpu_synchronize,
    .fill = awl_cpu_fill,
    .copy = awl_cpu_copy,
    .unary = awl_cpu_unary,
    .binary = awl_cpu_binary,
    .where = awl_cpu_where,
    .reduce = awl_cpu_reduce,
    .matmul = awl_cpu_matmul,
    .matmul_bias = awl_cpu_matmul_bias,
    .matmul_bias_gelu = awl_cpu_matmul_bias_gelu,
    .matmul_gelu_backward = awl_cpu_matmul_gelu_backward,
    .index_select = awl_cpu_index_select,
    .index_add = awl_cpu_index_add,
    .gather = awl_cpu_gather,
    .scatter_add = awl_cpu_scatter_add,
    .random = awl_cpu_random,
    .supports = cpu_supports,
    .memory_reserved = awl_cpu_memory_reserved,
    .empty_cache = awl_cpu_empty_cache,
    .set_num_threads = cpu_set_num_threads,
    .get_num_threads = cpu_get_num_threads,
    .set_matmul_fast_fp32 = NULL,
    .peak_flops = awl_cpu_peak_flops,
    .softmax_forward = awl_cpu_softmax_forward,
    .softmax_backward = awl_cpu_softmax_backward,
    .layernorm_forward = awl_cpu_layernorm_forward,
    .layernorm_backward = awl_cpu_layernorm_backward,
    .cross_entropy_forward = awl_cpu_cross_entropy_forward,
    .cross_entropy_backward = awl_cpu_cross_entropy_backward,
    .cross_entropy_forward_backward = awl_cpu_cross_entropy_forward_backward,
    .attention_forward = awl_cpu_attention_forward,
    .attention_backward = awl_cpu_attention_backward,
    .dropout = awl_cpu_dropout,
    .gelu_backward = awl_cpu_gelu_backward,
    .dropout_add = awl_cpu_dropout_add,
    .add_dropout = awl_cpu_add_dropout,
    .adamw_step = awl_cpu_adamw_step,
    .sum_squares = awl_cpu_sum_squares,
    .scale = awl_cpu_scale,
};

const awl_backend *awl_cpu_backend(void) { return &cpu_backend; }
