/*
 * dist/buckets.c - gradients in flat buckets, and the hooks that say when
 * a bucket is complete (see buckets.h).
 */
#include <stdlib.h>
#include <string.h>

#include "dist/buckets.h"
#include "tensor/profiler.h"

/* ---- checking that every rank has the same parameters ------------------------------------ */

/* "name dtype (2,3)" of one parameter. */
static void describe(const dist_param *p, char *buf, size_t size)
{
    char shape[96];
    snprintf(buf, size, "%s %s %s", p->name, awl_dtype_name(p->t->dtype),
             awl_shape_str(p->t, shape, sizeof shape));
}

/* Every parameter's description, one per line, into a malloc'd string. */
static char *describe_all(const dist_buckets *d, size_t *len)
{
    size_t cap = 256, at = 0;
    char *text = malloc(cap), line[512];
    for (int i = 0; i < d->n_params; i++) {
        describe(&d->params[i], line, sizeof line);
        size_t n = strlen(line);
        if (at + n + 2 > cap) text = realloc(text, cap = 2 * (at + n + 2));
        memcpy(text + at, line, n);
        at += n;
        text[at++] = '\n';
    }
    text[at] = '\0';
    *len = at;
    return text;
}

/* The line'th line of text (0-based) into buf ("" past the end). */
static void nth_line(const char *text, int line, char *buf, size_t size)
{
    for (int i = 0; i < line && text; i++) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    const char *end = text ? strchr(text, '\n') : NULL;
    snprintf(buf, size, "%.*s", text && end ? (int)(end - text) : 0, text ? text : "");
}

/* Broadcasts rank 0's description and compares. Every rank returns the
 * same verdict. */
static int check_same_parameters(dist_buckets *d, const char *op)
{
    awl_process_group *pg = d->pg;
    size_t len;
    char *mine = describe_all(d, &len);
    int status = AWL_OK;
    awl_scope_begin();
    /* the text travels as int32 words */
    int32_t n_words = (int32_t)((len + 4) / 4);
    awl_tensor *size = awl_from_data(&n_words, AWL_SHAPE(1), AWL_I32, "cpu");
    status = awl_dist_broadcast(pg, size, 0);
    int32_t theirs_words = 0;
    if (status == AWL_OK) awl_to_host(size, &theirs_words, sizeof theirs_words);
    int32_t *words = calloc((size_t)(theirs_words > n_words ? theirs_words : n_words) + 1, 4);
    if (pg->rank == 0) memcpy(words, mine, len + 1);
    awl_tensor *text = status == AWL_OK
                           ? awl_from_data(words, AWL_SHAPE(theirs_words), AWL_I32, "cpu")
                           : NULL;
    if (status == AWL_OK) status = awl_dist_broadcast(pg, text, 0);
    if (status == AWL_OK) awl_to_host(text, words, (size_t)theirs_words * 4);
    const char *reference = (const char *)words;
    /* the first line that differs from rank 0's, or -1 */
    int32_t differs = -1;
    int lines = d->n_params + 1;
    for (int i = 0; i < lines && status == AWL_OK; i++) {
        char a[512], b[512];
        nth_line(mine, i, a, sizeof a);
        nth_line(reference, i, b, sizeof b);
        if (strcmp(a, b) != 0) {
            differs = i;
            break;
        }
    }
    if (status == AWL_OK && differs < 0 && strlen(reference) != len) differs = d->n_params;
    int32_t *all = calloc((size_t)pg->world, sizeof *all);
    awl_tensor *verdicts = awl_empty(AWL_SHAPE(pg->world), AWL_I32, "cpu");
    awl_tensor *one = awl_from_data(&differs, AWL_SHAPE(1), AWL_I32, "cpu");
    if (status == AWL_OK) status = awl_dist_allgather(pg, verdicts, one);
    if (status == AWL_OK) awl_to_host(verdicts, all, (size_t)pg->world * sizeof *all);
    for (int r = 0; r < pg->world && status == AWL_OK; r++) {
        if (all[r] < 0) continue;
        char a[512], b[512];
        nth_line(reference, all[r], b, sizeof b);
        if (r == pg->rank) {
            nth_line(mine, all[r], a, sizeof a);
            status = awl_error(AWL_ERR_INVALID,
                               "%s: the ranks' parameters differ: parameter #%d of rank %d is '%s', "
                               "rank 0 has '%s'",
                               op, all[r], r, a[0] ? a : "(none: fewer parameters)",
                               b[0] ? b : "(none: fewer parameters)");
        } else {
            status = awl_error(AWL_ERR_INVALID,
                               "%s: the ranks' parameters differ: rank %d's parameter #%d is not "
                               "rank 0's '%s' (rank %d's message names it)",
                               op, r, all[r], b[0] ? b : "(none: fewer parameters)", r);
        }
    }
    awl_scope_end();
    free(all);
    free(words);
    free(mine);
    return status;
}

/* ---- views and hooks -------------------------------------------------------------------- */

static bool is_our_view(const dist_param *p)
{
    const awl_tensor *g = p->t->grad;
    const dist_bucket *k = &p->owner->buckets[p->bucket];
    return g && k->flat && g->storage == k->flat->storage && g->offset == p->offset &&
           awl_is_contiguous(g);
}

/* Makes p's gradient the view of its bucket, keeping the values of a
 * gradient it has (copy), or zeroes (a fresh bucket is zero). */
static int install_view(dist_param *p, bool copy)
{
    dist_bucket *k = &p->owner->buckets[p->bucket];
    awl_tensor *t = p->t;
    int64_t strides[AWL_MAX_DIMS], s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= t->shape[d];
    }
    awl_scope_begin();
    awl_tensor *view = awl_tensor_as_strided(k->flat, t->ndim, t->shape, strides, p->offset);
    int status = view ? AWL_OK : AWL_ERR_INVALID;
    if (status == AWL_OK && copy && t->grad) status = awl_tensor_copy_(view, t->grad);
    if (status == AWL_OK) status = awl_set_grad(t, view);
    awl_scope_end();
    return status;
}

static int allocate(dist_buckets *b, dist_bucket *k)
{
    const dist_param *last = &b->params[k->first + k->n - 1];
    char device[32];
    awl_tensor_device_name(last->t, device, sizeof device);
    awl_scope_begin();
    k->flat = awl_retain(awl_zeros(AWL_SHAPE(k->numel), last->t->dtype, device));
    awl_scope_end();
    awl_tensor_set_memory_role(k->flat, AWL_MEMORY_GRADIENT);
    return k->flat ? AWL_OK : AWL_ERR_OOM;
}

/* Hands every complete bucket whose predecessors have all gone to the owner. */
static void launch_ready(dist_buckets *b)
{
    while (b->next_launch < b->n_buckets && b->buckets[b->next_launch].pending == 0) {
        dist_bucket *k = &b->buckets[b->next_launch++];
        char name[32];
        snprintf(name, sizeof name, "bucket %d", (int)(k - b->buckets));
        awl_profiler_async_begin(name, (uint64_t)(uintptr_t)k); /* sent; done in the wait */
        b->launch(b, k, b->user);
        if (!k->work && !b->error[0])
            snprintf(b->error, sizeof b->error, "bucket %d could not start: %s",
                     (int)(k - b->buckets), awl_last_error());
    }
}

static void on_grad_ready(awl_tensor *leaf, void *user)
{
    dist_param *p = user;
    dist_buckets *b = p->owner;
    dist_bucket *k = &b->buckets[p->bucket];
    (void)leaf;
    if (b->no_sync) return;
    if (p->ready) {
        if (!b->error[0])
            snprintf(b->error, sizeof b->error,
                     "the gradient of '%s' was completed twice in one backward (its bucket may "
                     "have been sent already): is it used both inside and outside a checkpointed "
                     "segment, or was backward run twice before the step?",
                     p->name);
        return;
    }
    int status = k->flat || allocate(b, k) == AWL_OK ? AWL_OK : AWL_ERR_OOM;
    if (status == AWL_OK && !is_our_view(p)) status = install_view(p, true);
    if (status < 0 && !b->error[0])
        snprintf(b->error, sizeof b->error, "cannot put '%s''s gradient in its bucket: %s", p->name,
                 awl_last_error());
    p->ready = true;
    k->pending--;
    if (k->pending == 0 && awl_profiler_recording()) {
        char name[32];
        snprintf(name, sizeof name, "bucket %d ready", p->bucket);
        awl_profiler_instant(AWL_PROFILE_COMM, name);
    }
    if (b->overlap) launch_ready(b);
}

/* ---- building ---------------------------------------------------------------------------- */

static void plan(dist_buckets *b, int64_t first_cap, int64_t cap)
{
    b->buckets = calloc((size_t)b->n_params + 1, sizeof *b->buckets);
    int64_t bytes = 0;
    for (int i = 0; i < b->n_params; i++) {
        dist_param *p = &b->params[i];
        int64_t size = awl_numel(p->t) * (int64_t)awl_dtype_size(p->t->dtype);
        int64_t limit = b->n_buckets <= 1 ? first_cap : cap;
        dist_bucket *k = b->n_buckets ? &b->buckets[b->n_buckets - 1] : NULL;
        bool fits = k && bytes + size <= limit && b->params[k->first].t->dtype == p->t->dtype &&
                    awl_same_device(b->params[k->first].t, p->t);
        if (!fits) {
            k = &b->buckets[b->n_buckets++];
            k->first = i;
            k->start = b->numel;
            bytes = 0;
        }
        p->bucket = (int)(k - b->buckets);
        p->offset = bytes / (int64_t)awl_dtype_size(p->t->dtype);
        k->n++;
        k->numel += awl_numel(p->t);
        b->numel += awl_numel(p->t);
        bytes += size;
    }
    for (int i = 0; i < b->n_buckets; i++) b->buckets[i].pending = b->buckets[i].n;
}

int awl_dist_buckets_init(dist_buckets *b, awl_process_group *pg, const awl_param_list *params,
                      const dist_buckets_options *o, dist_launch_fn launch, void *user,
                      const char *op)
{
    memset(b, 0, sizeof *b);
    b->pg = pg;
    b->overlap = o->overlap;
    b->find_unused = o->find_unused;
    b->lazy = o->lazy;
    b->launch = launch;
    b->user = user;
    b->params = calloc((size_t)params->count + 1, sizeof *b->params);
    /* reverse order; a tensor listed twice (tied weights) once */
    for (int i = params->count - 1; i >= 0; i--) {
        awl_tensor *t = params->items[i].tensor;
        bool seen = !t->requires_grad;
        for (int j = 0; j < i && !seen; j++) seen = params->items[j].tensor == t;
        if (seen) continue;
        b->params[b->n_params++] = (dist_param){b, params->items[i].name, t, 0, 0, false, false};
    }
    int status = check_same_parameters(b, op);
    /* rank 0's values everywhere */
    awl_work **works = calloc((size_t)b->n_params + 1, sizeof *works);
    for (int i = 0; i < b->n_params && status == AWL_OK; i++)
        works[i] = awl_dist_broadcast_async(pg, b->params[i].t, 0);
    for (int i = 0; i < b->n_params; i++) {
        int s = works[i] ? awl_work_wait(works[i]) : AWL_OK;
        if (status == AWL_OK) status = s;
    }
    free(works);
    if (status < 0) return status;
    plan(b, o->first_cap > 0 ? o->first_cap : 1 << 20, o->cap > 0 ? o->cap : 25 << 20);
    for (int k = 0; k < b->n_buckets && !b->lazy; k++)
        if (allocate(b, &b->buckets[k]) < 0) return AWL_ERR_OOM;
    for (int i = 0; i < b->n_params; i++) {
        dist_param *p = &b->params[i];
        if (b->lazy)
            awl_clear_grad(p->t);
        else if ((status = install_view(p, true)) < 0)
            return status;
        if ((status = awl_register_grad_hook(p->t, on_grad_ready, p)) < 0) return status;
        p->hooked = true;
    }
    return AWL_OK;
}

void awl_dist_buckets_clear(dist_buckets *b)
{
    for (int k = 0; k < b->n_buckets; k++) awl_dist_buckets_wait(b, k);
    for (int i = 0; i < b->n_params; i++) {
        dist_param *p = &b->params[i];
        if (p->hooked) awl_remove_grad_hook(p->t, on_grad_ready, p);
        if (b->buckets && is_our_view(p)) {
            awl_scope_begin();
            awl_set_grad(p->t, awl_tensor_clone(p->t->grad));
            awl_scope_end();
        }
    }
    for (int k = 0; k < b->n_buckets; k++) awl_release(b->buckets[k].flat);
    free(b->buckets);
    free(b->params);
    memset(b, 0, sizeof *b);
}

/* ---- the step ------------------------------------------------------------------------------ */

int awl_dist_buckets_finish(dist_buckets *b, const char *op)
{
    if (b->error[0]) return awl_error(AWL_ERR_INVALID, "%s: %s", op, b->error);
    if (b->next_launch == b->n_buckets) return AWL_OK;
    char names[400] = "";
    size_t at = 0;
    int missing = 0;
    for (int i = 0; i < b->n_params; i++) {
        dist_param *p = &b->params[i];
        if (p->ready) continue;
        if (b->find_unused) {
            dist_bucket *k = &b->buckets[p->bucket];
            if (!k->flat && allocate(b, k) < 0) return AWL_ERR_OOM;
            if (!is_our_view(p) && install_view(p, true) < 0) return AWL_ERR_OOM;
            p->ready = true;
            k->pending--;
            continue;
        }
        if (at < sizeof names - 64)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s'%s'", missing ? ", " : "",
                                   p->name);
        missing++;
    }
    if (missing)
        return awl_error(AWL_ERR_INVALID,
                         "%s: %d parameter%s received no gradient in this backward: %s%s; leave "
                         "%s out of the list, or set find_unused_parameters",
                         op, missing, missing > 1 ? "s" : "", names,
                         at >= sizeof names - 64 ? ", ..." : "", missing > 1 ? "them" : "it");
    launch_ready(b);
    return b->error[0] ? awl_error(AWL_ERR_DIST, "%s: %s", op, b->error) : AWL_OK;
}

int awl_dist_buckets_wait(dist_buckets *b, int k)
{
    dist_bucket *bucket = &b->buckets[k];
    if (!bucket->work) return AWL_OK;
    double busy = 0;
    int status = awl_dist_work_wait(bucket->work, &busy);
    awl_profiler_async_end((uint64_t)(uintptr_t)bucket);
    bucket->work = NULL;
    bucket->busy_s += busy;
    return status;
}

int awl_dist_buckets_finish_and_wait(dist_buckets *b, const char *op, bool release, double *comm_s)
{
    int status = awl_dist_buckets_finish(b, op);
    *comm_s = 0;
    for (int k = 0; k < b->n_buckets; k++) {
        b->buckets[k].busy_s = 0;
        int s = awl_dist_buckets_wait(b, k);
        *comm_s += b->buckets[k].busy_s;
        if (status == AWL_OK) status = s;
        if (release) awl_dist_buckets_release(b, k);
    }
    return status;
}

void awl_dist_buckets_reset(dist_buckets *b)
{
    for (int k = 0; k < b->n_buckets; k++) b->buckets[k].pending = b->buckets[k].n;
    for (int i = 0; i < b->n_params; i++) b->params[i].ready = false;
    b->next_launch = 0;
    b->error[0] = '\0';
}

int awl_dist_buckets_zero(dist_buckets *b)
{
    for (int k = 0; k < b->n_buckets; k++) {
        dist_bucket *bucket = &b->buckets[k];
        if (!bucket->flat) continue;
        int status = awl_tensor_fill_(bucket->flat, 0.0);
        if (status < 0) return status;
    }
    for (int i = 0; i < b->n_params && !b->lazy; i++)
        if (!is_our_view(&b->params[i])) {
            awl_clear_grad(b->params[i].t);
            int status = install_view(&b->params[i], false);
            if (status < 0) return status;
        }
    return AWL_OK;
}

void awl_dist_buckets_release(dist_buckets *b, int k)
{
    dist_bucket *bucket = &b->buckets[k];
    for (int i = bucket->first; i < bucket->first + bucket->n; i++) awl_clear_grad(b->params[i].t);
    awl_release(bucket->flat);
    bucket->flat = NULL;
}

int64_t awl_dist_buckets_bytes(const dist_buckets *b)
{
    int64_t bytes = 0;
    for (int k = 0; k < b->n_buckets; k++)
        if (b->buckets[k].flat)
            bytes += b->buckets[k].numel * (int64_t)awl_dtype_size(b->buckets[k].flat->dtype);
    return bytes;
}
