/*
 * dist/dist.h - data-parallel training: process groups, collectives, DDP.
 *
 * A process group is the set of processes (ranks 0..world_size-1) of one
 * job, as in torch.distributed. Each process creates it once, from
 * torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
 * MASTER_PORT; the launcher `awlrun` sets them, and AWL_JOB_TOKEN) or from
 * explicit options, and then calls the same collectives in the same order:
 *
 *     awl_process_group *pg = awl_dist_init(NULL);          // from the environment
 *     if (!pg) { fprintf(stderr, "%s\n", awl_last_error()); return 1; }
 *     awl_dist_allreduce(pg, t, AWL_DIST_AVG);               // t: the mean over ranks
 *     awl_work *w = awl_dist_allreduce_async(pg, g, AWL_DIST_SUM);
 *     ... compute while the communication thread works ...
 *     if (awl_work_wait(w) < 0) { fprintf(stderr, "%s\n", awl_last_error()); ... }
 *     awl_dist_destroy(pg);
 *
 * and DDP (awl_ddp below) wraps a model's parameters so that backward
 * averages the gradients across ranks while it runs.
 *
 * Collectives work on awl tensors of float32, float64 or int32 (and
 * bfloat16 over NCCL), of any size (0 and 1 element too), contiguous or not
 * (a strided tensor is staged through a contiguous copy). The TCP and MPI
 * transports move host memory (CUDA tensors are staged through it); the
 * NCCL transport ("nccl") moves each rank's GPU memory (CPU tensors are
 * staged through it) on a communication stream of its own, after the
 * kernels queued before the call and without blocking the caller. The
 * result is the same, bit for bit, on every rank, and the same in every run
 * for a given world size (and, for NCCL, machine and NCCL version).
 * Asynchronous handles run on the group's communication thread in the
 * order they were started; tensors passed to one must not be touched until
 * its awl_work_wait.
 *
 * Failures follow common/error.h: NULL or a negative status after recording
 * a message. A distributed failure (status AWL_ERR_DIST) names the rank at
 * fault, its address, the operation and its sequence number; every rank
 * fails, never hangs: a dead peer is noticed within moments (its
 * connections close), a silent one after peer_timeout_s, a collective that
 * cannot finish after timeout_s, and ranks that call different collectives
 * (another order, size, dtype or op) all fail naming both. After such an
 * error the group is broken: every later call fails at once with the same
 * message. Each error also prints the rank's last collectives (its flight
 * ring) to stderr; so does SIGUSR1. docs/distributed.md describes the
 * protocol, the fault model and every timeout.
 */
#ifndef AWL_DIST_DIST_H
#define AWL_DIST_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "autograd/autograd.h"
#include "nn/checkpoint_io.h"
#include "nn/gpt.h"
#include "nn/optim.h"
#include "nn/param.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct awl_process_group awl_process_group;
typedef struct awl_work awl_work;
typedef struct awl_store awl_store;

typedef enum awl_dist_reduce {
    AWL_DIST_SUM,
    AWL_DIST_AVG, /* the sum divided by the world size (float dtypes) */
    AWL_DIST_MAX,
} awl_dist_reduce;

/* How to create a group. Start from awl_dist_default_options(): a field
 * left as it gives it (-1, NULL or 0) takes the environment's value, then
 * the default. */
typedef struct awl_dist_options {
    int rank, world_size, local_rank; /* -1: RANK, WORLD_SIZE, LOCAL_RANK (default 0, 1, 0) */
    const char *master_addr;          /* rank 0's host: MASTER_ADDR, default 127.0.0.1 */
    int master_port;                  /* the store's port: MASTER_PORT, default 29500 */
    const char *token;                /* the job token: AWL_JOB_TOKEN, default "" */
    const char *backend;              /* "tcp", "mpi" or "nccl": AWL_DIST_BACKEND (see
                                         awl_dist_launch_info) */
    const char *device;               /* nccl: this rank's GPU, default "cuda:<local_rank>" */
    double timeout_s;         /* a collective's deadline: AWL_DIST_TIMEOUT, default 300 s */
    double peer_timeout_s;    /* silence before a peer is declared gone: AWL_DIST_PEER_TIMEOUT,
                                 default 15 s */
    double init_timeout_s;    /* rendezvous: AWL_DIST_INIT_TIMEOUT, default 120 s */
    int64_t segment_bytes;    /* ring pipeline segment: AWL_DIST_SEGMENT_BYTES, default 1 MiB */
} awl_dist_options;

/* The options with every field "from the environment" (-1 and zeros). */
awl_dist_options awl_dist_default_options(void);

/* What awl_dist_init would make of the environment and the options,
 * without connecting: the launcher whose variables it read ("torchrun":
 * RANK, WORLD_SIZE, LOCAL_RANK, which awlrun sets; "openmpi":
 * OMPI_COMM_WORLD_*; "pmi": PMI_RANK, PMI_SIZE, MPI_LOCALRANKID; "slurm":
 * SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; "none"), the rank layout, rank
 * 0's address (MASTER_ADDR; under Slurm the first host of SLURM_NODELIST)
 * and port (MASTER_PORT; under Slurm one derived from SLURM_JOB_ID; else
 * 29500), and the transport: the option or AWL_DIST_BACKEND, else "mpi"
 * under Open MPI or PMI when this build has it, else "tcp". */
typedef struct awl_dist_launch {
    const char *launcher, *backend;
    int rank, world_size, local_rank;
    char master_addr[256];
    int master_port;
} awl_dist_launch;
int awl_dist_launch_info(const awl_dist_options *options, awl_dist_launch *out);

/* Creates the group: rendezvous through rank 0's store, then a connection
 * to every other rank. Blocks until every rank has joined (or
 * init_timeout_s). NULL options: all from the environment. World size 1
 * opens no socket. */
awl_process_group *awl_dist_init(const awl_dist_options *options);
/* Waits for this rank's unfinished work, says goodbye to the peers (so
 * that their own shutdown is not taken for a crash) and frees the group.
 * Destroy sub-groups before the group they were split from. */
void awl_dist_destroy(awl_process_group *pg);

/* Splits pg into sub-groups, as MPI_Comm_split: every rank of pg calls it
 * (in the same order relative to pg's collectives) with a color; the ranks
 * of one color form a group of their own, numbered by key (ties by rank).
 * A 2 x 2 grid of data- and tensor-parallel ranks, say:
 *     awl_process_group *tp = awl_dist_split(pg, rank / 2, rank);   // {0,1} {2,3}
 *     awl_process_group *dp = awl_dist_split(pg, rank % 2, rank);   // {0,2} {1,3}
 * Messages name ranks by their number in the job's group. */
awl_process_group *awl_dist_split(awl_process_group *pg, int color, int key);

int awl_dist_rank(const awl_process_group *pg);
int awl_dist_world_size(const awl_process_group *pg);
int awl_dist_local_rank(const awl_process_group *pg);
/* The transport the group runs over: "tcp", "mpi" or "nccl" ("none" for a
 * group of one that needs none: host memory, works done as they start). */
const char *awl_dist_backend(const awl_process_group *pg);
/* The group's key-value store (rank 0's TCP store; NULL for world size 1). */
awl_store *awl_dist_store(awl_process_group *pg);

/* ---- collectives (blocking) --------------------------------------------------------------- */

/* t (every rank's, same shape and dtype) becomes the reduction over ranks. */
int awl_dist_allreduce(awl_process_group *pg, awl_tensor *t, awl_dist_reduce op);
/* t becomes rank root's t. */
int awl_dist_broadcast(awl_process_group *pg, awl_tensor *t, int root);
/* out (world_size * numel(in) elements, any shape) gets rank r's in at
 * element r * numel(in), as torch's all_gather_into_tensor. */
int awl_dist_allgather(awl_process_group *pg, awl_tensor *out, awl_tensor *in);
/* in has world_size * numel(out) elements; out gets the reduction over
 * ranks of in's elements [rank * numel(out), (rank + 1) * numel(out)). */
int awl_dist_reduce_scatter(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                            awl_dist_reduce op);
/* The same with shares of any sizes: rank r's share is counts[r] elements
 * (zero too), and every rank passes the same counts. allgather_v: in has
 * counts[rank] elements, out their sum, rank r's at the sum of the counts
 * before it. reduce_scatter_v: the other way round. */
int awl_dist_allgather_v(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                         const int64_t *counts);
int awl_dist_reduce_scatter_v(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                              const int64_t *counts, awl_dist_reduce op);
/* Returns once every rank has called it. */
int awl_dist_barrier(awl_process_group *pg);
/* Point to point: t to rank dst / from rank src (same shape and dtype on
 * both sides, checked). */
int awl_dist_send(awl_process_group *pg, awl_tensor *t, int dst);
int awl_dist_recv(awl_process_group *pg, awl_tensor *t, int src);

/* ---- asynchronous handles ----------------------------------------------------------------- */

/* Each starts the collective on the communication thread and returns at
 * once; NULL (with an error) when it cannot start. */
awl_work *awl_dist_allreduce_async(awl_process_group *pg, awl_tensor *t, awl_dist_reduce op);
awl_work *awl_dist_broadcast_async(awl_process_group *pg, awl_tensor *t, int root);
awl_work *awl_dist_allgather_async(awl_process_group *pg, awl_tensor *out, awl_tensor *in);
awl_work *awl_dist_reduce_scatter_async(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                                        awl_dist_reduce op);
awl_work *awl_dist_allgather_v_async(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                                     const int64_t *counts);
awl_work *awl_dist_reduce_scatter_v_async(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                                          const int64_t *counts, awl_dist_reduce op);
awl_work *awl_dist_send_async(awl_process_group *pg, awl_tensor *t, int dst);
awl_work *awl_dist_recv_async(awl_process_group *pg, awl_tensor *t, int src);

/* Whether the work has finished (1) or not (0); never blocks. */
int awl_work_test(awl_work *w);
/* Waits for the work, frees the handle and returns its status. Every handle
 * ends with exactly one awl_work_wait. */
int awl_work_wait(awl_work *w);

/* ---- diagnosis ---------------------------------------------------------------------------- */

/* Prints the rank's last collectives, newest last: op, sequence number,
 * size, peers, start and duration, status. */
void awl_dist_print_flight_ring(awl_process_group *pg, FILE *out);

/* Bytes this rank has sent and received over the group's connections. */
typedef struct awl_dist_stats {
    int64_t bytes_sent, bytes_received;
    int64_t collectives;
    double busy_s; /* time the communication thread spent running work */
} awl_dist_stats;
void awl_dist_get_stats(const awl_process_group *pg, awl_dist_stats *out);

/* ---- the key-value store ------------------------------------------------------------------ */

/* Keys are strings of at most 1023 bytes; values up to 16 MiB. */
int awl_store_set(awl_store *s, const char *key, const void *value, size_t len);
/* Waits up to timeout seconds for key to exist; *value is malloc'd (the
 * caller frees it) with one zero byte after its len bytes. */
int awl_store_get(awl_store *s, const char *key, void **value, size_t *len, double timeout);
/* Adds delta to the integer at key (0 when absent) and returns the sum. */
int awl_store_add(awl_store *s, const char *key, int64_t delta, int64_t *result);
/* Waits up to timeout seconds until every key exists. */
int awl_store_wait(awl_store *s, int n, const char *const *keys, double timeout);

/* ---- DDP ---------------------------------------------------------------------------------- */

/* DistributedDataParallel over a list of parameters. At construction it
 * checks that every rank has the same parameter names and shapes (the
 * first difference is an error naming it), broadcasts rank 0's values, and
 * makes each parameter's gradient a view into a flat bucket (reverse
 * parameter order, the first bucket small so communication starts early).
 * During backward, a gradient-ready hook marks each parameter; a bucket
 * whose parameters are all ready is handed to the communication thread at
 * once (buckets in the same order on every rank), so the averaging overlaps
 * the rest of backward. awl_ddp_wait, before the optimizer step, waits for
 * every bucket.
 *
 *     awl_ddp *ddp = awl_ddp_new(pg, awl_gpt_parameters(model), NULL);
 *     for (...) {
 *         awl_ddp_no_sync_begin(ddp);          // gradient accumulation: local
 *         for (micro = 0; micro < n - 1; micro++) { ...forward, backward... }
 *         awl_ddp_no_sync_end(ddp);
 *         ...forward, backward of the last micro-batch...  // buckets go out
 *         awl_ddp_wait(ddp);                   // gradients are the mean over ranks
 *         awl_optimizer_step(opt);
 *         awl_ddp_zero_grad(ddp);              // zeroes the buckets, keeps the views
 *     }
 *     awl_ddp_free(ddp);
 */
typedef struct awl_ddp awl_ddp;

typedef struct awl_ddp_options {
    int64_t bucket_cap_bytes;   /* default 25 MiB */
    int64_t first_bucket_bytes; /* default 1 MiB */
    bool find_unused_parameters; /* a parameter without a gradient counts as zero
                                    instead of being an error */
    bool no_overlap; /* send every bucket at awl_ddp_wait instead (for measuring) */
} awl_ddp_options;

/* NULL options: the defaults. The list must outlive the DDP object. */
awl_ddp *awl_ddp_new(awl_process_group *pg, const awl_param_list *params,
                     const awl_ddp_options *options);
/* Removes the hooks and frees the buckets (gradients become plain tensors
 * again, keeping their values). */
void awl_ddp_free(awl_ddp *ddp);
/* Waits for every bucket of this backward; then each gradient is the mean
 * over ranks. An error names parameters that received no gradient. */
int awl_ddp_wait(awl_ddp *ddp);
/* Zeroes every bucket (set_to_none would break the views). */
int awl_ddp_zero_grad(awl_ddp *ddp);
/* Between begin and end, backward only accumulates locally (gradient
 * accumulation); the first backward after end communicates the sum. */
void awl_ddp_no_sync_begin(awl_ddp *ddp);
void awl_ddp_no_sync_end(awl_ddp *ddp);

typedef struct awl_ddp_stats {
    int n_buckets;
    int64_t bucket_bytes;  /* all buckets together */
    double comm_s;         /* communication thread time for the last step's buckets */
    double wait_s;         /* time awl_ddp_wait blocked in the last step */
} awl_ddp_stats;
void awl_ddp_get_stats(const awl_ddp *ddp, awl_ddp_stats *out);

/* ---- ZeRO ---------------------------------------------------------------------------------- */

/* AdamW with ZeRO's sharding (arXiv:1910.02054): stage 1 keeps only this
 * rank's 1/N of the optimizer state, stage 2 also only its 1/N of the
 * gradients; both communicate what DDP does and give DDP's parameters
 * (dist/zero.c, docs/distributed.md). It replaces both awl_ddp and the
 * optimizer:
 *
 *     awl_zero *zero = awl_zero_adamw_new(pg, params, 1e-3, 0.9, 0.95, 1e-8, 0.1, &(awl_zero_options){.stage = 2});
 *     for (...) {
 *         ...forward, backward...               // gradient shards go out during backward
 *         awl_zero_clip_grad_norm(zero, 1.0);  // optional: the global norm
 *         awl_zero_step(zero);                 // AdamW on this rank's shard, then everyone's
 *         awl_zero_zero_grad(zero);            //   parameters are gathered
 *     }
 *     awl_zero_free(zero);
 *
 * The parameters share one dtype and one device: CPU tensors over TCP or
 * MPI, the rank's GPU over NCCL (the buckets, the gradient shard and the
 * optimizer state live there too). */
typedef struct awl_zero awl_zero;

typedef struct awl_zero_options {
    int stage;                  /* 1 (default) or 2 */
    int64_t bucket_cap_bytes;   /* as DDP's: default 25 MiB */
    int64_t first_bucket_bytes; /* default 1 MiB */
    bool no_overlap;            /* reduce every bucket at the step instead */
} awl_zero_options;

awl_zero *awl_zero_adamw_new(awl_process_group *pg, const awl_param_list *params, double lr,
                             double beta1, double beta2, double eps, double weight_decay,
                             const awl_zero_options *options);
void awl_zero_free(awl_zero *zero);
/* Waits for this step's gradient shards (awl_zero_step calls it). */
int awl_zero_wait(awl_zero *zero);
/* torch.nn.utils.clip_grad_norm_ over the whole model: the global norm
 * (the same on every rank), from every rank's shard. Negative on failure. */
double awl_zero_clip_grad_norm(awl_zero *zero, double max_norm);
/* Updates this rank's shard with AdamW, then gathers every parameter. */
int awl_zero_step(awl_zero *zero);
int awl_zero_zero_grad(awl_zero *zero);
void awl_zero_no_sync_begin(awl_zero *zero);
void awl_zero_no_sync_end(awl_zero *zero);
int awl_zero_set_lr(awl_zero *zero, double lr);
/* The AdamW over this rank's shard (NULL for an empty shard): its
 * parameters are named "<param>[a:b]", pieces of the model's. */
awl_optimizer *awl_zero_optimizer(awl_zero *zero);

/* One consolidated checkpoint (an ordinary awl checkpoint: the model's
 * parameters and full optimizer state under their usual names), written by
 * rank 0 from every rank's shard; every rank calls it. */
int awl_zero_save(awl_zero *zero, const char *path, const awl_train_state *state);
/* Loads such a checkpoint (or a one-process run's) on any world size: the
 * parameters whole, the optimizer state re-sharded. Every rank calls it. */
int awl_zero_load(awl_zero *zero, const char *path, awl_train_state *state);
/* This rank's shard of a whole-model AdamW's state (and its step counts):
 * for a trainer that has loaded a checkpoint into one. */
int awl_zero_take_state(awl_zero *zero, const awl_optimizer *full);

typedef struct awl_zero_stats {
    int64_t shard_first, shard_count; /* this rank's elements of the flat space */
    int64_t gradient_bytes;           /* gradient memory held now */
    int64_t optimizer_bytes;          /* optimizer state held */
    double comm_s, wait_s;            /* as DDP's, for the last step */
} awl_zero_stats;
void awl_zero_get_stats(const awl_zero *zero, awl_zero_stats *out);

/* ---- tensor parallelism ------------------------------------------------------------------ */

/* Megatron-LM's (arXiv:1909.08053) conjugate operators over the ranks of
 * pg, as differentiable ops: f, awl_tp_copy, is the identity forward and an
 * allreduce (sum) of the gradient backward; g, awl_tp_reduce, an allreduce
 * forward and the identity backward. */
awl_tensor *awl_tp_copy(awl_process_group *pg, awl_tensor *x);
awl_tensor *awl_tp_reduce(awl_process_group *pg, awl_tensor *x);
/* Column-parallel Linear: weight holds this rank's rows (output features)
 * and bias their biases; the output holds this rank's features. */
awl_tensor *awl_tp_column_linear(awl_process_group *pg, awl_tensor *x, awl_tensor *weight,
                                 awl_tensor *bias);
/* Row-parallel Linear: x and weight hold this rank's input features; the
 * partial products are summed (g) and the whole bias added. */
awl_tensor *awl_tp_row_linear(awl_process_group *pg, awl_tensor *x, awl_tensor *weight,
                              awl_tensor *bias);

/* A GPT split over the ranks of pg (dist/tensor_parallel.c): attention by
 * heads (c_attn column-parallel, c_proj row-parallel), the MLP by its
 * hidden features (c_fc column, c_proj row); embeddings, LayerNorms and the
 * tied head replicated. Two allreduces forward and two backward per block.
 * Every rank of pg must run the same batches and dropout streams. */
typedef struct awl_tp_gpt awl_tp_gpt;

/* This rank's pieces of full's weights (copies); full can be freed after.
 * n_head and 4 n_embd must divide by the group's size. */
awl_tp_gpt *awl_tp_gpt_new(awl_gpt *full, awl_process_group *pg);
void awl_tp_gpt_free(awl_tp_gpt *model);
/* The pieces, under the full model's names (split ones with their local
 * shapes): for an optimizer, DDP over the data-parallel ranks, ZeRO. */
const awl_param_list *awl_tp_gpt_parameters(awl_tp_gpt *model);
void awl_tp_gpt_train(awl_tp_gpt *model, bool on);
awl_tensor *awl_tp_gpt_forward(awl_tp_gpt *model, awl_tensor *idx);
awl_tensor *awl_tp_gpt_loss(awl_tp_gpt *model, awl_tensor *idx, awl_tensor *targets);
/* Recomputes each block in backward instead of keeping its activations
 * (its allreduces run again). */
void awl_tp_gpt_set_checkpointing(awl_tp_gpt *model, bool on);
/* Puts every rank's pieces back into full (same configuration), on every
 * rank: for checkpoints and sampling. Every rank of the group calls it. */
int awl_tp_gpt_gather(awl_tp_gpt *model, awl_gpt *full);
/* The same for one tensor shaped like parameter `name` or its piece (its
 * gradient, an optimizer state): every rank's piece `mine` into `whole`
 * (collective); and the other way, this rank's piece of `whole`. */
int awl_tp_gpt_gather_piece(awl_tp_gpt *model, const char *name, awl_tensor *mine,
                            awl_tensor *whole);
int awl_tp_gpt_cut_piece(awl_tp_gpt *model, const char *name, awl_tensor *whole,
                         awl_tensor *mine);
/* clip_grad_norm_ over the whole model: the split pieces' squares summed
 * over the group, the replicated parameters' counted once. */
double awl_tp_gpt_clip_grad_norm(awl_tp_gpt *model, double max_norm);

#ifdef __cplusplus
}
#endif

#endif
