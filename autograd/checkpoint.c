/*
 * autograd/checkpoint.c - activation checkpointing (see checkpoint.h).
 *
 * The forward runs fn with recording off inside its own scope and keeps only
 * the output, so everything fn allocated dies before awl_checkpoint returns.
 * One node stands for the whole segment. It saves the inputs and the random
 * generator's state (seed, offset) as it was before fn ran.
 *
 * Its backward:
 *   1. sets the generator back to the saved state (remembering the state of
 *      the outer computation, which it restores afterwards), so every random
 *      draw inside fn (dropout masks) repeats exactly;
 *   2. calls fn again, recording, on detached copies of the inputs (new
 *      leaves sharing the inputs' memory) marked as requiring grad where the
 *      original input needs a gradient;
 *   3. runs a nested awl_backward_ex from the recomputed output with the
 *      incoming gradient. The engine is re-entrant; the nested pass
 *      accumulates into the grad of every leaf it reaches: the detached
 *      inputs (whose grads are this node's results) and the parameters used
 *      inside fn (which is how parameter gradients get where they belong).
 *
 * Why this gives bitwise-equal gradients: the recomputed forward runs the
 * same kernels on the same inputs with the same random stream, and the
 * nested pass visits the segment's nodes in the same order (newest first)
 * as the plain backward would have.
 *
 * The design is PyTorch's re-entrant checkpoint. Its known limits apply: a
 * segment none of whose inputs require grad cannot be reached by backward,
 * so it runs unchecked; and the gradient of a checkpointed segment is not
 * itself differentiable (create_graph is refused). Gradient hooks of a
 * parameter used inside the segment fire when the nested pass has
 * accumulated into it: for a parameter used only there (every GPT block's)
 * its gradient is then complete; one also used outside fires once per pass.
 */
#include "autograd/checkpoint.h"

#include "autograd/node.h"
#include "common/alloc.h"

/* ---- the checkpoint node ------------------------------------------------------------------ */

typedef struct checkpoint_ctx {
    awl_checkpoint_fn fn;
    void *user;
    uint64_t rng_seed, rng_offset; /* the generator before fn ran */
} checkpoint_ctx;

/* Recomputes the segment and back-propagates grad through it. The saved
 * tensors are the inputs, in order. */
static int checkpoint_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const checkpoint_ctx *c = awl_node_ctx(node);
    if (awl_is_grad_enabled()) /* the engine turns recording on only for create_graph */
        return awl_error(AWL_ERR_INVALID,
                         "awl_checkpoint: create_graph (double backward) through a checkpointed "
                         "segment is not supported");
    int n = node->n_inputs; /* at most AWL_NODE_MAX_SAVED, checked when recording */
    awl_tensor *detached[AWL_NODE_MAX_SAVED] = {NULL};
    int status = AWL_OK;
    for (int i = 0; i < n; i++) {
        awl_tensor *x = awl_node_saved(node, i);
        detached[i] = x ? awl_tensor_detach(x) : NULL;
        if (x && !detached[i]) status = AWL_ERR_INVALID;
        if (detached[i] && awl_node_needs_grad(node, i)) awl_requires_grad_(detached[i], true);
    }

    uint64_t outer_seed, outer_offset;
    awl_rng_get_state(&outer_seed, &outer_offset);
    awl_rng_set_state(c->rng_seed, c->rng_offset);
    awl_tensor *out = NULL;
    if (status == AWL_OK) {
        bool previous = awl_set_grad_enabled(true);
        out = c->fn(c->user, n, detached);
        awl_set_grad_enabled(previous);
    }
    awl_rng_set_state(outer_seed, outer_offset);

    if (status == AWL_OK && !out) status = AWL_ERR_INVALID; /* fn recorded why */
    if (status == AWL_OK && out->requires_grad) {
        awl_backward_options options = {.grad = grad};
        /* the engine keeps each pass's bookkeeping apart, so nodes this
         * nested pass shares with the outer one (accumulate nodes of
         * parameters used inside and outside the segment) stay intact */
        status = awl_backward_ex(out, &options);
    }
    for (int i = 0; status == AWL_OK && i < n; i++)
        if (detached[i] && detached[i]->grad) grads[i] = awl_adopt(awl_retain(detached[i]->grad));
    return status;
}

awl_tensor *awl_checkpoint(awl_checkpoint_fn fn, void *user, int n_inputs,
                           awl_tensor *const *inputs)
{
    if (!fn || n_inputs < 0 || (n_inputs > 0 && !inputs)) {
        awl_error(AWL_ERR_INVALID, "awl_checkpoint: no segment function or inputs");
        return NULL;
    }
    if (n_inputs > AWL_NODE_MAX_SAVED) {
        awl_error(AWL_ERR_INVALID, "awl_checkpoint: %d inputs; at most %d", n_inputs,
                  AWL_NODE_MAX_SAVED);
        return NULL;
    }
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i]) return NULL;
    if (!awl_needs_grad(n_inputs, inputs)) return fn(user, n_inputs, inputs);

    checkpoint_ctx ctx = {.fn = fn, .user = user};
    awl_rng_get_state(&ctx.rng_seed, &ctx.rng_offset);
    awl_scope_begin();
    awl_no_grad_begin();
    awl_tensor *inner = fn(user, n_inputs, inputs);
    awl_no_grad_end();
    /* a new tensor struct, so that recording a node on it cannot touch an
     * input fn may have returned as it was */
    awl_tensor *out = inner ? awl_take(awl_tensor_detach(inner)) : NULL;
    awl_scope_end();
    if (!out) return NULL;
    awl_adopt(out);
    awl_node *node = awl_node_record(out, "checkpoint", checkpoint_backward, n_inputs, inputs,
                                     sizeof(checkpoint_ctx));
    if (node) {
        *(checkpoint_ctx *)awl_node_ctx(node) = ctx;
        for (int i = 0; i < n_inputs; i++) awl_node_save(node, inputs[i]);
    }
    return out;
}
