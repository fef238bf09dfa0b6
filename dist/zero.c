/*
 * dist/zero.c - ZeRO stages 1 and 2 (Rajbhandari et al., arXiv:1910.02054)
 * for AdamW: each rank keeps the optimizer state (stage 1), and the
 * gradients (stage 2), of its own 1/N of the parameters only.
 *
 * The flat space. The gradient buckets of buckets.c lay every parameter's
 * elements end to end (reverse parameter order); rank r owns the
 * contiguous shard [r P / N, (r+1) P / N) of those P elements, whatever P
 * is, and a shard may cut through parameters. A bucket overlaps one or
 * more shards, so its "shares" (the elements of the bucket in each rank's
 * shard, in rank order) are what the variable collectives take.
 *
 * A step:
 *   1. backward fills the buckets; each complete bucket is reduce-scattered
 *      by shares at once (overlapping backward, as DDP's allreduce does),
 *      so each rank receives the mean of its share: stage 1 in place in
 *      the bucket, stage 2 into a gradient buffer of the shard's size, after
 *      which the bucket's memory goes (its gradients are not needed);
 *   2. AdamW updates the shard: the optimizer's parameters are views of the
 *      pieces of the real parameters that fall in the shard ("segments",
 *      shaped (1, n) where the parameter has 2+ dimensions so weight decay
 *      picks the same ones as for the whole model), their gradients views
 *      of the shard's gradients;
 *   3. each bucket's parameter values are allgathered by shares (through
 *      the bucket's memory in stage 1, a bucket-sized temporary in stage 2)
 *      and copied back into the parameters.
 * Reduce-scatter plus allgather move what DDP's allreduce moves: 2(N-1)/N
 * of the parameters' bytes per rank. Model states per rank for float32
 * AdamW: parameters 4P bytes, gradients 4P (stage 1) or 4P/N (stage 2),
 * optimizer 8P/N.
 *
 * Checkpoints are consolidated: rank 0 gathers the shards' optimizer state
 * and writes one ordinary awl checkpoint (the same names as a one-process
 * run's), which one process, PyTorch, or a ZeRO run of any world size can
 * load; loading re-shards it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/buckets.h"
#include "dist/net.h"
#include "nn/checkpoint_io.h"

struct awl_zero {
    dist_buckets buckets;
    awl_process_group *pg;
    const awl_param_list *model; /* the caller's list */
    int stage;
    int64_t *shard;   /* world + 1 bounds in the flat space */
    int64_t **shares; /* per bucket: world counts */
    awl_tensor *shard_grad; /* stage 2 */
    char device[32];        /* the parameters' (one device, one dtype) */
    awl_dtype dtype;
    awl_param_list segments;
    awl_optimizer *opt; /* over segments; NULL for an empty shard */
    double lr, beta1, beta2, eps, weight_decay;
    bool reduced;
    awl_zero_stats stats;
};

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A view of t's elements [first, first + n) in t's own (contiguous) order,
 * shaped like a segment: (1, n) for matrices, (n) otherwise. */
static awl_tensor *flat_piece(awl_tensor *t, int64_t first, int64_t n, bool matrix)
{
    int64_t at = t->offset + first; /* as_strided counts from the storage's start */
    if (matrix) return awl_tensor_as_strided(t, 2, (int64_t[]){1, n}, (int64_t[]){n, 1}, at);
    return awl_tensor_as_strided(t, 1, (int64_t[]){n}, (int64_t[]){1}, at);
}

/* Where rank r's share of bucket k starts in the bucket. */
static int64_t share_start(const awl_zero *z, int k, int r)
{
    const dist_bucket *b = &z->buckets.buckets[k];
    return max64(z->shard[r], b->start) - b->start;
}

/* The bucket's own share, as a view of `flat` (the bucket, or a buffer of
 * its size). */
static awl_tensor *own_share(const awl_zero *z, int k, awl_tensor *flat)
{
    int me = z->pg->rank;
    return flat_piece(flat, share_start(z, k, me), z->shares[k][me], false);
}

static void launch(dist_buckets *b, dist_bucket *bucket, void *user)
{
    awl_zero *z = user;
    int k = (int)(bucket - b->buckets), me = z->pg->rank;
    awl_scope_begin();
    awl_tensor *out =
        z->stage == 1
            ? own_share(z, k, bucket->flat)
            : flat_piece(z->shard_grad, max64(z->shard[me], bucket->start) - z->shard[me],
                         z->shares[k][me], false);
    bucket->work = awl_dist_reduce_scatter_v_async(z->pg, out, bucket->flat, z->shares[k],
                                                   AWL_DIST_AVG);
    awl_scope_end();
}

/* The segments of the shard: the pieces of the parameters inside it, each
 * with its gradient's view. */
static int make_segments(awl_zero *z)
{
    dist_buckets *b = &z->buckets;
    int me = z->pg->rank;
    int64_t lo = z->shard[me], hi = z->shard[me + 1];
    int status = AWL_OK;
    for (int i = 0; i < b->n_params && status == AWL_OK; i++) {
        const dist_param *p = &b->params[i];
        const dist_bucket *k = &b->buckets[p->bucket];
        int64_t start = k->start + p->offset, n = awl_numel(p->t);
        int64_t a = max64(start, lo), e = min64(start + n, hi);
        if (a >= e) continue;
        bool matrix = p->t->ndim >= 2;
        char name[600];
        snprintf(name, sizeof name, "%s[%lld:%lld]", p->name, (long long)(a - start),
                 (long long)(e - start));
        awl_scope_begin();
        awl_tensor *seg = flat_piece(p->t, a - start, e - a, matrix);
        awl_tensor *grad = z->stage == 1 ? flat_piece(k->flat, p->offset + (a - start), e - a, matrix)
                                         : flat_piece(z->shard_grad, a - lo, e - a, matrix);
        status = seg && grad ? awl_set_grad(seg, grad) : AWL_ERR_INVALID;
        if (status == AWL_OK) status = awl_param_list_add(&z->segments, name, seg);
        awl_scope_end();
    }
    if (status == AWL_OK && z->segments.count) {
        z->opt = awl_adamw_new(&z->segments, z->lr, z->beta1, z->beta2, z->eps, z->weight_decay);
        if (!z->opt) status = AWL_ERR_INVALID;
    }
    return status;
}

awl_zero *awl_zero_adamw_new(awl_process_group *pg, const awl_param_list *params, double lr,
                             double beta1, double beta2, double eps, double weight_decay,
                             const awl_zero_options *options)
{
    const char *op = "awl_zero_adamw_new";
    if (!pg || !params) {
        awl_error(AWL_ERR_INVALID, "%s: no %s", op, pg ? "parameters" : "process group");
        return NULL;
    }
    awl_zero_options o = options ? *options : (awl_zero_options){0};
    if (o.stage == 0) o.stage = 1;
    if (o.stage != 1 && o.stage != 2) {
        awl_error(AWL_ERR_INVALID, "%s: stage %d (1 or 2)", op, o.stage);
        return NULL;
    }
    /* one flat space, so one device and one dtype: the first parameter's */
    for (int i = 0; i < params->count; i++) {
        const awl_tensor *a = params->items[0].tensor, *t = params->items[i].tensor;
        if (t->dtype != a->dtype || !awl_same_device(t, a)) {
            char da[32], dt[32];
            awl_error(AWL_ERR_INVALID, "%s: every parameter must have %s's dtype and device (%s on "
                                       "%s), and %s is %s on %s",
                      op, params->items[0].name, awl_dtype_name(a->dtype),
                      awl_tensor_device_name(a, da, sizeof da), params->items[i].name,
                      awl_dtype_name(t->dtype), awl_tensor_device_name(t, dt, sizeof dt));
            return NULL;
        }
    }
    awl_zero *z = calloc(1, sizeof *z);
    z->pg = pg;
    if (params->count) {
        awl_tensor_device_name(params->items[0].tensor, z->device, sizeof z->device);
        z->dtype = params->items[0].tensor->dtype;
    }
    z->model = params;
    z->stage = o.stage;
    z->lr = lr;
    z->beta1 = beta1;
    z->beta2 = beta2;
    z->eps = eps;
    z->weight_decay = weight_decay;
    dist_buckets_options bo = {o.first_bucket_bytes, o.bucket_cap_bytes, !o.no_overlap, false,
                               o.stage == 2};
    int status = awl_dist_buckets_init(&z->buckets, pg, params, &bo, launch, z, op);
    dist_buckets *b = &z->buckets;
    int n = pg->world;
    if (status == AWL_OK) {
        z->shard = calloc((size_t)n + 1, sizeof *z->shard);
        for (int r = 0; r <= n; r++) z->shard[r] = b->numel * r / n;
        z->shares = calloc((size_t)b->n_buckets + 1, sizeof *z->shares);
        for (int k = 0; k < b->n_buckets; k++) {
            z->shares[k] = calloc((size_t)n, sizeof **z->shares);
            const dist_bucket *bk = &b->buckets[k];
            for (int r = 0; r < n; r++)
                z->shares[k][r] = max64(0, min64(bk->start + bk->numel, z->shard[r + 1]) -
                                               max64(bk->start, z->shard[r]));
        }
        if (z->stage == 2) {
            int64_t mine = z->shard[pg->rank + 1] - z->shard[pg->rank];
            awl_scope_begin();
            z->shard_grad = awl_retain(awl_zeros(AWL_SHAPE(mine), z->dtype, z->device));
            awl_scope_end();
            if (!z->shard_grad) status = AWL_ERR_OOM;
        }
    }
    if (status == AWL_OK) status = make_segments(z);
    if (status < 0) {
        awl_zero_free(z);
        return NULL;
    }
    return z;
}

void awl_zero_free(awl_zero *z)
{
    if (!z) return;
    awl_optimizer_free(z->opt);
    awl_param_list_clear(&z->segments);
    for (int k = 0; z->shares && k < z->buckets.n_buckets; k++) free(z->shares[k]);
    awl_dist_buckets_clear(&z->buckets);
    free(z->shares);
    free(z->shard);
    awl_release(z->shard_grad);
    free(z);
}

/* ---- the step ------------------------------------------------------------------------------ */

int awl_zero_wait(awl_zero *z)
{
    if (!z) return AWL_ERR_INVALID;
    dist_buckets *b = &z->buckets;
    if (b->no_sync || z->reduced) return AWL_OK;
    double t0 = awl_net_now(), comm;
    /* stage 2: once reduced, the shard has what it needs of a bucket */
    int status = awl_dist_buckets_finish_and_wait(b, "awl_zero_wait", z->stage == 2, &comm);
    z->stats.comm_s = comm;
    z->stats.wait_s = awl_net_now() - t0;
    z->reduced = status == AWL_OK;
    return status;
}

double awl_zero_clip_grad_norm(awl_zero *z, double max_norm)
{
    if (!z) return -1;
    if (awl_zero_wait(z) < 0) return -1;
    /* the global norm from every shard's sum of squares */
    double local = z->segments.count ? awl_clip_grad_norm(&z->segments, INFINITY) : 0;
    if (local < 0) return -1;
    double sq = local * local;
    awl_scope_begin();
    awl_tensor *t = awl_from_data(&sq, AWL_SHAPE(1), AWL_F64, "cpu");
    int status = awl_dist_allreduce(z->pg, t, AWL_DIST_SUM);
    if (status == AWL_OK) awl_to_host(t, &sq, sizeof sq);
    awl_scope_end();
    if (status < 0) return -1;
    double norm = sqrt(sq), coef = max_norm / (norm + 1e-6);
    if (coef < 1 && z->segments.count && awl_scale_grads(&z->segments, coef) < 0) return -1;
    return norm;
}

/* Every bucket's parameter values from their owners, through `flat` (the
 * bucket itself in stage 1, a temporary of its size in stage 2). */
static int gather_parameters(awl_zero *z)
{
    dist_buckets *b = &z->buckets;
    int status = AWL_OK;
    for (int k = 0; k < b->n_buckets && status == AWL_OK; k++) {
        dist_bucket *bk = &b->buckets[k];
        awl_scope_begin();
        awl_tensor *flat =
            z->stage == 1 ? bk->flat : awl_empty(AWL_SHAPE(bk->numel), z->dtype, z->device);
        /* this rank's values into its share, then everyone's */
        for (int i = bk->first; i < bk->first + bk->n && status == AWL_OK; i++) {
            const dist_param *p = &b->params[i];
            int64_t n = awl_numel(p->t);
            awl_tensor *dst = flat_piece(flat, p->offset, n, false);
            status = awl_tensor_copy_(dst, flat_piece(p->t, 0, n, false));
        }
        if (status == AWL_OK)
            status = awl_dist_allgather_v(z->pg, flat, own_share(z, k, flat), z->shares[k]);
        for (int i = bk->first; i < bk->first + bk->n && status == AWL_OK; i++) {
            const dist_param *p = &b->params[i];
            int64_t n = awl_numel(p->t);
            status = awl_tensor_copy_(flat_piece(p->t, 0, n, false), flat_piece(flat, p->offset, n, false));
        }
        awl_scope_end();
    }
    return status;
}

int awl_zero_step(awl_zero *z)
{
    if (!z) return AWL_ERR_INVALID;
    int status = awl_zero_wait(z);
    if (status == AWL_OK && z->opt) status = awl_optimizer_step(z->opt);
    if (status == AWL_OK) status = gather_parameters(z);
    awl_dist_buckets_reset(&z->buckets);
    z->reduced = false;
    return status;
}

int awl_zero_zero_grad(awl_zero *z)
{
    return z ? awl_dist_buckets_zero(&z->buckets) : AWL_ERR_INVALID;
}

void awl_zero_no_sync_begin(awl_zero *z)
{
    if (z) z->buckets.no_sync = true;
}

void awl_zero_no_sync_end(awl_zero *z)
{
    if (z) z->buckets.no_sync = false;
}

int awl_zero_set_lr(awl_zero *z, double lr)
{
    if (!z) return AWL_ERR_INVALID;
    z->lr = lr;
    return z->opt ? awl_optimizer_set_lr(z->opt, lr) : AWL_OK;
}

awl_optimizer *awl_zero_optimizer(awl_zero *z) { return z ? z->opt : NULL; }

void awl_zero_get_stats(const awl_zero *z, awl_zero_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!z) return;
    *out = z->stats;
    int me = z->pg->rank;
    out->shard_first = z->shard[me];
    out->shard_count = z->shard[me + 1] - z->shard[me];
    int64_t es = (int64_t)awl_dtype_size(z->dtype);
    out->gradient_bytes = awl_dist_buckets_bytes(&z->buckets) +
                          (z->shard_grad ? awl_numel(z->shard_grad) * es : 0);
    for (int i = 0; z->opt && i < awl_optimizer_num_states(z->opt); i++) {
        const awl_tensor *state = awl_optimizer_state(z->opt, i, NULL);
        out->optimizer_bytes += awl_numel(state) * (int64_t)awl_dtype_size(state->dtype);
    }
}

/* ---- consolidated checkpoints ----------------------------------------------------------------- */

/* The state tensor of optimizer `o` named "<param><suffix>", or NULL. */
static awl_tensor *state_named(const awl_optimizer *o, const char *param, const char *suffix)
{
    char want[700];
    snprintf(want, sizeof want, "%s%s", param, suffix);
    for (int i = 0; o && i < awl_optimizer_num_states(o); i++) {
        const char *name;
        awl_tensor *t = awl_optimizer_state(o, i, &name);
        if (strcmp(name, want) == 0) return t;
    }
    return NULL;
}

static const char *const moments[2] = {".exp_avg", ".exp_avg_sq"};

/* Copies between the shard's optimizer state and a full-model optimizer's:
 * into the full one (to_full) or out of it. */
static int copy_state(awl_zero *z, awl_optimizer *full, bool to_full)
{
    const dist_buckets *b = &z->buckets;
    int me = z->pg->rank, status = AWL_OK, seg = 0;
    int64_t lo = z->shard[me], hi = z->shard[me + 1];
    for (int i = 0; i < b->n_params && status == AWL_OK; i++) {
        const dist_param *p = &b->params[i];
        int64_t start = b->buckets[p->bucket].start + p->offset, n = awl_numel(p->t);
        int64_t a = max64(start, lo), e = min64(start + n, hi);
        if (a >= e) continue;
        const char *seg_name = z->segments.items[seg++].name;
        for (int m = 0; m < 2 && status == AWL_OK; m++) {
            awl_tensor *whole = state_named(full, p->name, moments[m]);
            awl_tensor *piece = state_named(z->opt, seg_name, moments[m]);
            if (!whole || !piece) return awl_error(AWL_ERR_INVALID, "awl_zero: no %s state for %s", moments[m], p->name);
            awl_scope_begin();
            awl_tensor *view = flat_piece(whole, a - start, e - a, piece->ndim == 2);
            status = to_full ? awl_tensor_copy_(view, piece) : awl_tensor_copy_(piece, view);
            awl_scope_end();
        }
    }
    return status;
}

/* The same status on every rank: the worst. */
static int agree_status(awl_process_group *pg, int status)
{
    double worst = status;
    awl_scope_begin();
    awl_tensor *t = awl_from_data(&worst, AWL_SHAPE(1), AWL_F64, "cpu");
    awl_tensor *neg = awl_tensor_unary(AWL_UNARY_NEG, t, 0);
    int s = neg ? awl_dist_allreduce(pg, neg, AWL_DIST_MAX) : AWL_ERR_OOM;
    if (s == AWL_OK) worst = -awl_item(neg);
    awl_scope_end();
    return s < 0 ? s : (int)worst;
}

/* A full-model AdamW with the shard optimizer's hyper-parameters. */
static awl_optimizer *full_optimizer(const awl_zero *z)
{
    return awl_adamw_new(z->model, z->lr, z->beta1, z->beta2, z->eps, z->weight_decay);
}

int awl_zero_save(awl_zero *z, const char *path, const awl_train_state *state)
{
    if (!z || !path) return AWL_ERR_INVALID;
    awl_process_group *pg = z->pg;
    /* every rank's shard state, and the step counts, go to rank 0 */
    int64_t steps = z->opt ? awl_optimizer_step_count(z->opt) : 0;
    awl_optimizer *full = NULL;
    int status = AWL_OK;
    awl_scope_begin();
    awl_tensor *count = awl_from_data(&(double){(double)steps}, AWL_SHAPE(1), AWL_F64, "cpu");
    status = awl_dist_allreduce(pg, count, AWL_DIST_MAX);
    if (status == AWL_OK) steps = (int64_t)awl_item(count);
    awl_scope_end();
    if (pg->rank == 0 && status == AWL_OK) {
        full = full_optimizer(z);
        status = full ? copy_state(z, full, true) : AWL_ERR_INVALID;
    }
    /* the other ranks' pieces, one by one, through rank 0's full state */
    for (int r = 1; r < pg->world && status == AWL_OK; r++) {
        int64_t lo = z->shard[r], hi = z->shard[r + 1];
        for (int i = 0; i < z->buckets.n_params && status == AWL_OK; i++) {
            const dist_param *p = &z->buckets.params[i];
            int64_t start = z->buckets.buckets[p->bucket].start + p->offset, n = awl_numel(p->t);
            int64_t a = max64(start, lo), e = min64(start + n, hi);
            if (a >= e) continue;
            for (int m = 0; m < 2 && status == AWL_OK; m++) {
                awl_scope_begin();
                if (pg->rank == 0) {
                    awl_tensor *view = flat_piece(state_named(full, p->name, moments[m]), a - start, e - a, false);
                    status = awl_dist_recv(pg, view, r);
                } else if (pg->rank == r) {
                    char seg_name[600];
                    snprintf(seg_name, sizeof seg_name, "%s[%lld:%lld]", p->name, (long long)(a - start), (long long)(e - start));
                    awl_tensor *piece = state_named(z->opt, seg_name, moments[m]);
                    status = awl_dist_send(pg, awl_tensor_reshape(piece, 1, (int64_t[]){e - a}), 0);
                }
                awl_scope_end();
            }
        }
    }
    if (pg->rank == 0 && status == AWL_OK) {
        awl_optimizer_set_step_count(full, steps);
        for (int i = 0; i < awl_optimizer_num_params(full); i++) awl_optimizer_set_param_step(full, i, steps);
        status = awl_checkpoint_save(path, z->model, full, state);
    }
    awl_optimizer_free(full);
    int agreed = agree_status(pg, status);
    if (agreed < 0 && status == AWL_OK)
        awl_error(AWL_ERR_DIST, "awl_zero_save: rank 0 could not write %s (see its message)", path);
    return agreed;
}

int awl_zero_take_state(awl_zero *z, const awl_optimizer *full)
{
    if (!z || !full) return AWL_ERR_INVALID;
    if (!z->opt) return AWL_OK;
    int status = copy_state(z, (awl_optimizer *)full, false);
    awl_optimizer_set_step_count(z->opt, awl_optimizer_step_count(full));
    for (int i = 0; i < awl_optimizer_num_params(z->opt); i++)
        awl_optimizer_set_param_step(z->opt, i, awl_optimizer_param_step(full, 0));
    return status;
}

int awl_zero_load(awl_zero *z, const char *path, awl_train_state *state)
{
    if (!z || !path) return AWL_ERR_INVALID;
    awl_optimizer *full = full_optimizer(z);
    int status = full ? awl_checkpoint_load(path, z->model, full, state) : AWL_ERR_INVALID;
    if (status == AWL_OK) status = awl_zero_take_state(z, full);
    awl_optimizer_free(full);
    return agree_status(z->pg, status);
}
