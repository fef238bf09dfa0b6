/*
 * tensor/scope.c - reference counts and scopes: who frees a tensor, when.
 *
 * Lifetime is two mechanisms layered on one reference count.
 *
 * Reference counts: a tensor struct counts the references to it; a storage
 * counts the tensors (views) that use it. Releasing the last reference to a
 * tensor drops its storage, its gradient and its graph node.
 *
 * Scopes: every tensor created while a scope is open gets its first
 * reference owned by that scope, which releases it at awl_scope_end(). This
 * is an autorelease pool, as in Objective-C: it lets expressions nest
 * (awl_mul(awl_add(a, b), c)) without naming and freeing each temporary,
 * while the graph keeps exactly the tensors backward needs by holding its
 * own references. awl_keep() moves a tensor's reference one scope outward.
 *
 * The scope stack is thread-local: each thread has its own. Reference
 * counts are plain integers, so a tensor is retained and released by one
 * thread at a time (docs/architecture.md, "Threads").
 */
#include "tensor/tensor_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct scope {
    awl_tensor **owned;
    int count, capacity;
} scope;

static _Thread_local scope *scopes;
static _Thread_local int scope_count, scope_capacity;

int awl_scope_depth(void) { return scope_count; }

void awl_scope_begin(void)
{
    if (scope_count == scope_capacity) {
        int cap = scope_capacity ? 2 * scope_capacity : 8;
        scopes = awl_xrealloc(scopes, (size_t)cap * sizeof *scopes);
        memset(scopes + scope_capacity, 0, (size_t)(cap - scope_capacity) * sizeof *scopes);
        scope_capacity = cap;
    }
    scopes[scope_count++].count = 0; /* the owned array is reused across scopes */
}

static void scope_push(scope *s, awl_tensor *t)
{
    if (s->count == s->capacity) {
        s->capacity = s->capacity ? 2 * s->capacity : 64;
        s->owned = awl_xrealloc(s->owned, (size_t)s->capacity * sizeof *s->owned);
    }
    s->owned[s->count++] = t;
}

void awl_scope_end(void)
{
    if (scope_count == 0) {
        fprintf(stderr, "awl: awl_scope_end without awl_scope_begin\n");
        return;
    }
    scope *s = &scopes[scope_count - 1];
    /* Newest first: a view dies before the tensor it views. Releasing may run
     * graph destructors but never opens or closes scopes. */
    for (int i = s->count - 1; i >= 0; i--) awl_release(s->owned[i]);
    s->count = 0;
    scope_count--;
    if (scope_count == 0) { /* outside every scope: give the memory back */
        for (int i = 0; i < scope_capacity; i++) free(scopes[i].owned);
        free(scopes);
        scopes = NULL;
        scope_capacity = 0;
    }
}

/* Removes one occurrence of t from the current scope; false if absent. */
static bool scope_remove(awl_tensor *t)
{
    if (scope_count == 0) return false;
    scope *cur = &scopes[scope_count - 1];
    for (int i = cur->count - 1; i >= 0; i--) {
        if (cur->owned[i] == t) {
            cur->owned[i] = cur->owned[--cur->count];
            return true;
        }
    }
    return false;
}

awl_tensor *awl_keep(awl_tensor *t)
{
    if (!t || scope_count == 0) return t;
    if (!scope_remove(t)) t->refcount++; /* not ours to move: hand out a new reference */
    if (scope_count > 1) scope_push(&scopes[scope_count - 2], t);
    return t;
}

void awl_discard(awl_tensor *t)
{
    if (!t) return;
    scope_remove(t);
    awl_release(t);
}

awl_tensor *awl_take(awl_tensor *t)
{
    if (t) scope_remove(t);
    return t;
}

awl_tensor *awl_adopt(awl_tensor *t)
{
    if (t && scope_count > 0) scope_push(&scopes[scope_count - 1], t);
    return t;
}

awl_tensor *awl_retain(awl_tensor *t)
{
    if (t) t->refcount++;
    return t;
}

void awl_release(awl_tensor *t)
{
    if (!t || --t->refcount > 0) return;
    awl_storage_release(t->storage);
    awl_release(t->grad);
    if (t->grad_fn && --t->grad_fn->refcount == 0) t->grad_fn->destroy(t->grad_fn);
    free(t->hooks);
    free(t);
}
