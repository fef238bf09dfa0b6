/*
 * examples/train_gpt/train_gpt.h - what the parts of train_gpt share.
 *
 *     options.c     the option table (read by ../common/options.c's parser),
 *                   the checks between options, --help, and the options a
 *                   checkpoint records
 *     checkpoint.c  saving, --resume and --init-from
 *     train.c       the training step, evaluation and the loop
 *     parallel.c    a step's verbs for one process, DDP, ZeRO or a split model;
 *                   the whole model from the pieces; the memory ledger
 *     main.c        setting a run up, signals, the sample
 *     profile.c     --profile, --memory-ledger, MFU's peak
 *
 * Under awlrun, torchrun, mpirun or srun the run is
 * data-parallel: every rank trains the same model on its own batches, DDP
 * (dist/dist.h) averages the gradients, and rank 0 alone prints, logs,
 * evaluates, saves and samples.
 *
 * A run is a `trainer`: the settings it was started with, the model, the
 * optimizer, the data, and its `run_state`, which is everything besides
 * tensors that a checkpoint must hold for the run to continue bitwise.
 */
#ifndef TRAIN_GPT_H
#define TRAIN_GPT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/options.h"
#include "awl.h"

#define DEFAULT_CORPUS "/usr/share/games/fortunes"

/* ---- options (options.c) ---------------------------------------------------------- */

typedef struct settings {
    const char *data, *config, *device, *tokenizer, *precision, *schedule;
    int vocab_size, n_layer, n_head, n_embd, block, batch;
    double dropout;
    int64_t steps, warmup, decay_steps;
    int grad_accum;
    double lr, min_lr, beta1, beta2, weight_decay, grad_clip;
    int64_t eval_interval, log_interval, save_interval;
    int eval_iters;
    int64_t seed;
    int threads;
    const char *save, *resume, *init_from, *log;
    bool checkpoint_activations;
    int zero, tensor_parallel;    /* ZeRO stage (0: DDP); ranks splitting each layer */
    double baseline_tokens_per_s; /* one rank's speed, for the scaling line */
    double target_loss;           /* 0: none */
    int sample_tokens, top_k;
    double temperature;
    const char *prompt;
    const char *dist_backend;     /* auto, tcp or mpi */
    const char *profile, *profile_steps; /* --profile's trace; "A:B" */
    int64_t profile_from, profile_to;    /* parsed from profile_steps (profile.c) */
    bool memory_ledger;
    double peak_gflops;       /* 0: the device's own peak */
    uint64_t given;           /* bit i: train_options[i] was on the command line */
    uint64_t from_checkpoint; /* bit i: its value came from --resume's checkpoint */
} settings;

/* Where an option's value lives once a run has started (option_spec.scope). */
typedef enum option_scope {
    SCOPE_INVOCATION, /* this command only (paths, device, sampling)       */
    SCOPE_RUN,        /* recorded in the checkpoint, "extra.<name>"        */
    SCOPE_MODEL,      /* the architecture: the checkpoint's "config"       */
} option_scope;

extern const option_spec train_options[];
extern const int n_train_options;

settings default_settings(void);
void print_help(const char *program);
/* Returns 0, 1 for --help, or -1 after printing why (the usage error). */
int parse_args(int argc, char **argv, settings *s);
/* Checks between options (what no single option can tell). 0 or -1. */
int check_settings(const settings *s);
bool option_given(const settings *s, const char *name);
/* Given on the command line or taken from the checkpoint. */
bool option_set(const settings *s, const char *name);
const option_spec *find_option(const char *name);
/* The option's value in s as text (for the checkpoint). */
void format_option(const option_spec *o, const settings *s, char *buf, size_t size);
/* Parses text as o's value into s, with o's range; `source` names where the
 * text came from in the message ("the command line", a checkpoint). */
int parse_option_value(const option_spec *o, const char *text, settings *s, const char *source);
/* Whether o holds the same value in a and b. */
bool option_equal(const option_spec *o, const settings *a, const settings *b);

/* ---- the run -------------------------------------------------------------------- */

/* What a checkpoint holds besides tensors and options: exactly the state
 * that makes the next step of a resumed run the step the run would have
 * taken. Data-parallel runs keep this for every rank: rank 0's in the
 * checkpoint's own fields, every rank's (rank 0 too) under
 * "extra.dist.rank.<r>", with "extra.dist.world_size". */
typedef struct run_state {
    int64_t step;                  /* optimizer steps done                     */
    uint64_t rng_seed, rng_offset; /* the global generator (dropout)         */
    uint64_t data_seed;            /* the training batch stream                */
    uint64_t data_position[2];     /* batches drawn: train, validation         */
} run_state;

typedef struct trainer {
    settings s;
    awl_gpt_config cfg;
    awl_tokenizer *tok;
    awl_text_dataset *data; /* NULL when nothing trains or evaluates */
    awl_gpt *model;
    awl_optimizer *opt;
    awl_lr_schedule schedule;
    FILE *log;
    run_state state;
    uint64_t eval_seed;         /* evaluation's own batches */
    awl_train_state resumed;    /* --resume: the checkpoint's metadata (owns the option strings) */
    awl_safetensors *init_file; /* --init-from, open until the weights are loaded */
    /* parallel training (NULL / 0 / 1 for one process): the job's group;
     * the tensor-parallel group sharing one batch and the data-parallel one
     * across batches (both pg without --tensor-parallel); DDP or ZeRO over
     * dp; the split model, whose pieces are what trains (the optimizer is
     * theirs), model then only a gathering place */
    awl_process_group *pg, *tp, *dp;
    awl_ddp *ddp;
    awl_zero *zero;
    awl_tp_gpt *tp_model;
    int rank, world, dp_rank, dp_world;
    char device[32]; /* under a launcher, --device cuda: "cuda:<LOCAL_RANK>" */
} trainer;

/* The parameters that train: the split model's pieces, or the model's. */
static inline const awl_param_list *trained_params(trainer *t)
{
    return t->tp_model ? awl_tp_gpt_parameters(t->tp_model) : awl_gpt_parameters(t->model);
}

/* Whether this process prints, logs, evaluates and saves (rank 0). */
static inline bool is_leader(const trainer *t) { return t->rank == 0; }

/* Set by the first SIGINT or SIGTERM (main.c): the loop stops after the
 * step it is in. */
extern volatile sig_atomic_t stop_signal;

/* Prints "train_gpt: <what>: <awl's last error>" and returns -1. */
int fail(const char *what);
/* Prints "train_gpt: <formatted message>" and returns -1. */
#define complain(...) options_complain("train_gpt", __VA_ARGS__)

/* ---- checkpoints (checkpoint.c) ------------------------------------------------------ */

/* Writes the model, the optimizer, the run state and the SCOPE_RUN options
 * to path. 0 or -1 (message printed). */
int save_checkpoint(trainer *t, const char *path);
/* --resume, before anything is built: the checkpoint's options (a given
 * option that contradicts one is an error), architecture and tokenizer. */
int resume_settings(trainer *t);
/* --resume, once the model and optimizer exist: their tensors and the run
 * state. */
int resume_tensors(trainer *t);
/* --init-from, before the model is built: its architecture and (when the
 * file has one) its tokenizer; after: the weights. */
int init_from_settings(trainer *t);
int init_from_weights(trainer *t);

/* ---- a step's verbs, whatever runs it (parallel.c) ------------------------------ */

int set_lr(trainer *t, double lr);
/* The model's mean loss on a batch, times scale (1 / grad_accum in
 * training: the whole model's loss takes it as one op, so that its
 * gradient comes from the forward, awl_gpt_loss_scaled). */
awl_tensor *model_loss(trainer *t, awl_tensor *x, awl_tensor *y, double scale);
/* Gradient accumulation: backward only adds locally between on and off. */
void accumulate_locally(trainer *t, bool on);
/* The gradients complete on every rank (DDP's average, ZeRO's shards). */
int wait_gradients(trainer *t);
double gradient_wait_seconds(const trainer *t);
/* The global norm, clipped to max_norm (INFINITY: measured only). */
double clip_gradients(trainer *t, double max_norm);
int optimizer_step(trainer *t);
int zero_gradients(trainer *t);
/* --tensor-parallel: this rank's pieces of a whole model's optimizer state. */
int tp_take_state(trainer *t, const awl_optimizer *whole);
/* The optimizer of the whole model, for a checkpoint: t->opt, or one made
 * from every rank's pieces (free it) after the pieces are gathered into
 * t->model. Collective under --tensor-parallel. NULL on failure. */
awl_optimizer *whole_optimizer(trainer *t);
/* The pieces back into t->model (collective; a no-op without them). */
int gather_model(trainer *t);

/* Bytes this rank holds, from the tensors themselves. */
typedef struct memory_use {
    int64_t params, grads, optimizer, peak;
} memory_use;
void memory_ledger(trainer *t, memory_use *out);

/* ---- profiling, MFU and the memory ledger (profile.c) ------------------------------ */

/* Parses and checks --profile-steps into profile_from, profile_to. 0 or -1. */
int parse_profile_steps(settings *s);
/* MFU's denominator for the whole job: --peak-gflops, or the device's own
 * peak (awl_device_peak_flops), times the ranks; where it comes from in
 * source. 0 when unknown. */
double mfu_peak(const trainer *t, char *source, size_t size);
/* Around training step `step` (counted from 1): starts and stops the
 * profiler for --profile's steps, opens the "step" range. */
int profile_step_begin(trainer *t, int64_t step);
/* After the step and its evaluation (the step's range closed): after the
 * last profiled step, or the run's `last`, stops the profiler, writes the
 * trace and the summary and prints it. 0 or -1. */
int profile_step_end(trainer *t, int64_t step, bool last);
/* The tensor layer's ledger of this rank's device for the step that just
 * ended; printed when `print` (a logged step) and --memory-ledger. */
void ledger_step(trainer *t, int64_t step, bool print, awl_memory_ledger *out);

/* ---- training (train.c) --------------------------------------------------------- */

/* Trains from t->state.step to s.steps. 0 when done, -1 after a failure
 * (printed), or the signal number that stopped it. */
int train(trainer *t);

#endif
