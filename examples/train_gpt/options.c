/*
 * examples/train_gpt/options.c - every option in one table, the checks
 * between options, --help, and the options a checkpoint records.
 *
 * Each entry says what the option is, the field it sets, its allowed values
 * and where its value lives once a run has started (train_gpt.h,
 * option_scope). The parser (examples/common/options.c), the help text and
 * the checkpoint's copy of the options are all read off the table, so the
 * range --help prints is the range the parser enforces, and a value read
 * back from a checkpoint is checked exactly like one typed on the command
 * line.
 *
 * No option means "the default" when it is 0 unless its help says so: an
 * override that was not given is tracked in settings.given, not by a
 * special value.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "train_gpt.h"

#define FIELD(f) offsetof(settings, f)
#define STEPS_MAX 2147483647LL
#define COUNT(lo, hi) .ilo = (lo), .ihi = (hi)

const option_spec train_options[] = {
    {"data", "PATH",
     "text corpus: a UTF-8 file (plain or .gz) or a directory of them; default " DEFAULT_CORPUS
     " (Debian's fortunes)",
     OPT_STRING, FIELD(data), SCOPE_INVOCATION, .ilo = 0},
    {"config", "NAME", "model configuration (default cpu-small)", OPT_CHOICE, FIELD(config),
     SCOPE_RUN, .choices = "cpu-small|cpu-medium|shakespeare-char|gpt2-124m"},
    {"n-layer", "N", "override the configuration's number of blocks", OPT_INT, FIELD(n_layer),
     SCOPE_MODEL, COUNT(1, 1024)},
    {"n-head", "N", "override the number of attention heads", OPT_INT, FIELD(n_head), SCOPE_MODEL,
     COUNT(1, 1024)},
    {"n-embd", "N", "override the width (a multiple of the heads)", OPT_INT, FIELD(n_embd),
     SCOPE_MODEL, COUNT(1, 65536)},
    {"block", "N", "override the context length", OPT_INT, FIELD(block), SCOPE_MODEL,
     COUNT(1, 1 << 20)},
    {"batch", "N", "override the batch size (sequences per micro-batch)", OPT_INT, FIELD(batch),
     SCOPE_MODEL, COUNT(1, 1 << 20)},
    {"dropout", "P", "override the dropout probability", OPT_DOUBLE, FIELD(dropout), SCOPE_MODEL,
     .dlo = 0, .dhi = 1, .dhi_open = true},
    {"tokenizer", "KIND", "char (default) or bpe, trained on the corpus", OPT_CHOICE,
     FIELD(tokenizer), SCOPE_RUN, .choices = "char|bpe"},
    {"vocab-size", "N", "vocabulary size of the bpe tokenizer (default 512)", OPT_INT,
     FIELD(vocab_size), SCOPE_RUN, COUNT(256, 1 << 20)},
    {"steps", "N",
     "train until N optimizer steps are done (default 1500; 0 with --resume or --init-from: only "
     "sample)",
     OPT_INT64, FIELD(steps), SCOPE_INVOCATION, COUNT(0, STEPS_MAX)},
    {"lr", "X", "peak learning rate (default 1e-3)", OPT_DOUBLE, FIELD(lr), SCOPE_RUN, .dlo = 0,
     .dlo_open = true, .dhi = INFINITY},
    {"min-lr", "X", "learning rate at the end of the cosine decay (default lr/10)", OPT_DOUBLE,
     FIELD(min_lr), SCOPE_RUN, .dlo = 0, .dhi = INFINITY},
    {"warmup", "N", "linear warmup steps (default 100)", OPT_INT64, FIELD(warmup), SCOPE_RUN,
     COUNT(0, STEPS_MAX)},
    {"decay-steps", "N",
     "the cosine decay reaches min-lr at step N (default: --steps; give the whole run's length "
     "to a run that will be resumed)",
     OPT_INT64, FIELD(decay_steps), SCOPE_RUN, COUNT(1, STEPS_MAX)},
    {"schedule", "KIND", "cosine (default: warmup then cosine decay to min-lr) or constant",
     OPT_CHOICE, FIELD(schedule), SCOPE_RUN, .choices = "cosine|constant"},
    {"beta1", "X", "AdamW beta1 (default 0.9)", OPT_DOUBLE, FIELD(beta1), SCOPE_RUN, .dlo = 0,
     .dhi = 1, .dhi_open = true},
    {"beta2", "X", "AdamW beta2 (default 0.95; nanoGPT uses 0.99 for shakespeare-char)", OPT_DOUBLE,
     FIELD(beta2), SCOPE_RUN, .dlo = 0, .dhi = 1, .dhi_open = true},
    {"weight-decay", "X", "AdamW weight decay on 2-D weights (default 0.1)", OPT_DOUBLE,
     FIELD(weight_decay), SCOPE_RUN, .dlo = 0, .dhi = INFINITY},
    {"grad-clip", "X", "clip the global gradient norm (default 1.0; 0: off)", OPT_DOUBLE,
     FIELD(grad_clip), SCOPE_RUN, .dlo = 0, .dhi = INFINITY},
    {"grad-accum", "N", "micro-batches per optimizer step (default 1)", OPT_INT, FIELD(grad_accum),
     SCOPE_RUN, COUNT(1, 65536)},
    {"eval-interval", "N", "evaluate every N steps (default 500; 0: only at the end)", OPT_INT64,
     FIELD(eval_interval), SCOPE_RUN, COUNT(0, STEPS_MAX)},
    {"eval-iters", "N", "batches per evaluation of each split (default 20)", OPT_INT,
     FIELD(eval_iters), SCOPE_RUN, COUNT(1, 100000)},
    {"target-loss", "X",
     "print the wall time at which an evaluation's val loss first reaches X (time to quality)",
     OPT_DOUBLE, FIELD(target_loss), SCOPE_INVOCATION, .dlo = 0, .dhi = INFINITY,
     .dlo_open = true},
    {"log-interval", "N", "print a line every N steps when not on a terminal (default 50)",
     OPT_INT64, FIELD(log_interval), SCOPE_INVOCATION, COUNT(1, STEPS_MAX)},
    {"seed", "N", "seed for initialisation, dropout, batches and sampling (default 1337)",
     OPT_INT64, FIELD(seed), SCOPE_RUN, COUNT(0, 9223372036854775807LL)},
    {"device", "DEV", "cpu (default), cuda, cuda:N or student", OPT_STRING, FIELD(device),
     SCOPE_INVOCATION, .ilo = 0},
    {"precision", "P",
     "fp32 (default), tf32 (float32 matmuls on TF32 tensor cores) or bf16 (mixed precision: "
     "bfloat16 matmuls and activations, float32 weights; CUDA only)",
     OPT_CHOICE, FIELD(precision), SCOPE_INVOCATION, .choices = "fp32|tf32|bf16"},
    {"threads", "N", "CPU threads (default: OMP_NUM_THREADS, else all cores)", OPT_INT, FIELD(threads), SCOPE_INVOCATION,
     COUNT(1, 4096)},
    {"save", "PATH", "write a checkpoint (safetensors) at the end, and when stopped by a signal",
     OPT_STRING, FIELD(save), SCOPE_INVOCATION, .ilo = 0},
    {"save-interval", "N", "also write it every N steps (default 0: only at the end)", OPT_INT64,
     FIELD(save_interval), SCOPE_INVOCATION, COUNT(0, STEPS_MAX)},
    {"resume", "PATH",
     "continue from a checkpoint (model, optimizer, RNG, data position, schedule and the options "
     "it records)",
     OPT_STRING, FIELD(resume), SCOPE_INVOCATION, .ilo = 0},
    {"init-from", "PATH",
     "start from weights alone: a safetensors file with nanoGPT's names (PyTorch's state_dict, "
     "float32, bfloat16 or float16) or an awl checkpoint; fresh optimizer",
     OPT_STRING, FIELD(init_from), SCOPE_INVOCATION, .ilo = 0},
    {"log", "PATH", "CSV log of losses and speed (default train_log.csv; \"\": none)", OPT_STRING,
     FIELD(log), SCOPE_INVOCATION, .ilo = 0},
    {"checkpoint-activations", NULL, "recompute each block's activations in backward", OPT_FLAG,
     FIELD(checkpoint_activations), SCOPE_INVOCATION, .ilo = 0},
    {"zero", "STAGE",
     "under awlrun: shard the optimizer state (1) and the gradients too (2) across the ranks "
     "(ZeRO; default 0: DDP)",
     OPT_INT, FIELD(zero), SCOPE_INVOCATION, COUNT(0, 2)},
    {"tensor-parallel", "N",
     "under awlrun: split every block over N ranks (Megatron-style; the ranks divide into "
     "groups of N that share a batch; default 1)",
     OPT_INT, FIELD(tensor_parallel), SCOPE_INVOCATION, COUNT(1, 4096)},
    {"dist-backend", "NAME",
     "under a launcher: the transport between ranks, tcp (awl's own), mpi (a build with MPI) or "
     "nccl (GPUs, a build with NCCL); default auto: nccl with --device cuda, else mpi under "
     "mpirun, tcp under awlrun, torchrun and srun",
     OPT_CHOICE, FIELD(dist_backend), SCOPE_INVOCATION, .choices = "auto|tcp|mpi|nccl"},
    {"baseline-tokens-per-s", "X",
     "one rank's tokens/s: a parallel run ends by comparing its own with it (scaling "
     "efficiency)",
     OPT_DOUBLE, FIELD(baseline_tokens_per_s), SCOPE_INVOCATION, .dlo = 0, .dhi = INFINITY,
     .dlo_open = true},
    {"profile", "PATH",
     "record the steps of --profile-steps: a Chrome trace (Perfetto, chrome://tracing) at PATH, "
     "the ops' summary and roofline on stdout and in PATH's .summary.tsv (docs/profiling.md)",
     OPT_STRING, FIELD(profile), SCOPE_INVOCATION, .ilo = 0},
    {"profile-steps", "A:B", "the steps --profile records, A to B inclusive (default 2:4)",
     OPT_STRING, FIELD(profile_steps), SCOPE_INVOCATION, .ilo = 0},
    {"memory-ledger", NULL,
     "print each logged step's memory by role (parameters, gradients, optimizer state, saved "
     "activations, temporaries, cached free, peak) and check the first three against 4/4/8 bytes "
     "a parameter",
     OPT_FLAG, FIELD(memory_ledger), SCOPE_INVOCATION, .ilo = 0},
    {"peak-gflops", "X",
     "the hardware's peak GFLOP/s that MFU is measured against (default: the CPU's FMA peak, "
     "measured once and cached, or the GPU's datasheet rate)",
     OPT_DOUBLE, FIELD(peak_gflops), SCOPE_INVOCATION, .dlo = 0, .dhi = INFINITY,
     .dlo_open = true},
    {"sample-tokens", "N", "tokens to sample at the end (default 300; 0: none)", OPT_INT,
     FIELD(sample_tokens), SCOPE_INVOCATION, COUNT(0, 1 << 20)},
    {"temperature", "X", "sampling temperature (default 0.8; 0: always the most likely token)",
     OPT_DOUBLE, FIELD(temperature), SCOPE_INVOCATION, .dlo = 0, .dhi = 100},
    {"top-k", "N", "sample among the k most likely tokens (default 200; 0: all)", OPT_INT,
     FIELD(top_k), SCOPE_INVOCATION, COUNT(0, 2147483647)},
    {"prompt", "TEXT",
     "text the sample continues, in the tokenizer's vocabulary (default: a newline)", OPT_STRING,
     FIELD(prompt), SCOPE_INVOCATION, .ilo = 0},
};

const int n_train_options = (int)(sizeof train_options / sizeof *train_options);

_Static_assert(sizeof train_options / sizeof *train_options <= 64, "settings.given has 64 bits");

settings default_settings(void)
{
    settings s = {0};
    s.config = "cpu-small";
    s.device = "cpu";
    s.tokenizer = "char";
    s.precision = "fp32";
    s.vocab_size = 512;
    s.steps = 1500;
    s.warmup = 100;
    s.grad_accum = 1;
    s.tensor_parallel = 1;
    s.dist_backend = "auto";
    s.lr = 1e-3;
    s.beta1 = 0.9;
    s.beta2 = 0.95;
    s.weight_decay = 0.1;
    s.grad_clip = 1.0;
    s.schedule = "cosine";
    s.eval_interval = 500;
    s.eval_iters = 20;
    s.log_interval = 50;
    s.seed = 1337;
    s.log = "train_log.csv";
    s.sample_tokens = 300;
    s.temperature = 0.8;
    s.top_k = 200;
    s.prompt = "\n";
    s.profile_steps = "2:4";
    return s;
}

static const option_table table = {"train_gpt", train_options,
                                   (int)(sizeof train_options / sizeof *train_options), 28};

void print_help(const char *program)
{
    printf("usage: %s [options]\n\n"
           "Trains a nanoGPT-style GPT on a text corpus and prints a sample.\n\n",
           program);
    options_print_help(&table);
    printf("\nWith --resume, the model, the tokenizer and these options come from the checkpoint\n"
           "(giving one with another value is an error):\n ");
    for (int i = 0; i < n_train_options; i++)
        if (train_options[i].scope != SCOPE_INVOCATION) printf(" --%s", train_options[i].name);
    printf(
        "\n\nThe first SIGINT or SIGTERM finishes the step, saves to --save and exits; a second\n"
        "exits at once. Exit status: 0 done, 1 failure, 2 usage error, 130/143 stopped by\n"
        "SIGINT/SIGTERM.\n");
}

const option_spec *find_option(const char *name) { return options_find(&table, name); }

bool option_given(const settings *s, const char *name)
{
    return options_given(&table, s->given, name);
}

bool option_set(const settings *s, const char *name)
{
    return options_given(&table, s->given | s->from_checkpoint, name);
}

static void *field_of(const option_spec *o, const settings *s) { return (char *)s + o->offset; }

int parse_option_value(const option_spec *o, const char *text, settings *s, const char *source)
{
    return options_parse_value(&table, o, text, s, source);
}

void format_option(const option_spec *o, const settings *s, char *buf, size_t size)
{
    void *field = field_of(o, s);
    switch (o->kind) {
    case OPT_STRING:
    case OPT_CHOICE: snprintf(buf, size, "%s", *(const char **)field); break;
    case OPT_INT: snprintf(buf, size, "%d", *(int *)field); break;
    case OPT_INT64: snprintf(buf, size, "%lld", (long long)*(int64_t *)field); break;
    case OPT_DOUBLE: snprintf(buf, size, "%.17g", *(double *)field); break;
    case OPT_FLAG: snprintf(buf, size, "%s", *(bool *)field ? "true" : "false"); break;
    }
}

bool option_equal(const option_spec *o, const settings *a, const settings *b)
{
    char x[256], y[256];
    format_option(o, a, x, sizeof x);
    format_option(o, b, y, sizeof y);
    return strcmp(x, y) == 0;
}

int parse_args(int argc, char **argv, settings *s)
{
    return options_parse(&table, argc, argv, s, &s->given);
}

int check_settings(const settings *s)
{
    const char *paths[] = {"data", "save", "resume", "init-from"};
    for (int i = 0; i < 4; i++) {
        const option_spec *o = find_option(paths[i]);
        const char *value = *(const char *const *)field_of(o, s);
        if (value && value[0] == '\0') return complain("--%s: the path is empty", paths[i]);
    }
    if (s->resume && s->init_from)
        return complain("--resume and --init-from exclude each other: --resume continues a run, "
                        "--init-from starts a new one from weights");
    if (s->steps == 0 && !s->resume && !s->init_from)
        return complain("--steps 0 trains nothing, and without --resume or --init-from there is "
                        "no model to sample or save (allowed without them: an integer in [1, "
                        "2147483647])");
    if (option_given(s, "save-interval") && s->save_interval > 0 && !s->save)
        return complain("--save-interval %lld needs --save PATH (where to write)",
                        (long long)s->save_interval);
    if (option_given(s, "vocab-size") && strcmp(s->tokenizer, "bpe") != 0 && !s->resume)
        return complain("--vocab-size is the bpe tokenizer's: give --tokenizer bpe too (the char "
                        "tokenizer's vocabulary is the corpus's distinct bytes)");
    if (s->zero && s->tensor_parallel > 1)
        return complain("--zero %d and --tensor-parallel %d exclude each other (shard the "
                        "optimizer or split the layers)",
                        s->zero, s->tensor_parallel);
    if (s->sample_tokens > 0 && s->prompt[0] == '\0')
        return complain("--prompt is empty: a sample continues at least one token (the default "
                        "is a newline)");
    return 0;
}
