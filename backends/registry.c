/*
 * backends/registry.c - backends by name, and the names of op codes.
 *
 * The built-in backends register themselves on first lookup, so a program
 * never has to initialise anything; a custom backend calls
 * awl_backend_register() before its first tensor.
 */
#include <string.h>

#include "backends/backend.h"

#define MAX_BACKENDS 8

static const awl_backend *registered[MAX_BACKENDS];
static int n_registered;
static bool builtins_registered;

int awl_backend_register(const awl_backend *backend)
{
    if (!backend || !backend->name)
        return awl_error(AWL_ERR_INVALID, "awl_backend_register: backend has no name");
    for (int i = 0; i < n_registered; i++) {
        if (strcmp(registered[i]->name, backend->name) == 0) {
            registered[i] = backend;
            return AWL_OK;
        }
    }
    if (n_registered == MAX_BACKENDS)
        return awl_error(AWL_ERR_INVALID, "awl_backend_register: more than %d backends",
                         MAX_BACKENDS);
    registered[n_registered++] = backend;
    return AWL_OK;
}

static void register_builtins(void)
{
    if (builtins_registered) return;
    builtins_registered = true;
    awl_backend_register(awl_cpu_backend());
    if (awl_cuda_backend()) awl_backend_register(awl_cuda_backend());
}

const awl_backend *awl_backend_find(const char *name)
{
    register_builtins();
    for (int i = 0; i < n_registered; i++)
        if (strcmp(registered[i]->name, name) == 0) return registered[i];
    return NULL;
}

#ifndef AWL_WITH_CUDA
const awl_backend *awl_cuda_backend(void) { return NULL; }
#endif

const char *awl_unary_op_name(awl_unary_op op)
{
    static const char *names[AWL_UNARY_OP_COUNT] = {
        [AWL_UNARY_NEG] = "neg",
        [AWL_UNARY_EXP] = "exp",
        [AWL_UNARY_LOG] = "log",
        [AWL_UNARY_SQRT] = "sqrt",
        [AWL_UNARY_RSQRT] = "rsqrt",
        [AWL_UNARY_TANH] = "tanh",
        [AWL_UNARY_SIGMOID] = "sigmoid",
        [AWL_UNARY_RELU] = "relu",
        [AWL_UNARY_GELU] = "gelu",
        [AWL_UNARY_GELU_GRAD] = "gelu_grad",
        [AWL_UNARY_ABS] = "abs",
        [AWL_UNARY_SIGN] = "sign",
        [AWL_UNARY_STEP] = "step",
        [AWL_UNARY_ADD_SCALAR] = "add_scalar",
        [AWL_UNARY_MUL_SCALAR] = "mul_scalar",
        [AWL_UNARY_RSUB_SCALAR] = "rsub_scalar",
        [AWL_UNARY_RDIV_SCALAR] = "rdiv_scalar",
        [AWL_UNARY_POW_SCALAR] = "pow",
        [AWL_UNARY_GT_SCALAR] = "gt_scalar",
        [AWL_UNARY_LT_SCALAR] = "lt_scalar",
        [AWL_UNARY_EQ_SCALAR] = "eq_scalar",
    };
    return (op >= 0 && op < AWL_UNARY_OP_COUNT && names[op]) ? names[op] : "unary?";
}

const char *awl_binary_op_name(awl_binary_op op)
{
    static const char *names[AWL_BINARY_OP_COUNT] = {
        [AWL_BINARY_ADD] = "add",         [AWL_BINARY_SUB] = "sub",
        [AWL_BINARY_MUL] = "mul",         [AWL_BINARY_DIV] = "div",
        [AWL_BINARY_MAXIMUM] = "maximum", [AWL_BINARY_MINIMUM] = "minimum",
        [AWL_BINARY_POW] = "pow",         [AWL_BINARY_EQ] = "eq",
        [AWL_BINARY_NE] = "ne",           [AWL_BINARY_GT] = "gt",
        [AWL_BINARY_GE] = "ge",           [AWL_BINARY_LT] = "lt",
        [AWL_BINARY_LE] = "le",
    };
    return (op >= 0 && op < AWL_BINARY_OP_COUNT && names[op]) ? names[op] : "binary?";
}

const char *awl_reduce_op_name(awl_reduce_op op)
{
    static const char *names[AWL_REDUCE_OP_COUNT] = {
        [AWL_REDUCE_SUM] = "sum",
        [AWL_REDUCE_MEAN] = "mean",
        [AWL_REDUCE_MAX] = "max",
        [AWL_REDUCE_MIN] = "min",
    };
    return (op >= 0 && op < AWL_REDUCE_OP_COUNT && names[op]) ? names[op] : "reduce?";
}
