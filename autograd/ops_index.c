/*
 * autograd/ops_index.c - embedding lookup and gather.
 *
 * Both pick elements by int32 indices, and both have an adjoint that adds
 * back into zeros: embedding's is an index_add over rows (repeated tokens
 * sum their gradients, deterministically), gather's is a scatter_add along
 * the gathered axis. Each adjoint is written as a differentiable op of its
 * own (embedding_backward, gather_backward) whose backward is the forward
 * lookup again: the adjoint of a linear map's adjoint is the map. That keeps
 * double backward through an embedding (or a cross-entropy built on gather)
 * correct without special cases.
 *
 * Index range and shape checks live in the raw layer and name the public op
 * ("awl_embedding: index 70 out of range for 65 rows"). The indices receive
 * no gradient.
 */
#include "autograd/ops_common.h"

/* ---- embedding: weight (V, ...), idx int32 (...), out idx.shape + weight.shape[1:] */

/* out (V, ...) = zeros with out[idx[i...], :] += g[i..., :]. */
static awl_tensor *embedding_backward_op(awl_tensor *g, awl_tensor *idx, int ndim,
                                         const int64_t *shape);

/* Saved: idx. A weight with a gradient already (a GPT's output head tied
 * to its token embedding: the head's backward runs first) takes the rows
 * added into that gradient (awl_node_take_pending_grad), in place where
 * nothing else holds it: one pass over the (V, ...) table, where zeros,
 * the rows and the engine's sum of the two take three. */
static int embedding_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    awl_tensor *idx = awl_node_saved(node, 0);
    awl_tensor *pending = awl_node_take_pending_grad(node, 0);
    if (pending) {
        /* of the weight's dtype, as grad is (awl_node_take_pending_grad) */
        bool alone = pending->refcount == 1 && pending->storage->refcount == 1 &&
                     awl_is_contiguous(pending);
        awl_tensor *into = alone ? pending : awl_tensor_clone(pending);
        if (!into || awl_tensor_index_add_(into, idx, grad) != 0) return AWL_ERR_INVALID;
        grads[0] = into;
        return AWL_OK;
    }
    grads[0] = embedding_backward_op(grad, idx, node->inputs[0].ndim, node->inputs[0].shape);
    return AWL_OK;
}

awl_tensor *awl_embedding(awl_tensor *weight, awl_tensor *idx)
{
    awl_tensor *out = awl_tensor_index_select(weight, idx);
    awl_node *node = awl_node_record(out, "embedding", embedding_backward, 1, &weight, 0);
    if (node) awl_node_save(node, idx);
    return out;
}

/* The adjoint's adjoint: dg = embedding(grad, idx). Saved: idx. */
static int embedding_backward_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_embedding(grad, awl_node_saved(node, 0));
    return AWL_OK;
}

static awl_tensor *embedding_backward_op(awl_tensor *g, awl_tensor *idx, int ndim,
                                         const int64_t *shape)
{
    if (!g || !idx) return NULL;
    awl_tensor *out = awl_tensor_new_on(g, ndim, shape, g->dtype);
    if (out && (awl_tensor_fill_(out, 0.0) != 0 || awl_tensor_index_add_(out, idx, g) != 0))
        return NULL; /* out belongs to the engine's scope, which frees it */
    awl_node *node =
        awl_node_record(out, "embedding_backward", embedding_backward_backward, 1, &g, 0);
    if (node) awl_node_save(node, idx);
    return out;
}

/* ---- gather: x (...), idx int32 of x's ndim, out idx's shape ---------------------- */

/* out (x's shape) = zeros with out[..., idx[..., j, ...], ...] += g[..., j, ...]. */
static awl_tensor *gather_backward_op(awl_tensor *g, int dim, awl_tensor *idx, int ndim,
                                      const int64_t *shape);

/* Saved: idx; ctx: the normalised dim. */
static int gather_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = gather_backward_op(grad, *(int *)awl_node_ctx(node), awl_node_saved(node, 0),
                                  node->inputs[0].ndim, node->inputs[0].shape);
    return AWL_OK;
}

awl_tensor *awl_gather(awl_tensor *x, int dim, awl_tensor *idx)
{
    awl_tensor *out = awl_tensor_gather(x, dim, idx);
    awl_node *node = awl_node_record(out, "gather", gather_backward, 1, &x, sizeof(int));
    if (node) {
        *(int *)awl_node_ctx(node) = dim < 0 ? dim + x->ndim : dim;
        awl_node_save(node, idx);
    }
    return out;
}

/* dg = gather(grad, dim, idx). Saved: idx; ctx: dim. */
static int gather_backward_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_gather(grad, *(int *)awl_node_ctx(node), awl_node_saved(node, 0));
    return AWL_OK;
}

static awl_tensor *gather_backward_op(awl_tensor *g, int dim, awl_tensor *idx, int ndim,
                                      const int64_t *shape)
{
    if (!g || !idx) return NULL;
    awl_tensor *out = awl_tensor_new_on(g, ndim, shape, g->dtype);
    if (out && (awl_tensor_fill_(out, 0.0) != 0 || awl_tensor_scatter_add_(out, dim, idx, g) != 0))
        return NULL; /* out belongs to the engine's scope, which frees it */
    awl_node *node =
        awl_node_record(out, "gather_backward", gather_backward_backward, 1, &g, sizeof(int));
    if (node) {
        *(int *)awl_node_ctx(node) = dim;
        awl_node_save(node, idx);
    }
    return out;
}
