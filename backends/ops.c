/*
 * backends/ops.c - the op tables of ops.h as arrays, for lookups at run
 * time (names in messages, dtype checks, the conformance runner).
 *
 * Each array is one expansion of its list, so an op added to a list is in
 * its array; the static asserts tie every array to its enum's count.
 */
#include "backends/backend.h"

#include <stddef.h>

#define AWL_COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

#define OP_INFO(OP, name, dtypes, domain, math, formula) {name, dtypes, AWL_DOMAIN_##domain, math},
static const awl_op_info unary_info[] = {AWL_UNARY_OPS(OP_INFO)};
static const awl_op_info binary_info[] = {AWL_BINARY_OPS(OP_INFO)};

#define REDUCE_INFO(OP, name, dtypes, identity, combine, mean) {name, dtypes, AWL_DOMAIN_REAL, 0},
static const awl_op_info reduce_info[] = {AWL_REDUCE_OPS(REDUCE_INFO)};

#define KERNEL_INFO(K, field, milestone, dtypes, required) {#field, milestone, dtypes, required},
static const awl_kernel_info kernel_info[] = {AWL_KERNELS(KERNEL_INFO)};

#define MILESTONE_TITLE(n, title) [n] = title,
static const char *const milestone_titles[] = {[0] = NULL, AWL_MILESTONES(MILESTONE_TITLE)};

_Static_assert(AWL_COUNT_OF(unary_info) == AWL_UNARY_OP_COUNT, "unary table and enum differ");
_Static_assert(AWL_COUNT_OF(binary_info) == AWL_BINARY_OP_COUNT, "binary table and enum differ");
_Static_assert(AWL_COUNT_OF(reduce_info) == AWL_REDUCE_OP_COUNT, "reduce table and enum differ");
_Static_assert(AWL_COUNT_OF(kernel_info) == AWL_KERNEL_COUNT, "kernel table and enum differ");
_Static_assert(AWL_COUNT_OF(milestone_titles) == AWL_MILESTONE_COUNT + 1,
               "milestones must be numbered 1, 2, ... in order");

const awl_op_info *awl_unary_info(awl_unary_op op)
{
    return (int)op >= 0 && op < AWL_UNARY_OP_COUNT ? &unary_info[op] : NULL;
}

const awl_op_info *awl_binary_info(awl_binary_op op)
{
    return (int)op >= 0 && op < AWL_BINARY_OP_COUNT ? &binary_info[op] : NULL;
}

const awl_op_info *awl_reduce_info(awl_reduce_op op)
{
    return (int)op >= 0 && op < AWL_REDUCE_OP_COUNT ? &reduce_info[op] : NULL;
}

const awl_kernel_info *awl_kernel_get_info(awl_kernel kernel)
{
    return (int)kernel >= 0 && kernel < AWL_KERNEL_COUNT ? &kernel_info[kernel] : NULL;
}

const char *awl_milestone_title(int milestone)
{
    return milestone >= 1 && milestone <= AWL_MILESTONE_COUNT ? milestone_titles[milestone] : NULL;
}

/* The op's own dtype set, or all dtypes for a kernel without op codes;
 * 0 for an op code out of range. */
static unsigned op_dtypes(awl_kernel kernel, int op)
{
    const awl_op_info *info = kernel == AWL_KERNEL_UNARY    ? awl_unary_info((awl_unary_op)op)
                              : kernel == AWL_KERNEL_BINARY ? awl_binary_info((awl_binary_op)op)
                              : kernel == AWL_KERNEL_REDUCE ? awl_reduce_info((awl_reduce_op)op)
                                                            : NULL;
    bool coded =
        kernel == AWL_KERNEL_UNARY || kernel == AWL_KERNEL_BINARY || kernel == AWL_KERNEL_REDUCE;
    return coded ? (info ? info->dtypes : 0) : ~0u;
}

bool awl_kernel_defined(awl_kernel kernel, int op, awl_dtype dtype)
{
    const awl_kernel_info *k = awl_kernel_get_info(kernel);
    return k && (int)dtype >= 0 && dtype < AWL_DTYPE_COUNT &&
           (k->dtypes & op_dtypes(kernel, op) & AWL_DT(dtype));
}

bool awl_kernel_required(awl_kernel kernel, int op, awl_dtype dtype)
{
    return awl_kernel_defined(kernel, op, dtype) &&
           (awl_kernel_get_info(kernel)->required & AWL_DT(dtype));
}

const char *awl_unary_op_name(awl_unary_op op)
{
    const awl_op_info *info = awl_unary_info(op);
    return info ? info->name : "unary?";
}

const char *awl_binary_op_name(awl_binary_op op)
{
    const awl_op_info *info = awl_binary_info(op);
    return info ? info->name : "binary?";
}

const char *awl_reduce_op_name(awl_reduce_op op)
{
    const awl_op_info *info = awl_reduce_info(op);
    return info ? info->name : "reduce?";
}
