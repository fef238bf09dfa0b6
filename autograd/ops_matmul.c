/*
 * autograd/ops_matmul.c - the differentiable matrix product.
 *
 * awl_matmul follows NumPy: (..., M, K) @ (..., K, N) -> (..., M, N), batch
 * axes broadcast, and a 1-D operand is promoted to a matrix (a row vector on
 * the left, a column vector on the right) whose added axis is removed from
 * the result.
 *
 * Backward is dA = dC @ B^T and dB = A^T @ dC, written with awl_transpose
 * (a view: the BLAS call reads the transposed strides in place, no copy) and
 * awl_matmul itself, so the gradient is differentiable again. Batch
 * broadcasting needs no code here: the products have the output's batch
 * shape and the engine sums them down to each input's shape.
 *
 * Shape, dtype and device errors come from the raw product, under this op's
 * name ("awl_matmul: inner dimensions differ: (4,3) @ (5,2)").
 *
 * One special case matters for speed and memory: a batched activation times
 * a weight matrix, (B, T, K) @ (K, N), the shape of every linear layer. dB
 * computed as a batched product would first materialise (B, K, N) and then
 * reduce it; folding the batch axes into the rows instead gives
 * (K, B*T) @ (B*T, N) = (K, N) in one GEMM.
 */
#include "autograd/ops_common.h"

/* The 1-D promotions are undone around the products: vec_a/vec_b say which
 * operand was a vector. Saved: b when a needs a gradient, then a when b needs
 * one. grad is (..., M, N) minus the axes the promotions added. */
static int matmul_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    bool vec_a = node->inputs[0].ndim == 1, vec_b = node->inputs[1].ndim == 1;
    int slot = 0;
    awl_tensor *b = awl_node_needs_grad(node, 0) ? awl_node_saved(node, slot++) : NULL;
    awl_tensor *a = awl_node_needs_grad(node, 1) ? awl_node_saved(node, slot++) : NULL;

    /* g is (..., M, N) with both promoted axes restored. */
    awl_tensor *g = grad;
    if (vec_a) g = awl_unsqueeze(g, g->ndim - (vec_b ? 0 : 1));
    if (vec_b && g) g = awl_unsqueeze(g, g->ndim);
    if (!g) return AWL_OK; /* the engine reports the recorded error */

    if (b) { /* dA (..., M, K) = g (..., M, N) @ B^T (..., N, K) */
        awl_tensor *bm = vec_b ? awl_unsqueeze(b, 1) : b;
        awl_tensor *da = awl_matmul(g, awl_transpose(bm, -1, -2));
        grads[0] = vec_a ? awl_squeeze(da, -2) : da;
    }
    if (a) { /* dB (..., K, N) = A^T (..., K, M) @ g (..., M, N) */
        awl_tensor *am = vec_a ? awl_unsqueeze(a, 0) : a;
        awl_tensor *db;
        if (node->inputs[1].ndim == 2 && am->ndim > 2) { /* fold batch into rows */
            int64_t k = am->shape[am->ndim - 1], n = g->shape[g->ndim - 1];
            awl_tensor *rows_a = awl_reshape(am, AWL_SHAPE(-1, k));
            awl_tensor *rows_g = awl_reshape(g, AWL_SHAPE(-1, n));
            db = awl_matmul(awl_transpose(rows_a, 0, 1), rows_g);
        } else {
            db = awl_matmul(awl_transpose(am, -1, -2), g);
        }
        grads[1] = vec_b ? awl_squeeze(db, -1) : db;
    }
    return AWL_OK;
}

/* a (..., M, K) or (K); b (..., K, N) or (K); out (..., M, N) without the
 * promoted axes. */
awl_tensor *awl_matmul(awl_tensor *a, awl_tensor *b)
{
    awl_tensor *out = awl_tensor_matmul(a, b);
    awl_node *node = awl_node_record(out, "matmul", matmul_backward, 2, (awl_tensor *[]){a, b}, 0);
    if (node) {
        if (awl_node_needs_grad(node, 0)) awl_node_save(node, b);
        if (awl_node_needs_grad(node, 1)) awl_node_save(node, a);
    }
    return out;
}
