/*
 * dist/ddp.c - DistributedDataParallel: gradients averaged across ranks
 * while backward is still running (see dist.h for the usage).
 *
 * Buckets. The parameters are taken in reverse order (backward produces
 * the last layers' gradients first) and packed into flat buckets: the
 * first at most first_bucket_bytes, so that communication starts early,
 * the others at most bucket_cap_bytes. Each parameter's gradient is then
 * made a view into its bucket (awl_set_grad), so the engine accumulates
 * straight into the bucket and nothing is copied before sending.
 *
 * Readiness. A gradient hook (autograd/) fires once per backward for each
 * parameter, when its gradient is complete. The hook counts the bucket's
 * missing parameters down; when a bucket is complete and every bucket
 * before it has been sent, it goes to the communication thread as an
 * asynchronous allreduce (average). Buckets are always sent in index
 * order, so every rank issues the same collectives in the same order even
 * when backward completes them in another. awl_ddp_wait sends what is
 * left (with find_unused_parameters, parameters that got no gradient count
 * as ready) and waits for all of them.
 *
 * A gradient that is not the bucket's view when its hook fires (the user
 * set gradients to None, say) is copied into the bucket and the view put
 * back: correct, but a copy; awl_ddp_zero_grad keeps the views.
 */
#include <stdlib.h>
#include <string.h>

#include "dist/dist_internal.h"
#include "dist/net.h"

typedef struct ddp_param {
    struct awl_ddp *ddp;
    const char *name;
    awl_tensor *t;
    int bucket;
    int64_t offset; /* its first element in the bucket */
    bool ready, hooked;
} ddp_param;

typedef struct ddp_bucket {
    awl_tensor *flat;
    int first, n; /* its parameters, ddp->params[first .. first + n) */
    int pending;  /* of them, not ready in this backward */
    awl_work *work;
} ddp_bucket;

struct awl_ddp {
    awl_process_group *pg;
    ddp_param *params; /* in bucket order: the reverse of the list */
    int n_params;
    ddp_bucket *buckets;
    int n_buckets;
    int next_launch;
    bool no_sync, overlap, find_unused;
    char error[512]; /* found by a hook, reported by awl_ddp_wait */
    awl_ddp_stats stats;
};

/* ---- checking that every rank has the same parameters ------------------------------------ */

/* "name dtype (2,3)" of one parameter. */
static void describe(const ddp_param *p, char *buf, size_t size)
{
    char shape[96];
    snprintf(buf, size, "%s %s %s", p->name, awl_dtype_name(p->t->dtype),
             awl_shape_str(p->t, shape, sizeof shape));
}

/* Every parameter's description, one per line, into a malloc'd string. */
static char *describe_all(const awl_ddp *d, size_t *len)
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
static int check_same_parameters(awl_ddp *d)
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
                               "awl_ddp_new: the ranks' parameters differ: parameter #%d of rank %d "
                               "is '%s', rank 0 has '%s'",
                               all[r], r, a[0] ? a : "(none: fewer parameters)",
                               b[0] ? b : "(none: fewer parameters)");
        } else {
            status = awl_error(AWL_ERR_INVALID,
                               "awl_ddp_new: the ranks' parameters differ: rank %d's parameter #%d "
                               "is not rank 0's '%s' (rank %d's message names it)",
                               r, all[r], b[0] ? b : "(none: fewer parameters)", r);
        }
    }
    awl_scope_end();
    free(all);
    free(words);
    free(mine);
    return status;
}

/* ---- buckets and hooks ----------------------------------------------------------------------- */

static bool is_our_view(const ddp_param *p)
{
    const awl_tensor *g = p->t->grad;
    const ddp_bucket *b = &p->ddp->buckets[p->bucket];
    return g && g->storage == b->flat->storage && g->offset == p->offset && awl_is_contiguous(g);
}

/* Makes p's gradient the view of its bucket, keeping the values of a
 * gradient it has (copy), or zeroes (a fresh bucket is zero). */
static int install_view(ddp_param *p, bool copy)
{
    ddp_bucket *b = &p->ddp->buckets[p->bucket];
    awl_tensor *t = p->t;
    int64_t strides[AWL_MAX_DIMS], s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= t->shape[d];
    }
    awl_scope_begin();
    awl_tensor *view = awl_tensor_as_strided(b->flat, t->ndim, t->shape, strides, p->offset);
    int status = view ? AWL_OK : AWL_ERR_INVALID;
    if (status == AWL_OK && copy && t->grad) status = awl_tensor_copy_(view, t->grad);
    if (status == AWL_OK) status = awl_set_grad(t, view);
    awl_scope_end();
    return status;
}

static void launch(awl_ddp *d, ddp_bucket *b)
{
    b->work = awl_dist_allreduce_async(d->pg, b->flat, AWL_DIST_AVG);
    if (!b->work && !d->error[0])
        snprintf(d->error, sizeof d->error, "awl_ddp: bucket %d could not start: %s",
                 (int)(b - d->buckets), awl_last_error());
}

/* Sends every complete bucket whose predecessors have all been sent. */
static void launch_ready(awl_ddp *d)
{
    while (d->next_launch < d->n_buckets && d->buckets[d->next_launch].pending == 0)
        launch(d, &d->buckets[d->next_launch++]);
}

static void on_grad_ready(awl_tensor *leaf, void *user)
{
    ddp_param *p = user;
    awl_ddp *d = p->ddp;
    (void)leaf;
    if (d->no_sync) return;
    if (p->ready) {
        if (!d->error[0])
            snprintf(d->error, sizeof d->error,
                     "awl_ddp: the gradient of '%s' was completed twice in one backward (its "
                     "bucket may have been sent already): is it used both inside and outside a "
                     "checkpointed segment, or was backward run twice before awl_ddp_wait?",
                     p->name);
        return;
    }
    if (!is_our_view(p) && install_view(p, true) < 0 && !d->error[0])
        snprintf(d->error, sizeof d->error, "awl_ddp: cannot put '%s''s gradient in its bucket: %s",
                 p->name, awl_last_error());
    p->ready = true;
    d->buckets[p->bucket].pending--;
    if (d->overlap) launch_ready(d);
}

static void build_buckets(awl_ddp *d, int64_t first_cap, int64_t cap)
{
    d->buckets = calloc((size_t)d->n_params + 1, sizeof *d->buckets);
    int64_t bytes = 0;
    for (int i = 0; i < d->n_params; i++) {
        ddp_param *p = &d->params[i];
        int64_t size = awl_numel(p->t) * (int64_t)awl_dtype_size(p->t->dtype);
        int64_t limit = d->n_buckets <= 1 ? first_cap : cap;
        ddp_bucket *b = d->n_buckets ? &d->buckets[d->n_buckets - 1] : NULL;
        bool fits = b && bytes + size <= limit && d->params[b->first].t->dtype == p->t->dtype &&
                    awl_same_device(d->params[b->first].t, p->t);
        if (!fits) {
            b = &d->buckets[d->n_buckets++];
            b->first = i;
            bytes = 0;
        }
        p->bucket = (int)(b - d->buckets);
        p->offset = bytes / (int64_t)awl_dtype_size(p->t->dtype);
        b->n++;
        bytes += size;
    }
}

static int make_buckets(awl_ddp *d)
{
    for (int k = 0; k < d->n_buckets; k++) {
        ddp_bucket *b = &d->buckets[k];
        const ddp_param *last = &d->params[b->first + b->n - 1];
        int64_t numel = last->offset + awl_numel(last->t);
        char device[32];
        awl_tensor_device_name(last->t, device, sizeof device);
        awl_scope_begin();
        b->flat = awl_retain(awl_zeros(AWL_SHAPE(numel), last->t->dtype, device));
        awl_scope_end();
        if (!b->flat) return AWL_ERR_OOM;
        d->stats.bucket_bytes += numel * (int64_t)awl_dtype_size(last->t->dtype);
        b->pending = b->n;
    }
    d->stats.n_buckets = d->n_buckets;
    for (int i = 0; i < d->n_params; i++) {
        int status = install_view(&d->params[i], true);
        if (status < 0) return status;
        status = awl_register_grad_hook(d->params[i].t, on_grad_ready, &d->params[i]);
        if (status < 0) return status;
        d->params[i].hooked = true;
    }
    return AWL_OK;
}

awl_ddp *awl_ddp_new(awl_process_group *pg, const awl_param_list *params,
                     const awl_ddp_options *options)
{
    if (!pg || !params) {
        awl_error(AWL_ERR_INVALID, "awl_ddp_new: no %s", pg ? "parameters" : "process group");
        return NULL;
    }
    awl_ddp_options o = options ? *options : (awl_ddp_options){0};
    int64_t cap = o.bucket_cap_bytes > 0 ? o.bucket_cap_bytes : 25 << 20;
    int64_t first = o.first_bucket_bytes > 0 ? o.first_bucket_bytes : 1 << 20;
    awl_ddp *d = calloc(1, sizeof *d);
    d->pg = pg;
    d->overlap = !o.no_overlap;
    d->find_unused = o.find_unused_parameters;
    d->params = calloc((size_t)params->count + 1, sizeof *d->params);
    /* reverse order; a tensor listed twice (tied weights) once */
    for (int i = params->count - 1; i >= 0; i--) {
        awl_tensor *t = params->items[i].tensor;
        bool seen = !t->requires_grad;
        for (int j = 0; j < params->count && !seen; j++)
            seen = j < i && params->items[j].tensor == t;
        if (seen) continue;
        d->params[d->n_params++] = (ddp_param){d, params->items[i].name, t, 0, 0, false, false};
    }
    int status = check_same_parameters(d);
    /* rank 0's values everywhere */
    awl_work **works = calloc((size_t)d->n_params + 1, sizeof *works);
    for (int i = 0; i < d->n_params && status == AWL_OK; i++)
        works[i] = awl_dist_broadcast_async(pg, d->params[i].t, 0);
    for (int i = 0; i < d->n_params; i++) {
        int s = works[i] ? awl_work_wait(works[i]) : AWL_OK;
        if (status == AWL_OK) status = s;
    }
    free(works);
    if (status == AWL_OK) {
        build_buckets(d, first, cap);
        status = make_buckets(d);
    }
    if (status < 0) {
        awl_ddp_free(d);
        return NULL;
    }
    return d;
}

void awl_ddp_free(awl_ddp *d)
{
    if (!d) return;
    for (int k = 0; k < d->n_buckets; k++)
        if (d->buckets[k].work) awl_work_wait(d->buckets[k].work);
    for (int i = 0; i < d->n_params; i++) {
        ddp_param *p = &d->params[i];
        if (p->hooked) awl_remove_grad_hook(p->t, on_grad_ready, p);
        if (d->buckets && d->buckets[p->bucket].flat && is_our_view(p)) {
            awl_scope_begin();
            awl_set_grad(p->t, awl_tensor_clone(p->t->grad));
            awl_scope_end();
        }
    }
    for (int k = 0; k < d->n_buckets; k++) awl_release(d->buckets[k].flat);
    free(d->buckets);
    free(d->params);
    free(d);
}

/* ---- the step ---------------------------------------------------------------------------------- */

int awl_ddp_wait(awl_ddp *d)
{
    if (!d) return AWL_ERR_INVALID;
    if (d->no_sync) return AWL_OK;
    double t0 = net_now();
    int status = AWL_OK;
    if (d->error[0]) status = awl_error(AWL_ERR_INVALID, "%s", d->error);
    if (status == AWL_OK && d->next_launch < d->n_buckets) {
        char names[400] = "";
        size_t at = 0;
        int missing = 0;
        for (int i = 0; i < d->n_params; i++) {
            ddp_param *p = &d->params[i];
            if (p->ready) continue;
            if (d->find_unused) {
                p->ready = true;
                d->buckets[p->bucket].pending--;
                continue;
            }
            if (at < sizeof names - 64)
                at += (size_t)snprintf(names + at, sizeof names - at, "%s'%s'", missing ? ", " : "",
                                       p->name);
            missing++;
        }
        if (missing)
            status = awl_error(AWL_ERR_INVALID,
                               "awl_ddp_wait: %d parameter%s received no gradient in this "
                               "backward: %s%s; leave %s out of the list, or set "
                               "find_unused_parameters",
                               missing, missing > 1 ? "s" : "", names,
                               at >= sizeof names - 64 ? ", ..." : "", missing > 1 ? "them" : "it");
        else
            launch_ready(d);
    }
    double comm = 0;
    for (int k = 0; k < d->n_buckets; k++) {
        ddp_bucket *b = &d->buckets[k];
        if (!b->work) continue;
        double busy = 0;
        int s = dist_work_wait(b->work, &busy);
        b->work = NULL;
        comm += busy;
        if (status == AWL_OK) status = s;
    }
    for (int k = 0; k < d->n_buckets; k++) d->buckets[k].pending = d->buckets[k].n;
    for (int i = 0; i < d->n_params; i++) d->params[i].ready = false;
    d->next_launch = 0;
    d->error[0] = '\0';
    d->stats.comm_s = comm;
    d->stats.wait_s = net_now() - t0;
    return status;
}

int awl_ddp_zero_grad(awl_ddp *d)
{
    if (!d) return AWL_ERR_INVALID;
    for (int k = 0; k < d->n_buckets; k++) {
        int status = awl_tensor_fill_(d->buckets[k].flat, 0.0);
        if (status < 0) return status;
    }
    for (int i = 0; i < d->n_params; i++)
        if (!is_our_view(&d->params[i])) {
            awl_clear_grad(d->params[i].t);
            int status = install_view(&d->params[i], false);
            if (status < 0) return status;
        }
    return AWL_OK;
}

void awl_ddp_no_sync_begin(awl_ddp *d)
{
    if (d) d->no_sync = true;
}

void awl_ddp_no_sync_end(awl_ddp *d)
{
    if (d) d->no_sync = false;
}

void awl_ddp_get_stats(const awl_ddp *d, awl_ddp_stats *out)
{
    if (d)
        *out = d->stats;
    else
        memset(out, 0, sizeof *out);
}
