/*
 * autograd/node.c - recording the graph: nodes, saved tensors, grad mode,
 * leaves.
 *
 * The graph is made of nodes, one per recorded op, pointing at the nodes that
 * produced their inputs. A tensor points at the node that made it
 * (grad_fn); a node does NOT point at its output tensor, and points at its
 * inputs' nodes rather than at the input tensors. So when the scope releases
 * a temporary, its storage dies unless a node saved it for backward: the
 * graph keeps exactly what backward needs.
 *
 * A leaf that requires grad is reached through an "accumulate_grad" node
 * that holds the leaf. The leaf points back at it only weakly (a cycle
 * otherwise), and every op that uses the leaf shares that one node, so the
 * engine knows when all of a leaf's gradient has arrived and can fire its
 * hooks.
 *
 * An op's saved output would be a cycle too (output -> node -> output), so
 * the node keeps a detached alias and, when create_graph needs it connected,
 * hands back a fresh alias whose grad_fn is the node itself.
 */
#include "autograd/node.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

/* ---- grad mode ------------------------------------------------------------------ */

#define MAX_NO_GRAD_DEPTH 64

static _Thread_local bool grad_disabled; /* false: recording is on */
static _Thread_local bool no_grad_saved[MAX_NO_GRAD_DEPTH];
static _Thread_local int no_grad_depth;

bool awl_is_grad_enabled(void) { return !grad_disabled; }

bool awl_set_grad_enabled(bool on)
{
    bool previous = !grad_disabled;
    grad_disabled = !on;
    return previous;
}

void awl_no_grad_begin(void)
{
    bool previous = awl_set_grad_enabled(false);
    if (no_grad_depth < MAX_NO_GRAD_DEPTH) no_grad_saved[no_grad_depth] = previous;
    no_grad_depth++;
}

void awl_no_grad_end(void)
{
    if (no_grad_depth == 0) {
        fprintf(stderr, "awl: awl_no_grad_end without awl_no_grad_begin\n");
        return;
    }
    no_grad_depth--;
    awl_set_grad_enabled(no_grad_depth < MAX_NO_GRAD_DEPTH ? no_grad_saved[no_grad_depth] : false);
}

/* ---- nodes ------------------------------------------------------------------------ */

/* Shared by every thread recording ops; each node takes the next number. */
static atomic_uint_fast64_t next_sequence;

void awl_node_release(awl_node *n)
{
    if (n && --n->base.refcount == 0) n->base.destroy(&n->base);
}

static void node_drop_saved(awl_node *n)
{
    for (int i = 0; i < n->n_saved; i++) {
        awl_tensor_saved(n->saved[i], -1);
        awl_release(n->saved[i]);
        n->saved[i] = NULL;
    }
}

static void node_destroy(awl_node_base *base)
{
    awl_node *n = (awl_node *)base;
    node_drop_saved(n);
    for (int i = 0; i < n->n_inputs; i++) awl_node_release(n->inputs[i].node);
    if (n->leaf) {
        n->leaf->grad_accumulator = NULL;
        awl_release(n->leaf);
    }
    awl_release(n->grad);
    awl_release(n->grad_copy);
    free(n->inputs);
    free(n);
}

static awl_node *node_new(const char *name, awl_backward_fn backward, int n_inputs, size_t ctx_size)
{
    /* the context lives in the same block, after the node, aligned for any type */
    size_t head = (sizeof(awl_node) + 15) & ~(size_t)15;
    awl_node *n = awl_xcalloc(1, head + ctx_size);
    n->base.refcount = 1;
    n->base.name = name;
    n->base.destroy = node_destroy;
    n->backward = backward;
    n->n_inputs = n_inputs;
    n->inputs = awl_xcalloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *n->inputs);
    n->sequence = (uint64_t)atomic_fetch_add(&next_sequence, 1);
    n->ctx = ctx_size ? (char *)n + head : NULL;
    return n;
}

/* The accumulate node of a leaf that requires grad (one more reference). */
awl_node *awl_grad_accumulator(awl_tensor *leaf)
{
    if (leaf->grad_accumulator) {
        leaf->grad_accumulator->refcount++;
        return (awl_node *)leaf->grad_accumulator;
    }
    awl_node *n = node_new("accumulate_grad", NULL, 0, 0);
    n->leaf = awl_retain(leaf);
    leaf->grad_accumulator = &n->base; /* weak */
    return n;
}

bool awl_needs_grad(int n, awl_tensor *const *inputs)
{
    if (grad_disabled) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

awl_node *awl_node_record(awl_tensor *out, const char *name, awl_backward_fn backward, int n_inputs,
                          awl_tensor *const *inputs, size_t ctx_size)
{
    if (!out || !awl_needs_grad(n_inputs, inputs)) return NULL;
    awl_node *n = node_new(name, backward, n_inputs, ctx_size);
    for (int i = 0; i < n_inputs; i++) {
        awl_tensor *t = inputs[i];
        awl_node_input *in = &n->inputs[i];
        if (!t) continue;
        in->ndim = t->ndim;
        memcpy(in->shape, t->shape, sizeof in->shape);
        in->dtype = t->dtype;
        if (!t->requires_grad) continue;
        if (t->grad_fn) {
            in->node = awl_grad_fn(t);
            in->node->base.refcount++;
        } else {
            in->node = awl_grad_accumulator(t);
        }
    }
    if (out->grad_fn) awl_node_release(awl_grad_fn(out));
    out->grad_fn = &n->base;
    out->requires_grad = true;
    return n;
}

static int save(awl_node *node, awl_tensor *t, bool is_output)
{
    if (node->n_saved == AWL_NODE_MAX_SAVED) {
        fprintf(stderr, "awl: op %s saves more than %d tensors\n", node->base.name,
                AWL_NODE_MAX_SAVED);
        abort();
    }
    int i = node->n_saved++;
    node->saved[i] = t;
    awl_tensor_saved(t, +1); /* the memory ledger's saved activations */
    node->saved_is_output[i] = is_output;
    node->saved_version[i] = awl_tensor_version(t);
    return i;
}

int awl_node_save(awl_node *node, awl_tensor *t) { return save(node, awl_retain(t), false); }

int awl_node_save_output(awl_node *node, awl_tensor *out)
{
    return save(node, awl_take(awl_tensor_detach(out)), true);
}

awl_tensor *awl_node_saved(awl_node *node, int i)
{
    if (i < 0 || i >= node->n_saved || node->released || !node->saved[i]) {
        awl_error(AWL_ERR_INVALID,
                  "awl_backward: the saved tensors of %s were already freed by an earlier "
                  "backward; pass retain_graph to run backward twice",
                  node->base.name);
        return NULL;
    }
    awl_tensor *t = node->saved[i];
    if (!node->saved_is_output[i] || grad_disabled) return t;
    /* create_graph: the output as seen by the graph being built */
    awl_tensor *alias = awl_tensor_detach(t);
    alias->grad_fn = &node->base;
    node->base.refcount++;
    alias->requires_grad = true;
    return alias;
}

void awl_node_want_grad_copy(awl_node *node, awl_dtype dtype)
{
    if (!node) return;
    node->wants_grad_copy = true;
    node->grad_copy_dtype = dtype;
}

bool awl_node_needs_grad(const awl_node *node, int i)
{
    return i >= 0 && i < node->n_inputs && node->inputs[i].node != NULL;
}

void awl_node_free_saved(awl_node *node)
{
    node_drop_saved(node);
    node->released = true;
}

/* ---- leaves ------------------------------------------------------------------------ */

awl_tensor *awl_requires_grad_(awl_tensor *t, bool on)
{
    if (!t) return NULL;
    if (t->grad_fn) {
        awl_error(AWL_ERR_INVALID,
                  "awl_requires_grad_: only leaves can be marked; this tensor "
                  "was made by %s (use awl_detach first)",
                  t->grad_fn->name);
        return NULL;
    }
    if (on && !awl_dtype_is_float(t->dtype)) {
        awl_error(AWL_ERR_INVALID, "awl_requires_grad_: %s tensors cannot require grad",
                  awl_dtype_name(t->dtype));
        return NULL;
    }
    t->requires_grad = on;
    return t;
}

bool awl_is_leaf(const awl_tensor *t) { return t && t->grad_fn == NULL; }

awl_tensor *awl_detach(awl_tensor *t) { return awl_tensor_detach(t); }

int awl_register_grad_hook(awl_tensor *leaf, awl_grad_hook_fn fn, void *user)
{
    if (!leaf || !fn) return AWL_ERR_INVALID;
    if (leaf->grad_fn)
        return awl_error(AWL_ERR_INVALID,
                         "awl_register_grad_hook: hooks go on leaves; this "
                         "tensor was made by %s",
                         leaf->grad_fn->name);
    leaf->hooks = awl_xrealloc(leaf->hooks, (size_t)(leaf->n_hooks + 1) * sizeof *leaf->hooks);
    leaf->hooks[leaf->n_hooks++] = (awl_grad_hook){fn, user};
    return AWL_OK;
}

int awl_remove_grad_hook(awl_tensor *leaf, awl_grad_hook_fn fn, void *user)
{
    if (!leaf) return AWL_ERR_INVALID;
    for (int i = 0; i < leaf->n_hooks; i++)
        if (leaf->hooks[i].fn == fn && leaf->hooks[i].user == user) {
            leaf->hooks[i] = leaf->hooks[--leaf->n_hooks];
            return AWL_OK;
        }
    return awl_error(AWL_ERR_INVALID, "awl_remove_grad_hook: no such hook on this tensor");
}

int awl_set_grad(awl_tensor *leaf, awl_tensor *grad)
{
    if (!leaf || !grad) return AWL_ERR_INVALID;
    char a[64], b[64];
    if (!awl_same_shape(leaf, grad) || leaf->dtype != grad->dtype || !awl_same_device(leaf, grad))
        return awl_error(AWL_ERR_INVALID,
                         "awl_set_grad: the gradient %s %s does not match the tensor %s %s",
                         awl_shape_str(grad, a, sizeof a), awl_dtype_name(grad->dtype),
                         awl_shape_str(leaf, b, sizeof b), awl_dtype_name(leaf->dtype));
    awl_retain(grad);
    awl_release(leaf->grad);
    leaf->grad = grad;
    if (awl_tensor_memory_role(leaf) != AWL_MEMORY_PARAMETER) return AWL_OK;
    return awl_tensor_set_memory_role(grad, AWL_MEMORY_GRADIENT);
}

void awl_clear_grad(awl_tensor *t)
{
    if (!t) return;
    awl_release(t->grad);
    t->grad = NULL;
}
