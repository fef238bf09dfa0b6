/*
 * backends/student/student_backend.c - the "student" device: its table,
 * its memory and host copies (done for you), and what it declares it
 * computes.
 *
 * Memory is host memory from the C library, 64-byte aligned; a host copy
 * is memcpy, and work is synchronous, so synchronize has nothing to wait
 * for. bfloat16 is a storage type here, as on the CPU: only fill, copy and
 * where move it (supports says so, and awl-check then skips bfloat16 for
 * the rest). No fused kernels: the framework composes softmax, layer norm,
 * attention and the rest from your primitives, so once these pass a GPT
 * trains on this device.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/student/student_internal.h"

int awl_student_todo(const char *primitive, int milestone, const char *file)
{
    return awl_error(AWL_ERR_NOT_IMPLEMENTED,
                     "student backend: %s is not implemented yet (milestone %d: %s); write it "
                     "in %s",
                     primitive, milestone, awl_milestone_title(milestone), file);
}

static int student_device_count(void) { return 1; }

static void *student_alloc(int device, size_t nbytes)
{
    (void)device;
    void *p = NULL;
    size_t size = nbytes ? (nbytes + 63) & ~(size_t)63 : 64;
    if (size < nbytes || posix_memalign(&p, 64, size) != 0) {
        awl_error(AWL_ERR_OOM, "student backend: out of memory allocating %zu bytes", nbytes);
        return NULL;
    }
    return p;
}

static void student_free(int device, void *ptr, size_t nbytes)
{
    (void)device;
    (void)nbytes;
    free(ptr);
}

static int student_copy_bytes(int device, void *dst, const void *src, size_t nbytes)
{
    (void)device;
    if (nbytes) memcpy(dst, src, nbytes);
    return AWL_OK;
}

static int student_synchronize(int device)
{
    (void)device;
    return AWL_OK;
}

static bool student_supports(awl_kernel kernel, int op, awl_dtype dtype)
{
    (void)op;
    return dtype != AWL_BF16 || kernel == AWL_KERNEL_FILL || kernel == AWL_KERNEL_COPY ||
           kernel == AWL_KERNEL_WHERE;
}

static const awl_backend student_backend = {
    .name = "student",
    .host_memory = true,
    .device_count = student_device_count,
    .alloc = student_alloc,
    .free = student_free,
    .copy_from_host = student_copy_bytes,
    .copy_to_host = student_copy_bytes,
    .synchronize = student_synchronize,
    .fill = awl_student_fill,
    .copy = awl_student_copy,
    .unary = awl_student_unary,
    .binary = awl_student_binary,
    .where = awl_student_where,
    .reduce = awl_student_reduce,
    .matmul = awl_student_matmul,
    .index_select = awl_student_index_select,
    .index_add = awl_student_index_add,
    .gather = awl_student_gather,
    .scatter_add = awl_student_scatter_add,
    .random = awl_student_random,
    .supports = student_supports,
};

const awl_backend *awl_student_backend(void) { return &student_backend; }
