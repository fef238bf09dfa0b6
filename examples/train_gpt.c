/*
 * examples/train_gpt.c - train a nanoGPT-style GPT on a text file, then sample.
 *
 *     ./build/train_gpt                                  # cpu-small on the default corpus
 *     ./build/train_gpt --data input.txt --config cpu-medium --steps 3000 --save ckpt.safetensors
 *     ./build/train_gpt --resume ckpt.safetensors --steps 4000 --save ckpt.safetensors
 *     ./build/train_gpt --resume ckpt.safetensors --steps 0 --sample-tokens 500 --prompt "ROMEO:"
 *     ./build/train_gpt --help
 *
 * The program is the training loop of DESIGN.md with everything a real run
 * needs around it: options, a tokenizer (characters, or byte-level BPE
 * trained on the corpus), AdamW with warmup and cosine decay, gradient
 * accumulation and clipping, periodic evaluation, a CSV log, progress with
 * tokens/s, MFU and ETA, crash-safe checkpoints that resume bitwise, and a
 * sample at the end.
 *
 * MFU is the model's FLOPs per second (6 N + 12 n_layer block n_embd per
 * token) over the matmul rate measured on the same device in this process
 * when training starts, so it says how close the whole step comes to the
 * machine's own matrix-multiply speed.
 *
 * Every option lives in one table (`options` below): parsing and --help are
 * both generated from it, so the help cannot drift from the code.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "awl.h"

#define DEFAULT_CORPUS "/usr/share/games/fortunes"

/* ---- options ------------------------------------------------------------------ */

typedef struct settings {
    const char *data, *config, *device, *tokenizer, *precision;
    int vocab_size;
    int n_layer, n_head, n_embd, block, batch; /* 0: the configuration's */
    double dropout;                            /* < 0: the configuration's */
    int steps, warmup, grad_accum;
    double lr, min_lr, beta1, beta2, weight_decay, grad_clip;
    const char *schedule;
    int eval_interval, eval_iters, log_interval;
    long seed;
    int threads;
    const char *save, *resume, *log;
    int save_interval;
    bool checkpoint_activations;
    int sample_tokens, top_k;
    double temperature;
    const char *prompt;
} settings;

typedef enum { OPT_STRING, OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_FLAG } option_kind;

typedef struct option_spec {
    const char *name, *arg, *help;
    option_kind kind;
    size_t offset; /* of the field in settings */
} option_spec;

#define FIELD(f) offsetof(settings, f)

static const option_spec options[] = {
    {"data", "PATH",
     "text corpus: a file (plain or .gz) or a directory of files; default " DEFAULT_CORPUS
     " (Debian's fortunes)",
     OPT_STRING, FIELD(data)},
    {"config", "NAME", "cpu-small, cpu-medium, shakespeare-char or gpt2-124m", OPT_STRING,
     FIELD(config)},
    {"n-layer", "N", "override the configuration's number of blocks", OPT_INT, FIELD(n_layer)},
    {"n-head", "N", "override the number of attention heads", OPT_INT, FIELD(n_head)},
    {"n-embd", "N", "override the width", OPT_INT, FIELD(n_embd)},
    {"block", "N", "override the context length", OPT_INT, FIELD(block)},
    {"batch", "N", "override the batch size (sequences per micro-batch)", OPT_INT, FIELD(batch)},
    {"dropout", "P", "override the dropout probability", OPT_DOUBLE, FIELD(dropout)},
    {"tokenizer", "KIND", "char (default) or bpe", OPT_STRING, FIELD(tokenizer)},
    {"vocab-size", "N", "vocabulary size of the bpe tokenizer (default 512)", OPT_INT,
     FIELD(vocab_size)},
    {"steps", "N", "train until this many optimizer steps are done (default 1500)", OPT_INT,
     FIELD(steps)},
    {"lr", "X", "peak learning rate (default 1e-3)", OPT_DOUBLE, FIELD(lr)},
    {"min-lr", "X", "learning rate at the end of the cosine decay (default lr/10)", OPT_DOUBLE,
     FIELD(min_lr)},
    {"warmup", "N", "linear warmup steps (default 100)", OPT_INT, FIELD(warmup)},
    {"schedule", "KIND", "cosine (default: warmup then cosine decay to min-lr) or constant",
     OPT_STRING, FIELD(schedule)},
    {"beta1", "X", "AdamW beta1 (default 0.9)", OPT_DOUBLE, FIELD(beta1)},
    {"beta2", "X", "AdamW beta2 (default 0.95; nanoGPT uses 0.99 for shakespeare-char)", OPT_DOUBLE,
     FIELD(beta2)},
    {"weight-decay", "X", "AdamW weight decay on 2-D weights (default 0.1)", OPT_DOUBLE,
     FIELD(weight_decay)},
    {"grad-clip", "X", "clip the global gradient norm (default 1.0; 0: off)", OPT_DOUBLE,
     FIELD(grad_clip)},
    {"grad-accum", "N", "micro-batches per optimizer step (default 1)", OPT_INT, FIELD(grad_accum)},
    {"eval-interval", "N", "evaluate every N steps (default 500; 0: only at the end)", OPT_INT,
     FIELD(eval_interval)},
    {"eval-iters", "N", "batches per evaluation (default 20)", OPT_INT, FIELD(eval_iters)},
    {"log-interval", "N", "print a line every N steps when not on a terminal (default 50)", OPT_INT,
     FIELD(log_interval)},
    {"seed", "N", "seed for initialisation, dropout and batch sampling (default 1337)", OPT_LONG,
     FIELD(seed)},
    {"device", "DEV", "cpu (default), cuda or cuda:N", OPT_STRING, FIELD(device)},
    {"precision", "P",
     "fp32 (default), tf32 (float32 matmuls on TF32 tensor cores) or bf16 "
     "(mixed precision: bfloat16 matmuls and activations, float32 weights; "
     "CUDA only)",
     OPT_STRING, FIELD(precision)},
    {"threads", "N", "CPU threads (default: all cores)", OPT_INT, FIELD(threads)},
    {"save", "PATH", "write a checkpoint (safetensors) at the end", OPT_STRING, FIELD(save)},
    {"save-interval", "N", "also write it every N steps (default 0: only at the end)", OPT_INT,
     FIELD(save_interval)},
    {"resume", "PATH", "continue from a checkpoint (model, optimizer, RNG, data position)",
     OPT_STRING, FIELD(resume)},
    {"log", "PATH", "CSV log of losses and speed (default train_log.csv; \"\": none)", OPT_STRING,
     FIELD(log)},
    {"checkpoint-activations", NULL, "recompute each block's activations in backward", OPT_FLAG,
     FIELD(checkpoint_activations)},
    {"sample-tokens", "N", "tokens to sample at the end (default 300; 0: none)", OPT_INT,
     FIELD(sample_tokens)},
    {"temperature", "X", "sampling temperature (default 0.8)", OPT_DOUBLE, FIELD(temperature)},
    {"top-k", "N", "sample among the k most likely tokens (default 200; 0: all)", OPT_INT,
     FIELD(top_k)},
    {"prompt", "TEXT", "text the sample continues (default: a newline)", OPT_STRING, FIELD(prompt)},
};

#define N_OPTIONS ((int)(sizeof options / sizeof *options))

static settings default_settings(void)
{
    settings s = {0};
    s.config = "cpu-small";
    s.device = "cpu";
    s.tokenizer = "char";
    s.precision = "fp32";
    s.vocab_size = 512;
    s.dropout = -1;
    s.steps = 1500;
    s.warmup = 100;
    s.grad_accum = 1;
    s.lr = 1e-3;
    s.min_lr = -1;
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
    return s;
}

static void print_help(const char *program)
{
    printf("usage: %s [options]\n\n"
           "Trains a nanoGPT-style GPT on a text corpus and prints a sample.\n\n",
           program);
    for (int i = 0; i < N_OPTIONS; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", options[i].name, options[i].arg ? " " : "",
                 options[i].arg ? options[i].arg : "");
        printf("  %-28s %s\n", left, options[i].help);
    }
    printf("  %-28s %s\n", "--help", "show this help");
}

static bool parse_number(const char *text, option_kind kind, void *field)
{
    char *end;
    if (kind == OPT_DOUBLE) {
        double v = strtod(text, &end);
        if (*end || end == text) return false;
        *(double *)field = v;
    } else {
        long v = strtol(text, &end, 10);
        if (*end || end == text) return false;
        if (kind == OPT_INT)
            *(int *)field = (int)v;
        else
            *(long *)field = v;
    }
    return true;
}

/* Returns 0, 1 for --help, or -1 after printing an error. */
static int parse_args(int argc, char **argv, settings *s)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return 1;
        const option_spec *o = NULL;
        const char *value = NULL;
        if (strncmp(arg, "--", 2) == 0) {
            const char *eq = strchr(arg, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            for (int k = 0; k < N_OPTIONS && !o; k++)
                if (strlen(options[k].name) == len && strncmp(options[k].name, arg + 2, len) == 0)
                    o = &options[k];
            if (eq) value = eq + 1;
        }
        if (!o) {
            fprintf(stderr, "train_gpt: unknown option '%s' (see --help)\n", arg);
            return -1;
        }
        void *field = (char *)s + o->offset;
        if (o->kind == OPT_FLAG) {
            *(bool *)field = true;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "train_gpt: --%s needs a value\n", o->name);
                return -1;
            }
            value = argv[++i];
        }
        if (o->kind == OPT_STRING)
            *(const char **)field = value;
        else if (!parse_number(value, o->kind, field)) {
            fprintf(stderr, "train_gpt: --%s: '%s' is not a number\n", o->name, value);
            return -1;
        }
    }
    return 0;
}

/* ---- the corpus ------------------------------------------------------------------ */

typedef struct text_buffer {
    char *data;
    size_t len, capacity;
} text_buffer;

static void text_append(text_buffer *t, const char *bytes, size_t n)
{
    if (t->len + n + 1 > t->capacity) {
        t->capacity = (t->len + n + 1) * 2;
        char *grown = realloc(t->data, t->capacity);
        if (!grown) {
            fprintf(stderr, "train_gpt: out of memory reading the corpus\n");
            exit(1);
        }
        t->data = grown;
    }
    memcpy(t->data + t->len, bytes, n);
    t->len += n;
    t->data[t->len] = '\0';
}

/* Appends a file, plain or gzip (zlib reads both). */
static int read_file(const char *path, text_buffer *t)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr, "train_gpt: cannot open %s\n", path);
        return -1;
    }
    char chunk[1 << 16];
    int n;
    while ((n = gzread(f, chunk, sizeof chunk)) > 0) text_append(t, chunk, (size_t)n);
    int failed = n < 0;
    if (failed) fprintf(stderr, "train_gpt: cannot read %s\n", path);
    gzclose(f);
    return failed ? -1 : 0;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends every regular file of a directory in name order, skipping the
 * binary indexes (*.dat) and links of the fortunes package. */
static int read_directory(const char *path, text_buffer *t)
{
    DIR *dir = opendir(path);
    if (!dir) return -1;
    char **names = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || (len > 4 && strcmp(e->d_name + len - 4, ".dat") == 0)) continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        names = realloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = strdup(full);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof *names, compare_names);
    int status = 0;
    for (int i = 0; i < n; i++) {
        if (status == 0) status = read_file(names[i], t);
        free(names[i]);
    }
    free(names);
    return status;
}

static int read_corpus(const char *path, text_buffer *t)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "train_gpt: no corpus at %s%s\n", path,
                strcmp(path, DEFAULT_CORPUS) == 0
                    ? " (the default corpus comes from Debian's fortunes package: run make setup)"
                    : "");
        return -1;
    }
    int status = S_ISDIR(st.st_mode) ? read_directory(path, t) : read_file(path, t);
    if (status == 0 && t->len == 0) {
        fprintf(stderr, "train_gpt: the corpus at %s is empty\n", path);
        return -1;
    }
    return status;
}

/* ---- timing and display ------------------------------------------------------------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void format_duration(double seconds, char *buf, size_t size)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, size, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60)
        snprintf(buf, size, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, size, "%lds", s);
}

typedef struct progress {
    bool tty;
    int start_step, total_steps;
    double start_time;
} progress;

static void show_progress(const progress *p, int step, double loss, double lr, double tok_s,
                          double mfu, int log_interval)
{
    int done = step + 1 - p->start_step, todo = p->total_steps - step - 1;
    double elapsed = now() - p->start_time;
    char eta[32];
    format_duration(done > 0 ? elapsed / done * todo : 0, eta, sizeof eta);
    if (p->tty) {
        enum { WIDTH = 24 };
        int filled = (int)((double)(step + 1) / p->total_steps * WIDTH);
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
        bar[WIDTH] = '\0';
        printf("\r\033[K[%s] step %d/%d  loss %.4f  lr %.2e  %.1fk tok/s  MFU %.1f%%  ETA %s", bar,
               step + 1, p->total_steps, loss, lr, tok_s / 1e3, 100 * mfu, eta);
        fflush(stdout);
    } else if ((step + 1) % log_interval == 0 || step + 1 == p->total_steps ||
               step == p->start_step) {
        printf("step %d/%d  loss %.4f  lr %.2e  %.1fk tok/s  MFU %.1f%%  ETA %s\n", step + 1,
               p->total_steps, loss, lr, tok_s / 1e3, 100 * mfu, eta);
        fflush(stdout);
    }
}

/* ---- training --------------------------------------------------------------------------- */

typedef struct trainer {
    settings s;
    awl_gpt_config cfg;
    awl_tokenizer *tok;
    awl_text_dataset *data;
    awl_gpt *model;
    awl_optimizer *opt;
    awl_lr_schedule schedule;
    FILE *log;
    int step; /* optimizer steps done */
} trainer;

static int fail(const char *what)
{
    fprintf(stderr, "train_gpt: %s: %s\n", what, awl_last_error());
    return -1;
}

/* Mean loss over eval_iters batches of a split, in evaluation mode. */
static double evaluate(trainer *t, awl_data_split split)
{
    awl_module_train(awl_gpt_module(t->model), false);
    awl_no_grad_begin();
    double sum = 0;
    for (int i = 0; i < t->s.eval_iters; i++) {
        awl_scope_begin();
        awl_tensor *x, *y;
        double loss = NAN;
        if (awl_text_dataset_batch(t->data, split, t->cfg.batch, t->s.device, &x, &y) == 0)
            loss = awl_item(awl_gpt_loss(t->model, x, y));
        awl_scope_end();
        sum += loss;
    }
    awl_no_grad_end();
    awl_module_train(awl_gpt_module(t->model), true);
    return sum / t->s.eval_iters;
}

/* One optimizer step over grad_accum micro-batches; returns the mean loss. */
static double train_step(trainer *t, double lr)
{
    awl_optimizer_set_lr(t->opt, lr);
    double total = 0;
    for (int micro = 0; micro < t->s.grad_accum; micro++) {
        awl_scope_begin();
        awl_tensor *x, *y, *loss = NULL;
        if (awl_text_dataset_batch(t->data, AWL_SPLIT_TRAIN, t->cfg.batch, t->s.device, &x, &y) ==
            0) {
            awl_tensor *l = awl_gpt_loss(t->model, x, y);
            loss = awl_keep(t->s.grad_accum > 1 ? awl_div_scalar(l, t->s.grad_accum) : l);
        }
        awl_scope_end();
        if (!loss || awl_backward(loss) < 0) {
            awl_release(loss);
            return NAN;
        }
        total += awl_item(loss) * t->s.grad_accum;
        awl_release(loss);
    }
    if (t->s.grad_clip > 0) awl_clip_grad_norm(awl_gpt_parameters(t->model), t->s.grad_clip);
    if (awl_optimizer_step(t->opt) < 0) return NAN;
    awl_optimizer_zero_grad_ex(t->opt, true); /* set_to_none, as PyTorch */
    return total / t->s.grad_accum;
}

static int save_checkpoint(trainer *t, const char *path)
{
    awl_train_state st = {0};
    st.step = t->step;
    awl_rng_get_state(&st.rng_seed, &st.rng_offset);
    st.data_seed = awl_text_dataset_get_seed(t->data);
    st.data_position[0] = awl_text_dataset_get_position(t->data, AWL_SPLIT_TRAIN);
    st.data_position[1] = awl_text_dataset_get_position(t->data, AWL_SPLIT_VAL);
    char *tok_text = NULL, config[512];
    size_t tok_len;
    if (awl_tokenizer_serialize(t->tok, &tok_text, &tok_len) == 0)
        awl_train_state_set_tokenizer(&st, tok_text);
    free(tok_text);
    snprintf(config, sizeof config,
             "{\"vocab\":%d,\"block\":%d,\"n_layer\":%d,\"n_head\":%d,\"n_embd\":%d,"
             "\"batch\":%d,\"dropout\":%g,\"bias\":%s}",
             t->cfg.vocab, t->cfg.block, t->cfg.n_layer, t->cfg.n_head, t->cfg.n_embd, t->cfg.batch,
             t->cfg.dropout, t->cfg.bias ? "true" : "false");
    awl_train_state_set_config(&st, config);
    int status = awl_checkpoint_save(path, awl_gpt_parameters(t->model), t->opt, &st);
    awl_train_state_clear(&st);
    return status < 0 ? fail("saving the checkpoint") : 0;
}

/* Reads the integer `key` of a flat JSON object such as the saved config. */
static bool json_int(const char *json, const char *key, int *out)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = json ? strstr(json, pattern) : NULL;
    if (!at) return false;
    *out = atoi(at + strlen(pattern));
    return true;
}

/* Configuration, tokenizer and dataset: from the options, or the checkpoint. */
static int prepare(trainer *t, awl_train_state *resumed)
{
    settings *s = &t->s;
    if (awl_gpt_config_named(s->config, &t->cfg) < 0) return fail("--config");
    text_buffer corpus = {0};
    if (read_corpus(s->data ? s->data : DEFAULT_CORPUS, &corpus) < 0) return -1;
    if (resumed) {
        const char *saved = resumed->tokenizer;
        t->tok = saved ? awl_tokenizer_deserialize(saved, strlen(saved)) : NULL;
        if (!t->tok) return fail("the checkpoint's tokenizer");
        int *fields[] = {&t->cfg.block, &t->cfg.n_layer, &t->cfg.n_head, &t->cfg.n_embd};
        const char *keys[] = {"block", "n_layer", "n_head", "n_embd"};
        for (int i = 0; i < 4; i++) json_int(resumed->config_json, keys[i], fields[i]);
    } else if (strcmp(s->tokenizer, "bpe") == 0) {
        double t0 = now();
        t->tok = awl_tokenizer_bpe_train(corpus.data, corpus.len, s->vocab_size);
        if (t->tok)
            printf("trained a byte-level BPE tokenizer: %d tokens in %.2f s\n",
                   awl_tokenizer_vocab_size(t->tok), now() - t0);
    } else if (strcmp(s->tokenizer, "char") == 0) {
        t->tok = awl_tokenizer_char_from_text(corpus.data, corpus.len);
    } else {
        fprintf(stderr, "train_gpt: --tokenizer must be char or bpe\n");
        free(corpus.data);
        return -1;
    }
    if (!t->tok) {
        free(corpus.data);
        return fail("building the tokenizer");
    }
    if (s->n_layer) t->cfg.n_layer = s->n_layer;
    if (s->n_head) t->cfg.n_head = s->n_head;
    if (s->n_embd) t->cfg.n_embd = s->n_embd;
    if (s->block) t->cfg.block = s->block;
    if (s->batch) t->cfg.batch = s->batch;
    if (s->dropout >= 0) t->cfg.dropout = s->dropout;
    t->cfg.vocab = awl_tokenizer_vocab_size(t->tok);
    t->data = awl_text_dataset_from_text(corpus.data, corpus.len, t->tok, t->cfg.block, 0.9);
    free(corpus.data);
    if (!t->data) return fail("loading the corpus");
    awl_text_dataset_seed(t->data, (uint64_t)s->seed);
    return 0;
}

static void print_sample(trainer *t)
{
    if (t->s.sample_tokens <= 0) return;
    int32_t *prompt_ids = NULL;
    size_t n_prompt = 0;
    if (awl_tokenizer_encode(t->tok, t->s.prompt, strlen(t->s.prompt), &prompt_ids, &n_prompt) <
            0 ||
        n_prompt == 0) {
        free(prompt_ids); /* a prompt outside the vocabulary: start from token 0 */
        prompt_ids = calloc(1, sizeof *prompt_ids);
        n_prompt = 1;
    }
    int32_t *out = malloc((n_prompt + (size_t)t->s.sample_tokens) * sizeof *out);
    int n = awl_gpt_generate(t->model, prompt_ids, (int)n_prompt, t->s.sample_tokens,
                             t->s.temperature, t->s.top_k, (uint64_t)t->s.seed, out);
    char *text = NULL;
    size_t len = 0;
    if (n > 0 && awl_tokenizer_decode(t->tok, out, (size_t)n, &text, &len) == 0)
        printf("---- sample (temperature %.2f, top-k %d) ----\n%.*s\n----\n", t->s.temperature,
               t->s.top_k, (int)len, text);
    else
        fail("sampling");
    free(text);
    free(out);
    free(prompt_ids);
}

static int train(trainer *t)
{
    settings *s = &t->s;
    bool tty = isatty(STDOUT_FILENO);
    /* MFU against the matmul rate of the run's precision (TF32 mode is on) */
    double peak =
        awl_gpt_matmul_rate(s->device, strcmp(s->precision, "bf16") == 0 ? AWL_BF16 : AWL_F32);
    double flops_per_token = awl_gpt_flops_per_token(&t->cfg);
    int64_t tokens_per_step = (int64_t)t->cfg.batch * t->cfg.block * s->grad_accum;
    printf("model: %s, %lld parameters (%d layers, %d heads, width %d, block %d, vocab %d)\n",
           s->config, (long long)awl_gpt_num_params(t->model), t->cfg.n_layer, t->cfg.n_head,
           t->cfg.n_embd, t->cfg.block, t->cfg.vocab);
    printf(
        "training: %d steps of %lld tokens on %s (%s), %d threads; matmul ceiling %.1f GFLOP/s\n",
        s->steps, (long long)tokens_per_step, s->device, s->precision, awl_get_num_threads(),
        peak * 1e-9);
    progress p = {tty, t->step, s->steps, now()};
    double window_start = now();
    int window_steps = 0;
    double best_val = INFINITY; /* small corpora overfit: the best is what to keep */
    int best_step = 0;
    double tok_s = 0, mfu = 0;
    for (; t->step < s->steps; t->step++) {
        double lr = awl_lr_at(&t->schedule, t->step);
        double loss = train_step(t, lr);
        if (isnan(loss)) {
            if (tty) printf("\n");
            return fail("training step");
        }
        window_steps++;
        double elapsed = now() - window_start;
        if (elapsed > 0.5 || window_steps >= 20) {
            tok_s = (double)tokens_per_step * window_steps / elapsed;
            mfu = peak > 0 ? tok_s * flops_per_token / peak : 0;
            window_start = now();
            window_steps = 0;
        }
        show_progress(&p, t->step, loss, lr, tok_s, mfu, s->log_interval);
        bool last = t->step + 1 == s->steps;
        bool eval = last || (s->eval_interval > 0 && (t->step + 1) % s->eval_interval == 0);
        double val = NAN, train_eval = NAN;
        if (eval) {
            train_eval = evaluate(t, AWL_SPLIT_TRAIN);
            val = evaluate(t, AWL_SPLIT_VAL);
            printf("%sstep %d: train loss %.4f, val loss %.4f (%.0f s)\n", tty ? "\r\033[K" : "",
                   t->step + 1, train_eval, val, now() - p.start_time);
            if (val < best_val) {
                best_val = val;
                best_step = t->step + 1;
            }
            window_start = now(); /* evaluation time is not training speed */
            window_steps = 0;
        }
        if (t->log) {
            fprintf(t->log, "%d,%.6f,", t->step + 1, loss);
            if (eval) fprintf(t->log, "%.6f", val);
            fprintf(t->log, ",%.6e,%.1f,%.4f,%.2f\n", lr, tok_s, mfu, now() - p.start_time);
            fflush(t->log);
        }
        if (s->save && s->save_interval > 0 && (t->step + 1) % s->save_interval == 0 && !last) {
            t->step++; /* the checkpoint records steps done */
            int status = save_checkpoint(t, s->save);
            t->step--;
            if (status < 0) return -1;
        }
    }
    if (tty) printf("\n");
    printf("done: %d steps in %.1f s", s->steps - p.start_step, now() - p.start_time);
    if (best_step) printf("; best val loss %.4f at step %d", best_val, best_step);
    printf("\n");
    return 0;
}

static int run(trainer *t)
{
    settings *s = &t->s;
    if (s->threads > 0)
        awl_set_num_threads(s->threads);
    else
        awl_set_num_threads((int)sysconf(_SC_NPROCESSORS_ONLN));
    bool bf16 = strcmp(s->precision, "bf16") == 0;
    if (strcmp(s->precision, "tf32") == 0 || bf16)
        awl_set_float32_matmul_precision("high");
    else if (strcmp(s->precision, "fp32") != 0) {
        fprintf(stderr, "train_gpt: --precision must be fp32, tf32 or bf16\n");
        return -1;
    }
    awl_device device;
    if (awl_device_parse(s->device, &device) < 0) return fail("--device");
    char missing[2048];
    int n_missing = awl_device_missing_primitives(s->device, missing, sizeof missing);
    if (n_missing > 0) {
        fprintf(stderr,
                "train_gpt: device %s cannot train yet: %d required primitive%s not "
                "implemented:\n%s(awl-check --device %s --progress shows where it stands)\n",
                s->device, n_missing, n_missing == 1 ? " is" : "s are", missing, s->device);
        return -1;
    }
    awl_train_state resumed = {0};
    bool resuming = s->resume != NULL;
    if (resuming) {
        /* read the metadata first: the tokenizer and shape decide the model */
        awl_safetensors *f = awl_safetensors_open(s->resume);
        if (!f) return fail("--resume");
        const char *tok = awl_safetensors_metadata_get(f, "tokenizer");
        const char *cfg = awl_safetensors_metadata_get(f, "config");
        if (tok) awl_train_state_set_tokenizer(&resumed, tok);
        if (cfg) awl_train_state_set_config(&resumed, cfg);
        awl_safetensors_close(f);
    }
    int status = prepare(t, resuming ? &resumed : NULL);
    awl_train_state_clear(&resumed);
    if (status < 0) return -1;
    t->model = awl_gpt_new(&t->cfg, s->device, (uint64_t)s->seed);
    if (!t->model) return fail("building the model");
    if (s->checkpoint_activations) awl_gpt_set_checkpointing(t->model, true);
    if (bf16 && awl_gpt_set_autocast(t->model, AWL_BF16) < 0) return fail("--precision bf16");
    t->opt = awl_adamw_new(awl_gpt_parameters(t->model), s->lr, s->beta1, s->beta2, 1e-8,
                           s->weight_decay);
    if (!t->opt) return fail("the optimizer");
    double min_lr = s->min_lr >= 0 ? s->min_lr : s->lr / 10;
    t->schedule = strcmp(s->schedule, "constant") == 0
                      ? awl_lr_constant(s->lr)
                      : awl_lr_warmup_cosine(s->lr, s->warmup, s->steps, min_lr);
    awl_manual_seed((uint64_t)s->seed);
    if (resuming) {
        awl_train_state st = {0};
        if (awl_checkpoint_load(s->resume, awl_gpt_parameters(t->model), t->opt, &st) < 0)
            return fail("--resume");
        t->step = (int)st.step;
        awl_rng_set_state(st.rng_seed, st.rng_offset);
        awl_text_dataset_seed(t->data, st.data_seed);
        awl_text_dataset_set_position(t->data, AWL_SPLIT_TRAIN, st.data_position[0]);
        awl_text_dataset_set_position(t->data, AWL_SPLIT_VAL, st.data_position[1]);
        awl_train_state_clear(&st);
        printf("resumed from %s at step %d\n", s->resume, t->step);
    }
    if (s->log && s->log[0]) {
        bool append = resuming && access(s->log, F_OK) == 0;
        t->log = fopen(s->log, append ? "a" : "w");
        if (!t->log)
            fprintf(stderr, "train_gpt: cannot write the log %s\n", s->log);
        else if (!append)
            fprintf(t->log, "step,train_loss,val_loss,lr,tokens_per_sec,mfu,elapsed_s\n");
    }
    if (t->step < s->steps && train(t) < 0) return -1;
    if (s->save && save_checkpoint(t, s->save) < 0) return -1;
    if (s->save) printf("saved %s\n", s->save);
    print_sample(t);
    return 0;
}

int main(int argc, char **argv)
{
    trainer t = {0};
    t.s = default_settings();
    int parsed = parse_args(argc, argv, &t.s);
    if (parsed != 0) {
        if (parsed > 0) print_help(argv[0]);
        return parsed > 0 ? 0 : 2;
    }
    int status = run(&t);
    if (t.log) fclose(t.log);
    awl_optimizer_free(t.opt);
    awl_gpt_free(t.model);
    awl_text_dataset_free(t.data);
    awl_tokenizer_free(t.tok);
    return status < 0 ? 1 : 0;
}
