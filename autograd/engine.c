/*
 * autograd/engine.c - the backward pass.
 *
 * The idea fits in a few lines (micrograd's):
 *
 *     order = nodes reachable from the root, each after every node that
 *             consumes its output;
 *     root.grad = 1;
 *     for node in order:
 *         input_grads = node.backward(node.grad);
 *         for each input i: input_node(i).grad += input_grads[i];
 *
 * and this file is that, plus what makes it practical:
 *
 *   - dependency counts instead of a precomputed order: a node runs as soon
 *     as every consumer has delivered its gradient, chosen newest-first
 *     (highest sequence number, as PyTorch does), so gradients are freed
 *     soon after they are complete;
 *   - broadcasting: a gradient with the output's shape is summed down to
 *     the shape the input had;
 *   - memory: each node runs inside its own scope, and its saved tensors are
 *     dropped as soon as it has run (unless retain_graph), so activations
 *     die as backward passes them;
 *   - leaves: gradients land in leaf->grad through the leaf's accumulate
 *     node, which then calls the leaf's hooks (gradient-ready hooks, for
 *     data-parallel training);
 *   - create_graph: the backward functions are ordinary differentiable ops,
 *     so running them with grad mode on records the gradient's own graph;
 *   - dtypes: a gradient has its input's dtype, with one exception: the
 *     output of a cast from float32 to bfloat16 (autocast's weights) may
 *     get a float32 gradient (awl_node_input_widens), which the cast then
 *     passes on as it is; where it meets a bfloat16 one, they are summed in
 *     float32;
 *   - gradient copies: a node whose backward casts its gradient to a
 *     narrower dtype may get it cast already, written beside the gradient
 *     by the consumer's kernel (awl_node_offer_grad_copy); the engine drops
 *     a copy whenever the gradient it was made from is summed or taken.
 *
 * The engine is re-entrant: activation checkpointing runs a nested backward
 * from inside a node's backward function.
 */
#include "autograd/node.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "tensor/profiler.h"

/* ---- a max-heap of ready nodes, by sequence number --------------------------------- */

typedef struct ready_heap {
    awl_node **items;
    int count, capacity;
} ready_heap;

static void heap_push(ready_heap *h, awl_node *n)
{
    if (h->count == h->capacity) {
        h->capacity = h->capacity ? 2 * h->capacity : 64;
        h->items = awl_xrealloc(h->items, (size_t)h->capacity * sizeof *h->items);
    }
    int i = h->count++;
    while (i > 0 && h->items[(i - 1) / 2]->sequence < n->sequence) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i] = n;
}

static awl_node *heap_pop(ready_heap *h)
{
    awl_node *top = h->items[0], *last = h->items[--h->count];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= h->count) break;
        if (child + 1 < h->count && h->items[child + 1]->sequence > h->items[child]->sequence)
            child++;
        if (h->items[child]->sequence <= last->sequence) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (h->count > 0) h->items[i] = last;
    return top;
}

/* ---- one backward pass ------------------------------------------------------------------ */

/* The engine's scratch fields of a node as they were before this pass
 * reached it. A nested pass (activation checkpointing) can reach nodes an
 * outer pass is still working on (the accumulate node of a parameter used
 * inside and outside the segment), so every pass puts them back. */
typedef struct scratch {
    awl_node *node;
    awl_tensor *grad, *grad_copy;
    int pending;
    bool needed;
} scratch;

typedef struct pass {
    bool retain_graph, create_graph;
    /* awl_grad: capture the gradients arriving at these nodes instead of
     * writing leaves' grad, and run only the nodes that lead to them */
    int n_targets;
    awl_node **targets;
    awl_tensor **captured;
    /* every node reached, children before their consumers (post-order) */
    scratch *nodes;
    int n_nodes, capacity;
    /* the root's gradient where it was implied (a scalar root: 1), else NULL */
    const awl_tensor *implied_one;
} pass;

/* The running pass's implied_one, for awl_grad_is_implied_one. */
static _Thread_local const awl_tensor *implied_one_now;

bool awl_grad_is_implied_one(const awl_tensor *grad) { return grad && grad == implied_one_now; }

/* Distinguishes passes without clearing node->visit. Each pass takes a
 * fresh mark, so passes in different threads over different graphs never
 * confuse each other; one graph is walked by one thread at a time. */
static atomic_int visit_mark;

static int target_index(const pass *p, const awl_node *n)
{
    for (int i = 0; i < p->n_targets; i++)
        if (p->targets[i] == n) return i;
    return -1;
}

/* Collects the nodes reachable from root in post-order (every node after
 * its inputs' nodes), then decides which are needed (all of them for
 * backward; for awl_grad those with a target at or below them) and counts,
 * for each needed node, the edges arriving from needed consumers. Iterative:
 * graphs can be deep. */
static void collect(pass *p, awl_node *root)
{
    int mark = atomic_fetch_add(&visit_mark, 1) + 1;
    typedef struct frame {
        awl_node *node;
        int next_input;
    } frame;
    frame *stack = awl_xmalloc(64 * sizeof *stack);
    int top = 0, cap = 64;
    root->visit = mark;
    stack[top++] = (frame){root, 0};
    while (top > 0) {
        frame *f = &stack[top - 1];
        if (f->next_input < f->node->n_inputs) {
            awl_node *next = f->node->inputs[f->next_input++].node;
            if (next && next->visit != mark) {
                next->visit = mark;
                if (top == cap) stack = awl_xrealloc(stack, (size_t)(cap *= 2) * sizeof *stack);
                stack[top++] = (frame){next, 0};
            }
            continue;
        }
        awl_node *n = f->node;
        top--;
        if (p->n_nodes == p->capacity) {
            p->capacity = p->capacity ? 2 * p->capacity : 64;
            p->nodes = awl_xrealloc(p->nodes, (size_t)p->capacity * sizeof *p->nodes);
        }
        p->nodes[p->n_nodes++] = (scratch){n, n->grad, n->grad_copy, n->pending, n->needed};
        n->grad = n->grad_copy = NULL;
        n->pending = 0;
        n->needed = !p->targets || target_index(p, n) >= 0;
        for (int i = 0; i < n->n_inputs && !n->needed; i++)
            n->needed = n->inputs[i].node && n->inputs[i].node->needed;
    }
    free(stack);
    for (int k = 0; k < p->n_nodes; k++) {
        awl_node *n = p->nodes[k].node;
        if (!n->needed) continue;
        for (int i = 0; i < n->n_inputs; i++)
            if (n->inputs[i].node && n->inputs[i].node->needed) n->inputs[i].node->pending++;
    }
}

/* Puts every reached node's scratch back as it was before the pass (after
 * dropping what this pass left there, e.g. partial gradients after an
 * error). */
static void restore_scratch(pass *p)
{
    for (int k = 0; k < p->n_nodes; k++) {
        scratch *s = &p->nodes[k];
        awl_release(s->node->grad);
        awl_release(s->node->grad_copy);
        s->node->grad = s->grad;
        s->node->grad_copy = s->grad_copy;
        s->node->pending = s->pending;
        s->node->needed = s->needed;
    }
}

/* Sums g over the axes along which the input was broadcast, giving the
 * input's own shape. */
static awl_tensor *sum_to_input_shape(awl_tensor *g, const awl_node_input *in)
{
    if (g->ndim == in->ndim && memcmp(g->shape, in->shape, (size_t)in->ndim * sizeof(int64_t)) == 0)
        return g;
    int dims[AWL_MAX_DIMS], n = 0;
    int lead = g->ndim - in->ndim;
    if (lead < 0) return NULL;
    for (int d = 0; d < g->ndim; d++)
        if (d < lead || (in->shape[d - lead] == 1 && g->shape[d] != 1)) dims[n++] = d;
    awl_tensor *r = n ? awl_sum(g, n, dims, true) : g;
    return awl_reshape(r, in->ndim, in->shape);
}

/* Drops a node's copy of its gradient (awl_node_offer_grad_copy), which
 * no longer matches the gradient. */
static void drop_grad_copy(awl_node *n)
{
    awl_release(n->grad_copy);
    n->grad_copy = NULL;
}

/* Adds g into a node's pending gradient. */
static int accumulate_into_node(pass *p, awl_node *target, awl_tensor *g)
{
    if (!target->grad) {
        target->grad = awl_retain(g);
        return AWL_OK;
    }
    drop_grad_copy(target); /* a copy of the gradient before this sum */
    awl_tensor *have = target->grad;
    if (have->dtype != g->dtype) {
        /* a gradient widened past a cast (awl_node_input_widens) meets one
         * of the cast's own dtype: their sum in the wider one */
        bool wider = awl_dtype_size(g->dtype) > awl_dtype_size(have->dtype);
        awl_tensor *sum =
            wider ? awl_add(awl_cast(have, g->dtype), g) : awl_add(have, awl_cast(g, have->dtype));
        if (!sum) return AWL_ERR_INVALID;
        target->grad = awl_retain(sum);
        awl_release(have);
        return AWL_OK;
    }
    /* in place when nothing else can see the buffer (saves an allocation per
     * residual connection); out of place when the sum must be recorded */
    if (!p->create_graph && have->refcount == 1 && have->storage->refcount == 1 &&
        !have->requires_grad && awl_is_contiguous(have) && have->dtype == g->dtype)
        return awl_tensor_binary_out(AWL_BINARY_ADD, have, have, g);
    awl_tensor *sum = awl_add(have, g);
    if (!sum) return AWL_ERR_INVALID;
    target->grad = awl_retain(sum);
    awl_release(have);
    return AWL_OK;
}

/* leaf->grad += g, then the leaf's hooks. */
static int accumulate_into_leaf(pass *p, awl_tensor *leaf, awl_tensor *g)
{
    awl_tensor *have = leaf->grad;
    if (p->create_graph) {
        awl_tensor *sum = have ? awl_add(have, g) : g;
        if (!sum) return AWL_ERR_INVALID;
        leaf->grad = awl_retain(sum);
        awl_release(have);
    } else if (!have) {
        /* a gradient nothing else holds can be kept as it is; a shared one
         * (passed through by add, or a view) is copied */
        bool exclusive = g->refcount == 1 && g->storage->refcount == 1 && awl_is_contiguous(g) &&
                         !g->requires_grad;
        leaf->grad = exclusive ? awl_retain(g) : awl_take(awl_tensor_clone(g));
        if (!leaf->grad) return AWL_ERR_OOM;
    } else if (have->refcount == 1 && !have->requires_grad) {
        int status = awl_tensor_binary_out(AWL_BINARY_ADD, have, have, g);
        if (status < 0) return status;
    } else {
        awl_tensor *sum = awl_tensor_binary(AWL_BINARY_ADD, have, g);
        if (!sum) return AWL_ERR_INVALID;
        leaf->grad = awl_retain(sum);
        awl_release(have);
    }
    /* a parameter's gradient (not a checkpointed segment's input's) */
    if (awl_tensor_memory_role(leaf) == AWL_MEMORY_PARAMETER)
        awl_tensor_set_memory_role(leaf->grad, AWL_MEMORY_GRADIENT);
    for (int i = 0; i < leaf->n_hooks; i++) leaf->hooks[i].fn(leaf, leaf->hooks[i].user);
    return AWL_OK;
}

awl_tensor *awl_node_take_pending_grad(awl_node *node, int i)
{
    if (awl_is_grad_enabled() || !node || i < 0 || i >= node->n_inputs) return NULL;
    const awl_node_input *in = &node->inputs[i];
    awl_tensor *g = in->node && in->node->needed ? in->node->grad : NULL;
    if (!g || g->dtype != in->dtype || g->ndim != in->ndim ||
        memcmp(g->shape, in->shape, (size_t)in->ndim * sizeof(int64_t)) != 0)
        return NULL;
    in->node->grad = NULL;
    drop_grad_copy(in->node); /* g will be summed into another gradient */
    return awl_adopt(g);
}

bool awl_node_input_wants_grad_copy(const awl_node *node, int i, awl_dtype *dtype)
{
    if (awl_is_grad_enabled() || !node || i < 0 || i >= node->n_inputs) return false;
    const awl_node *src = node->inputs[i].node;
    /* pending counts the edges still to deliver, this node's among them */
    if (!src || !src->needed || !src->wants_grad_copy || src->grad || src->pending != 1)
        return false;
    *dtype = src->grad_copy_dtype;
    return true;
}

int awl_node_offer_grad_copy(awl_node *node, int i, awl_tensor *copy)
{
    awl_dtype dtype;
    if (!copy || !awl_node_input_wants_grad_copy(node, i, &dtype) || copy->dtype != dtype ||
        copy->ndim != node->inputs[i].ndim ||
        memcmp(copy->shape, node->inputs[i].shape, (size_t)copy->ndim * sizeof(int64_t)) != 0)
        return awl_error(AWL_ERR_INVALID,
                         "awl_node_offer_grad_copy: %s offered a gradient copy that input %d's "
                         "producer did not ask for, or of another shape or dtype",
                         node ? node->base.name : "(null)", i);
    awl_node *src = node->inputs[i].node;
    drop_grad_copy(src);
    src->grad_copy = awl_retain(copy);
    return AWL_OK;
}

awl_tensor *awl_node_take_grad_copy(awl_node *node, awl_dtype dtype)
{
    if (!node || !node->grad_copy || node->grad_copy->dtype != dtype) return NULL;
    awl_tensor *copy = node->grad_copy;
    node->grad_copy = NULL;
    return awl_adopt(copy);
}

/* An error when a tensor n saved for backward has been written in place
 * since (awl_tensor_version): its backward would read the new values and
 * give a wrong gradient without a word. */
static int check_saved_versions(const awl_node *n)
{
    for (int i = 0; i < n->n_saved; i++) {
        const awl_tensor *t = n->saved[i];
        if (!t || awl_tensor_version(t) == n->saved_version[i]) continue;
        char s[160];
        return awl_error(AWL_ERR_INVALID,
                         "awl_backward: a tensor of shape %s that %s saved for its gradient was "
                         "modified in place after it was saved (its storage's version is %llu, "
                         "%llu when saved); change a copy (awl_clone), or change it after "
                         "backward",
                         awl_shape_str(t, s, sizeof s), n->base.name,
                         (unsigned long long)awl_tensor_version(t),
                         (unsigned long long)n->saved_version[i]);
    }
    return AWL_OK;
}

/* Runs one node: its backward function, then hands each input's gradient
 * to the input's node. The node's grad has been taken out of it (g). */
static int run_node(pass *p, awl_node *n, awl_tensor *g)
{
    if (n->leaf) return p->targets ? AWL_OK : accumulate_into_leaf(p, n->leaf, g);
    bool any_needed = false; /* awl_grad stops at its targets */
    for (int i = 0; i < n->n_inputs; i++)
        any_needed |= n->inputs[i].node && n->inputs[i].node->needed;
    if (!any_needed) return AWL_OK;
    if (n->released)
        return awl_error(AWL_ERR_INVALID,
                         "awl_backward: backward through %s a second time, but its saved tensors "
                         "were freed; pass retain_graph to the first backward",
                         n->base.name);
    int saved_ok = check_saved_versions(n);
    if (saved_ok < 0) return saved_ok;
    awl_tensor *grads_small[4] = {NULL};
    awl_tensor **grads =
        n->n_inputs <= 4 ? grads_small : awl_xcalloc((size_t)n->n_inputs, sizeof *grads);
    unsigned long errors_before = awl_error_count();
    int status = n->backward(n, g, grads);
    /* a backward function built from ops may return 0 with a NULL gradient
     * when one of its ops failed: the recorded error is the truth */
    if (status == AWL_OK && awl_error_count() != errors_before)
        status = awl_last_error_code() < 0 ? awl_last_error_code() : AWL_ERR_INVALID;
    for (int i = 0; status == AWL_OK && i < n->n_inputs; i++) {
        const awl_node_input *in = &n->inputs[i];
        if (!in->node || !in->node->needed || !grads[i]) continue;
        awl_tensor *gi = sum_to_input_shape(grads[i], in);
        if (gi != grads[i]) drop_grad_copy(in->node); /* a copy of grads[i], not of its sum */
        if (!gi || gi->ndim != in->ndim ||
            memcmp(gi->shape, in->shape, (size_t)in->ndim * sizeof(int64_t)) != 0) {
            char s1[160], s2[160];
            status = awl_error(AWL_ERR_INVALID,
                               "awl_backward: %s gave a gradient of shape %s for input %d of "
                               "shape %s",
                               n->base.name, awl_shape_str(grads[i], s1, sizeof s1), i,
                               awl_format_shape(in->ndim, in->shape, s2, sizeof s2));
            break;
        }
        status = accumulate_into_node(p, in->node, gi);
    }
    if (grads != grads_small) free(grads);
    if (status == AWL_OK && !p->retain_graph) awl_node_free_saved(n);
    return status;
}

static int run_pass(pass *p, awl_node *root, awl_tensor *root_grad)
{
    bool previous_mode = awl_set_grad_enabled(p->create_graph);
    collect(p, root);
    if (!root->needed) { /* awl_grad: no target below the root */
        restore_scratch(p);
        free(p->nodes);
        awl_set_grad_enabled(previous_mode);
        return AWL_OK;
    }
    const awl_tensor *outer_implied = implied_one_now; /* a pass inside a backward */
    implied_one_now = p->implied_one;
    root->grad = awl_retain(root_grad);
    ready_heap ready = {0};
    heap_push(&ready, root);
    int status = AWL_OK;
    while (ready.count > 0 && status == AWL_OK) {
        awl_node *n = heap_pop(&ready);
        awl_tensor *g = n->grad;
        n->grad = NULL;
        int t = p->targets ? target_index(p, n) : -1;
        if (t >= 0) p->captured[t] = awl_retain(g);
        awl_scope_begin();
        awl_profiler_begin(AWL_PROFILE_OP, n->base.name); /* each node's backward in a trace */
        if (g) status = run_node(p, n, g);
        awl_profiler_end();
        awl_scope_end();
        awl_release(g);
        drop_grad_copy(n); /* one its backward did not take */
        for (int i = 0; status == AWL_OK && i < n->n_inputs; i++) {
            awl_node *next = n->inputs[i].node;
            if (next && next->needed && --next->pending == 0) heap_push(&ready, next);
        }
    }
    implied_one_now = outer_implied;
    restore_scratch(p);
    free(ready.items);
    free(p->nodes);
    awl_set_grad_enabled(previous_mode);
    return status;
}

/* The node a backward pass starts from (one more reference). */
static awl_node *start_node(awl_tensor *t)
{
    if (t->grad_fn) {
        t->grad_fn->refcount++;
        return awl_grad_fn(t);
    }
    return awl_grad_accumulator(t);
}

/* The gradient backward starts from: options->grad, or 1 for a scalar. */
static awl_tensor *seed_gradient(const char *op, awl_tensor *root, const awl_backward_options *o)
{
    char s1[160], s2[160];
    if (!root->requires_grad) {
        awl_error(AWL_ERR_INVALID,
                  "%s: the tensor does not require grad: no input of its "
                  "computation requires grad (or it was computed in no-grad mode)",
                  op);
        return NULL;
    }
    if (o && o->grad) {
        if (!awl_same_shape(o->grad, root)) {
            awl_error(AWL_ERR_INVALID, "%s: gradient of shape %s for a tensor of shape %s", op,
                      awl_shape_str(o->grad, s1, sizeof s1), awl_shape_str(root, s2, sizeof s2));
            return NULL;
        }
        return o->grad;
    }
    if (awl_numel(root) != 1) {
        awl_error(AWL_ERR_INVALID,
                  "%s: a gradient can be implied only for a scalar; this tensor "
                  "has shape %s, so pass options.grad",
                  op, awl_shape_str(root, s1, sizeof s1));
        return NULL;
    }
    return awl_ones_like(root);
}

int awl_backward_ex(awl_tensor *root, const awl_backward_options *options)
{
    if (!root) return AWL_ERR_INVALID; /* an earlier op failed: keep its message */
    awl_scope_begin();
    awl_tensor *grad = seed_gradient("awl_backward", root, options);
    int status = AWL_ERR_INVALID;
    if (grad) {
        pass p = {0};
        p.retain_graph = options && (options->retain_graph || options->create_graph);
        p.create_graph = options && options->create_graph;
        p.implied_one = options && options->grad ? NULL : grad;
        awl_node *start = start_node(root);
        awl_profiler_begin(AWL_PROFILE_PHASE, "backward");
        status = run_pass(&p, start, grad);
        awl_profiler_end();
        awl_node_release(start);
    }
    awl_scope_end();
    return status;
}

int awl_backward(awl_tensor *root) { return awl_backward_ex(root, NULL); }

int awl_grad(awl_tensor *root, int n, awl_tensor *const *inputs, awl_tensor **grads,
             const awl_backward_options *options)
{
    if (!root) return AWL_ERR_INVALID;
    for (int i = 0; i < n; i++) {
        grads[i] = NULL;
        if (!inputs[i]) return AWL_ERR_INVALID;
        if (!inputs[i]->requires_grad)
            return awl_error(AWL_ERR_INVALID, "awl_grad: input %d does not require grad", i);
    }
    awl_scope_begin();
    awl_tensor *grad = seed_gradient("awl_grad", root, options);
    int status = AWL_ERR_INVALID;
    awl_node **targets = awl_xcalloc((size_t)(n > 0 ? n : 1), sizeof *targets);
    if (grad) {
        pass p = {0};
        p.retain_graph = options && (options->retain_graph || options->create_graph);
        p.create_graph = options && options->create_graph;
        p.implied_one = options && options->grad ? NULL : grad;
        for (int i = 0; i < n; i++) targets[i] = start_node(inputs[i]);
        p.n_targets = n;
        p.targets = targets;
        p.captured = grads;
        awl_node *start = start_node(root);
        status = run_pass(&p, start, grad);
        awl_node_release(start);
        for (int i = 0; i < n; i++) awl_node_release(targets[i]);
    }
    free(targets);
    awl_scope_end();
    for (int i = 0; i < n; i++) { /* captured references go to the caller's scope */
        if (status < 0) {
            awl_release(grads[i]);
            grads[i] = NULL;
        } else if (grads[i] && grads[i]->dtype != inputs[i]->dtype) {
            /* a gradient widened past a cast comes back in the input's own
             * dtype, as every gradient awl_grad returns */
            awl_tensor *own = awl_cast(grads[i], inputs[i]->dtype);
            awl_release(grads[i]);
            grads[i] = own;
            if (!own) status = AWL_ERR_INVALID;
        } else {
            awl_adopt(grads[i]);
        }
    }
    return status;
}
