/*
 * dist/buckets.h - gradients packed into flat buckets, and the hooks that
 * say when a bucket is complete: what DDP (ddp.c) and ZeRO (zero.c) share.
 *
 * The parameters are taken in reverse order (backward produces the last
 * layers' gradients first), a tensor listed twice (tied weights) once, and
 * packed into buckets: the first at most first_cap bytes, so communication
 * starts early, the others at most cap. Together the buckets are one flat
 * space of every parameter's elements (bucket 0 first); ZeRO shards that
 * space. Each parameter's gradient is a view into its bucket, so backward
 * accumulates straight into it.
 *
 * A gradient hook fires once per backward for each parameter; it counts the
 * bucket down, and every complete bucket whose predecessors have all gone
 * is handed to the owner's `launch` callback at once, in index order on
 * every rank. awl_dist_buckets_finish, before the optimizer step, launches what
 * is left (with find_unused, parameters that got no gradient count as
 * ready; else they are an error naming them).
 *
 * Lazy buckets (ZeRO stage 2) hold memory only while they are needed: a
 * bucket is allocated when its first gradient is complete (the gradient,
 * made by the engine, is copied in and the view put in its place) and
 * released once its work is done (awl_dist_buckets_release), leaving the
 * parameters without gradients between steps.
 */
#ifndef AWL_DIST_BUCKETS_H
#define AWL_DIST_BUCKETS_H

#include "dist/dist_internal.h"

typedef struct dist_buckets dist_buckets;

typedef struct dist_param {
    dist_buckets *owner;
    const char *name;
    awl_tensor *t;
    int bucket;
    int64_t offset; /* its first element in its bucket */
    bool ready, hooked;
} dist_param;

typedef struct dist_bucket {
    awl_tensor *flat; /* NULL while a lazy bucket is released */
    int first, n;     /* its parameters: params[first .. first + n) */
    int64_t start;    /* its first element in the flat space */
    int64_t numel;
    int pending;      /* its parameters not yet ready in this backward */
    awl_work *work;   /* what the owner started with it, until waited */
    double busy_s;    /* the communication thread's time on it */
} dist_bucket;

/* Starts the owner's communication of a complete bucket (b->work). */
typedef void (*dist_launch_fn)(dist_buckets *b, dist_bucket *bucket, void *user);

struct dist_buckets {
    awl_process_group *pg;
    dist_param *params; /* in bucket order: the reverse of the list */
    int n_params;
    dist_bucket *buckets;
    int n_buckets;
    int64_t numel; /* the flat space */
    int next_launch;
    bool no_sync, overlap, find_unused, lazy;
    char error[512]; /* found by a hook, reported by awl_dist_buckets_finish */
    dist_launch_fn launch;
    void *user;
};

typedef struct dist_buckets_options {
    int64_t first_cap, cap; /* bytes; 0: 1 MiB and 25 MiB */
    bool overlap, find_unused, lazy;
} dist_buckets_options;

/* Checks that every rank has the same parameters (names, dtypes, shapes;
 * the first difference is an error on every rank), broadcasts rank 0's
 * values, builds the buckets and installs the views and hooks. `op` names
 * the caller in messages. Returns 0 or negative; clear b either way. */
int awl_dist_buckets_init(dist_buckets *b, awl_process_group *pg, const awl_param_list *params,
                      const dist_buckets_options *o, dist_launch_fn launch, void *user,
                      const char *op);
/* Waits for what is outstanding, removes the hooks, gives the parameters
 * plain gradients (copies) and frees everything. */
void awl_dist_buckets_clear(dist_buckets *b);
/* Before the optimizer step: a hook's error, or the parameters without a
 * gradient (unless find_unused), or launches every bucket not yet gone.
 * Returns 0 or negative. */
int awl_dist_buckets_finish(dist_buckets *b, const char *op);
/* Waits for bucket k's work, if any; its busy time goes to busy_s. */
int awl_dist_buckets_wait(dist_buckets *b, int k);
/* awl_dist_buckets_finish, then waits for every bucket (releasing each when
 * `release`); *comm_s: the communication thread's time for them. */
int awl_dist_buckets_finish_and_wait(dist_buckets *b, const char *op, bool release, double *comm_s);
/* For the next backward: nothing ready, nothing launched. */
void awl_dist_buckets_reset(dist_buckets *b);
/* Zeroes every bucket in place (views kept); lazy buckets are left
 * released. */
int awl_dist_buckets_zero(dist_buckets *b);
/* A lazy bucket's memory goes; its parameters' gradients are dropped. */
void awl_dist_buckets_release(dist_buckets *b, int k);
/* Bytes of gradient memory the buckets hold now. */
int64_t awl_dist_buckets_bytes(const dist_buckets *b);

#endif
