/*
 * autograd/checkpoint.h - activation checkpointing: trade compute for memory.
 *
 * A checkpointed segment runs its forward without recording a graph, inside
 * a scope of its own, so only its output survives: the activations inside it
 * are freed at once. The graph gets one node in its place. When backward
 * reaches that node, it replays the segment (same inputs, same random
 * stream, so dropout draws the same masks) with recording on, runs a nested
 * backward through the recomputed graph, and hands the inputs' gradients on.
 * Gradients of parameters used inside the segment reach their `grad` through
 * that nested pass. The gradients are bitwise those of the plain run.
 *
 *     static awl_tensor *block_fn(void *block, int n, awl_tensor *const *in)
 *     {
 *         return awl_module_forward(block, in[0]);
 *     }
 *     ...
 *     x = awl_checkpoint(block_fn, block, 1, &x);   // instead of awl_module_forward(block, x)
 *
 * Limits (as PyTorch's re-entrant checkpoint):
 *   - when no input requires grad, the segment runs normally (nothing is
 *     saved), because the graph would have no edge through which backward
 *     could reach the node;
 *   - create_graph (double backward) through a checkpoint is refused with an
 *     error;
 *   - fn must compute the same thing when called again: it may draw random
 *     numbers from the global generator (they are replayed) but must not
 *     depend on other state that changes between forward and backward.
 */
#ifndef AWL_AUTOGRAD_CHECKPOINT_H
#define AWL_AUTOGRAD_CHECKPOINT_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A segment: computes one tensor from inputs[0..n_inputs) (and whatever user
 * points at, e.g. a module). Returns a tensor owned by the current scope, or
 * NULL after an error. */
typedef awl_tensor *(*awl_checkpoint_fn)(void *user, int n_inputs, awl_tensor *const *inputs);

/* Runs fn(user, n_inputs, inputs) as a checkpointed segment and returns its
 * output (owned by the current scope), or NULL after an error. The inputs
 * are kept (retained) until backward; user must stay valid until then. In
 * no-grad mode this is just fn(user, n_inputs, inputs). */
awl_tensor *awl_checkpoint(awl_checkpoint_fn fn, void *user, int n_inputs,
                           awl_tensor *const *inputs);

#ifdef __cplusplus
}
#endif

#endif
