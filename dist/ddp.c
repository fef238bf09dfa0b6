/*
 * dist/ddp.c - DistributedDataParallel: gradients averaged across ranks
 * while backward is still running (see dist.h for the usage).
 *
 * The gradients live in flat buckets (buckets.c: reverse parameter order,
 * each gradient a view into its bucket, a hook per parameter). Each bucket
 * that backward completes goes to the communication thread at once as an
 * asynchronous allreduce (average), buckets always in index order, so the
 * averaging of the last layers overlaps the backward of the first.
 * awl_ddp_wait, before the optimizer step, sends what is left and waits
 * for all of them.
 *
 * A gradient that is not the bucket's view when its hook fires (the user
 * set gradients to None, say) is copied into the bucket and the view put
 * back: correct, but a copy; awl_ddp_zero_grad keeps the views.
 */
#include <stdlib.h>
#include <string.h>

#include "dist/buckets.h"
#include "dist/net.h"

struct awl_ddp {
    dist_buckets buckets;
    awl_ddp_stats stats;
};

static void launch(dist_buckets *b, dist_bucket *bucket, void *user)
{
    (void)user;
    bucket->work = awl_dist_allreduce_async(b->pg, bucket->flat, AWL_DIST_AVG);
}

awl_ddp *awl_ddp_new(awl_process_group *pg, const awl_param_list *params,
                     const awl_ddp_options *options)
{
    if (!pg || !params) {
        awl_error(AWL_ERR_INVALID, "awl_ddp_new: no %s", pg ? "parameters" : "process group");
        return NULL;
    }
    awl_ddp_options o = options ? *options : (awl_ddp_options){0};
    dist_buckets_options bo = {o.first_bucket_bytes, o.bucket_cap_bytes, !o.no_overlap,
                               o.find_unused_parameters, false};
    awl_ddp *d = calloc(1, sizeof *d);
    if (awl_dist_buckets_init(&d->buckets, pg, params, &bo, launch, d, "awl_ddp_new") < 0) {
        awl_ddp_free(d);
        return NULL;
    }
    d->stats.n_buckets = d->buckets.n_buckets;
    d->stats.bucket_bytes = awl_dist_buckets_bytes(&d->buckets);
    return d;
}

void awl_ddp_free(awl_ddp *d)
{
    if (!d) return;
    awl_dist_buckets_clear(&d->buckets);
    free(d);
}

int awl_ddp_wait(awl_ddp *d)
{
    if (!d) return AWL_ERR_INVALID;
    dist_buckets *b = &d->buckets;
    if (b->no_sync) return AWL_OK;
    double t0 = awl_net_now(), comm;
    int status = awl_dist_buckets_finish_and_wait(b, "awl_ddp_wait", false, &comm);
    awl_dist_buckets_reset(b);
    d->stats.comm_s = comm;
    d->stats.wait_s = awl_net_now() - t0;
    return status;
}

int awl_ddp_zero_grad(awl_ddp *d)
{
    return d ? awl_dist_buckets_zero(&d->buckets) : AWL_ERR_INVALID;
}

void awl_ddp_no_sync_begin(awl_ddp *d)
{
    if (d) d->buckets.no_sync = true;
}

void awl_ddp_no_sync_end(awl_ddp *d)
{
    if (d) d->buckets.no_sync = false;
}

void awl_ddp_get_stats(const awl_ddp *d, awl_ddp_stats *out)
{
    if (d)
        *out = d->stats;
    else
        memset(out, 0, sizeof *out);
}
