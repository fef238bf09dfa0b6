/*
 * examples/train_gpt - train a nanoGPT-style GPT on a text file, then sample.
 *
 *     ./build/train_gpt                                  # cpu-small on the default corpus
 *     ./build/train_gpt --data input.txt --config cpu-medium --steps 3000 --save ckpt.safetensors
 *     ./build/train_gpt --resume ckpt.safetensors --steps 4000 --save ckpt.safetensors
 *     ./build/train_gpt --resume ckpt.safetensors --steps 0 --sample-tokens 500 --prompt "ROMEO:"
 *     ./build/train_gpt --init-from model.safetensors --data input.txt --steps 0
 *     ./build/train_gpt --help
 *
 * The program is the training loop of DESIGN.md with everything a real run
 * needs around it: options, a tokenizer (characters, or byte-level BPE
 * trained on the corpus), AdamW with warmup and cosine decay, gradient
 * accumulation and clipping, periodic evaluation, a CSV log, progress with
 * tokens/s, MFU and ETA, crash-safe checkpoints that resume bitwise, weights
 * from PyTorch, and a sample at the end.
 *
 * Everything that can be known before training is checked before the first
 * step: every option's range, the combination of options, the device, the
 * paths it will write, the corpus (UTF-8 text), the tokenizer and the
 * prompt (both must represent their text), the model's configuration, and
 * a checkpoint's every byte. A usage error exits with status 2, any other
 * failure with 1, after one line that says why.
 *
 * Signals: the first SIGINT or SIGTERM lets the current step finish, saves
 * to --save when given (saying where) and exits with 128 + the signal
 * (130, 143), as a shell reports a program the signal killed; a second one
 * exits at once.
 *
 * Data-parallel: started by awlrun, torchrun, mpirun or srun (their
 * variables set; --dist-backend picks the transport: NCCL for --device
 * cuda, which puts rank k on cuda:<its LOCAL_RANK>), every
 * rank builds the same model, draws batches from a stream of its own and
 * trains under DDP, whose averaged gradients keep the ranks' weights
 * bit-identical; the global batch is the sum of the ranks'. Rank 0 alone
 * prints, logs, evaluates, saves (with every rank's random streams, so a
 * resume on as many ranks continues bitwise) and samples; the others'
 * standard output is discarded, their errors still go to stderr. The ranks
 * agree after every step whether a signal came, so they stop together.
 *
 * MFU is the model's FLOPs per second (6 N + 12 n_layer block n_embd per
 * token) over the matmul rate measured on the same device in this process
 * when training starts, so it says how close the whole step comes to the
 * machine's own matrix-multiply speed.
 */
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(AWL_WITH_NCCL) && AWL_WITH_NCCL
#define AWL_HAS_NCCL 1
#else
#define AWL_HAS_NCCL 0
#endif

#include "train_gpt.h"

volatile sig_atomic_t stop_signal = 0;

static void on_signal(int sig)
{
    if (stop_signal) {
        static const char msg[] = "\ntrain_gpt: second signal: exiting now\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(128 + sig);
    }
    static const char msg[] = "\ntrain_gpt: stopping after this step (signal again to exit now)\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    stop_signal = sig;
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int fail(const char *what)
{
    const char *why = awl_last_error();
    return complain("%s: %s", what, why && why[0] ? why : "(no further detail)");
}

/* ---- checks before anything runs ---------------------------------------------------- */

/* Whether the option's path can be written: not a directory, in a
 * directory that exists and is writable. */
static int check_writable(const char *option, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return complain("--%s %s is a directory, not a file", option, path);
    char *copy = strdup(path);
    const char *dir = copy ? dirname(copy) : ".";
    int status = 0;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        status = complain("--%s %s: the directory %s does not exist", option, path, dir);
    else if (access(dir, W_OK) != 0)
        status = complain("--%s %s: cannot write in %s: %s", option, path, dir, strerror(errno));
    else if (access(path, F_OK) == 0 && access(path, W_OK) != 0)
        status = complain("--%s %s: cannot write it: %s", option, path, strerror(errno));
    free(copy);
    return status;
}

static int check_device(const settings *s)
{
    awl_device device;
    if (awl_device_parse(s->device, &device) < 0) return fail("--device");
    if (!awl_device_available(s->device))
        return complain("--device %s: no such device on this machine", s->device);
    char missing[2048];
    int n_missing = awl_device_missing_primitives(s->device, missing, sizeof missing);
    if (n_missing > 0)
        return complain("device %s cannot train yet: %d required primitive%s not implemented:\n"
                        "%s(awl-check --device %s --progress shows where it stands)",
                        s->device, n_missing, n_missing == 1 ? " is" : "s are", missing, s->device);
    bool bf16 = strcmp(s->precision, "bf16") == 0;
    if (bf16 && strcmp(s->device, "cpu") == 0)
        return complain("--precision bf16 needs --device cuda: the CPU backend stores bfloat16 but "
                        "does not compute in it");
    if (bf16 || strcmp(s->precision, "tf32") == 0) awl_set_float32_matmul_precision("high");
    return 0;
}

/* The named configuration and the overrides given. */
static int configure(trainer *t)
{
    const settings *s = &t->s;
    if (awl_gpt_config_named(s->config, &t->cfg) < 0) return fail("--config");
    if (option_given(s, "n-layer")) t->cfg.n_layer = s->n_layer;
    if (option_given(s, "n-head")) t->cfg.n_head = s->n_head;
    if (option_given(s, "n-embd")) t->cfg.n_embd = s->n_embd;
    if (option_given(s, "block")) t->cfg.block = s->block;
    if (option_given(s, "batch")) t->cfg.batch = s->batch;
    if (option_given(s, "dropout")) t->cfg.dropout = s->dropout;
    if (t->cfg.n_embd % t->cfg.n_head != 0)
        return complain("--n-embd %d is not a multiple of --n-head %d", t->cfg.n_embd,
                        t->cfg.n_head);
    return 0;
}

/* The corpus, when training or building a tokenizer needs it: read,
 * checked as text, tokenised. */
static int prepare_data(trainer *t, bool trains)
{
    settings *s = &t->s;
    if (!trains && t->tok) return 0;
    const char *path = s->data ? s->data : DEFAULT_CORPUS;
    char *text = NULL;
    size_t len = 0;
    if (awl_corpus_read(path, &text, &len) < 0) {
        if (!s->data && access(path, F_OK) != 0)
            return complain("no corpus at %s: the default corpus comes from Debian's fortunes "
                            "package (scripts/setup.sh installs it), or give --data PATH",
                            path);
        return fail("--data");
    }
    int status = 0;
    if (!t->tok && strcmp(s->tokenizer, "bpe") == 0) {
        t->tok = awl_tokenizer_bpe_train(text, len, s->vocab_size);
        if (t->tok)
            printf("trained a byte-level BPE tokenizer on %s: %d tokens\n", path,
                   awl_tokenizer_vocab_size(t->tok));
    } else if (!t->tok) {
        t->tok = awl_tokenizer_char_from_text(text, len);
    }
    if (!t->tok) status = fail("building the tokenizer");
    if (status == 0 && awl_tokenizer_vocab_size(t->tok) != t->cfg.vocab && t->cfg.vocab > 0 &&
        (s->resume || s->init_from))
        status = complain("the tokenizer has %d tokens but the model %d: give --data the corpus "
                          "the model was trained on",
                          awl_tokenizer_vocab_size(t->tok), t->cfg.vocab);
    if (status == 0 && trains) {
        t->data = awl_text_dataset_from_text(text, len, t->tok, t->cfg.block, 0.9);
        if (!t->data) {
            char what[4200];
            snprintf(what, sizeof what, "--data %s", path);
            status = fail(what);
        }
    }
    free(text);
    return status;
}

static int check_prompt(const trainer *t)
{
    if (t->s.sample_tokens == 0) return 0;
    int32_t *ids = NULL;
    size_t n = 0;
    int status = awl_tokenizer_encode(t->tok, t->s.prompt, strlen(t->s.prompt), &ids, &n);
    free(ids);
    return status < 0 ? fail("--prompt") : 0;
}

/* Defaults that depend on other options, once the checkpoint has had its
 * say: min-lr is lr / 10 and the decay ends at --steps. */
static void resolve_defaults(trainer *t)
{
    settings *s = &t->s;
    if (!option_set(s, "min-lr")) s->min_lr = s->lr / 10;
    if (!option_set(s, "decay-steps")) s->decay_steps = s->steps > 0 ? s->steps : 1;
    t->schedule = strcmp(s->schedule, "constant") == 0
                      ? awl_lr_constant(s->lr)
                      : awl_lr_warmup_cosine(s->lr, s->warmup, s->decay_steps, s->min_lr);
    t->eval_seed = (uint64_t)s->seed + 0x9E3779B97F4A7C15ull; /* a stream apart from training's */
}

/* Rank r's generator and batch stream: rank 0 keeps the seed (so one rank
 * is the plain run), the others a stream of their own. */
static uint64_t rank_seed(uint64_t seed, int rank)
{
    return seed + (uint64_t)rank * 0x9E3779B97F4A7C15ull;
}

/* The whole model and its optimizer are built (and loaded): make the run
 * parallel. Tensor parallelism cuts this rank's pieces out of the model
 * (and of the optimizer's state), ZeRO takes this rank's shard of the
 * optimizer's state, DDP checks that every rank built the same model and
 * gives it rank 0's weights. */
static int go_parallel(trainer *t)
{
    settings *s = &t->s;
    if (t->tp) {
        t->tp_model = awl_tp_gpt_new(t->model, t->tp);
        if (!t->tp_model) return fail("--tensor-parallel");
        awl_tp_gpt_set_checkpointing(t->tp_model, s->checkpoint_activations);
        awl_optimizer *whole = t->opt;
        t->opt = awl_adamw_new(trained_params(t), s->lr, s->beta1, s->beta2, 1e-8, s->weight_decay);
        int status = t->opt ? tp_take_state(t, whole) : -1;
        awl_optimizer_free(whole);
        if (status < 0) return fail("--tensor-parallel: the optimizer");
    }
    if (s->zero) {
        awl_zero_options zo = {.stage = s->zero};
        t->zero = awl_zero_adamw_new(t->dp, trained_params(t), s->lr, s->beta1, s->beta2, 1e-8,
                                     s->weight_decay, &zo);
        if (!t->zero || awl_zero_take_state(t->zero, t->opt) < 0) return fail("--zero");
        awl_optimizer_free(t->opt); /* ZeRO's shard optimizer replaces it */
        t->opt = NULL;
    } else if (t->dp_world > 1) {
        t->ddp = awl_ddp_new(t->dp, trained_params(t), NULL);
        if (!t->ddp) return fail("data-parallel training");
    }
    return 0;
}

static int build_model(trainer *t)
{
    settings *s = &t->s;
    t->cfg.vocab = awl_tokenizer_vocab_size(t->tok);
    t->model = awl_gpt_new(&t->cfg, s->device, (uint64_t)s->seed);
    if (!t->model) return fail("building the model");
    if (s->checkpoint_activations) awl_gpt_set_checkpointing(t->model, true);
    if (strcmp(s->precision, "bf16") == 0 && awl_gpt_set_autocast(t->model, AWL_BF16) < 0)
        return fail("--precision bf16");
    t->opt = awl_adamw_new(awl_gpt_parameters(t->model), s->lr, s->beta1, s->beta2, 1e-8,
                           s->weight_decay);
    if (!t->opt) return fail("the optimizer");
    /* bf16: AdamW writes the weights' bfloat16 copies, which the forward reads */
    if (strcmp(s->precision, "bf16") == 0 && awl_optimizer_keep_casts(t->opt, AWL_BF16) < 0)
        return fail("--precision bf16");
    /* the ranks of a tensor-parallel group share their streams */
    awl_manual_seed(rank_seed((uint64_t)s->seed, t->dp_rank));
    if (t->data) awl_text_dataset_seed(t->data, rank_seed((uint64_t)s->seed, t->dp_rank));
    int status = s->resume ? resume_tensors(t) : s->init_from ? init_from_weights(t) : 0;
    if (status == 0 && t->pg) status = go_parallel(t);
    /* the rate the optimizer last stepped with, as a run that trained here
     * would leave it (the checkpoint records it) */
    if (status == 0 && t->state.step > 0) set_lr(t, awl_lr_at(&t->schedule, t->state.step - 1));
    return status;
}

static int open_log(trainer *t)
{
    const settings *s = &t->s;
    if (!s->log || !s->log[0] || !is_leader(t)) return 0;
    bool append = s->resume && access(s->log, F_OK) == 0;
    t->log = fopen(s->log, append ? "a" : "w");
    if (!t->log) return complain("--log %s: cannot write it: %s", s->log, strerror(errno));
    if (!append)
        fprintf(t->log, "step,train_loss,val_loss,lr,tokens_per_sec,mfu,elapsed_s,param_bytes,"
                        "grad_bytes,optimizer_bytes,peak_bytes,mem_temporaries,mem_parameters,"
                        "mem_gradients,mem_optimizer,mem_activations,mem_cached_free,mem_peak\n");
    return 0;
}

/* ---- the sample ------------------------------------------------------------------- */

static int print_sample(trainer *t)
{
    const settings *s = &t->s;
    if (s->sample_tokens > 0 && gather_model(t) < 0) return fail("gathering the model to sample");
    if (s->sample_tokens == 0 || !is_leader(t)) return 0;
    int32_t *prompt = NULL, *out = NULL;
    size_t n_prompt = 0;
    char *text = NULL;
    size_t len = 0;
    int status = awl_tokenizer_encode(t->tok, s->prompt, strlen(s->prompt), &prompt, &n_prompt);
    if (status == 0) {
        out = malloc((n_prompt + (size_t)s->sample_tokens) * sizeof *out);
        int vocab = awl_tokenizer_vocab_size(t->tok), n = 0, n_in = (int)n_prompt;
        awl_generate_options o = awl_generate_defaults(); /* with the key/value cache */
        o.max_new_tokens = s->sample_tokens;
        o.temperature = s->temperature;
        o.top_k = s->top_k < vocab ? s->top_k : vocab; /* as nanoGPT: min(top_k, vocab) */
        o.seed = (uint64_t)s->seed;
        status = out ? awl_gpt_generate(t->model, 1, (const int32_t *const *)&prompt, &n_in, &o,
                                        &out, &n)
                     : -1;
        if (status == 0) status = awl_tokenizer_decode(t->tok, out, (size_t)n, &text, &len);
    }
    if (status == 0)
        printf("---- sample (temperature %.2f, top-k %d) ----\n%.*s\n----\n", s->temperature,
               s->top_k, (int)len, text);
    else
        fail("sampling");
    free(text);
    free(out);
    free(prompt);
    return status < 0 ? -1 : 0;
}

/* ---- the run ----------------------------------------------------------------------- */

/* Under a launcher, --device cuda is this rank's GPU: cuda:<LOCAL_RANK>
 * (as torchrun users call torch.cuda.set_device(local_rank)). */
static int rank_device(trainer *t)
{
    settings *s = &t->s;
    awl_dist_launch launch;
    if (strcmp(s->device, "cuda") != 0 || awl_dist_launch_info(NULL, &launch) < 0 ||
        strcmp(launch.launcher, "none") == 0)
        return 0;
    snprintf(t->device, sizeof t->device, "cuda:%d", launch.local_rank);
    s->device = t->device;
    return 0;
}

/* Joins the job a launcher started (awlrun, torchrun, mpirun or srun: its
 * variables set), or stays alone. The transport: --dist-backend, or for
 * auto NCCL between GPUs (a build with it), else the launcher's default. */
static int join_job(trainer *t)
{
    const settings *s = &t->s;
    t->rank = t->dp_rank = 0;
    t->world = t->dp_world = 1;
    awl_dist_options options = awl_dist_default_options();
    bool gpu = strncmp(s->device, "cuda", 4) == 0;
    if (strcmp(s->dist_backend, "auto") != 0)
        options.backend = s->dist_backend;
    else if (gpu && AWL_HAS_NCCL && !getenv("AWL_DIST_BACKEND"))
        options.backend = "nccl";
    if (gpu) options.device = s->device;
    awl_dist_launch launch;
    if (awl_dist_launch_info(&options, &launch) < 0) return fail("reading the launcher's variables");
    if (strcmp(launch.launcher, "none") == 0) {
        if (s->tensor_parallel > 1 || s->zero)
            return complain("--%s needs several ranks: start the run with awlrun -n N",
                            s->zero ? "zero" : "tensor-parallel");
        return 0;
    }
    t->pg = awl_dist_init(&options);
    if (!t->pg) return fail("joining the data-parallel job");
    t->rank = awl_dist_rank(t->pg);
    t->world = awl_dist_world_size(t->pg);
    int n = s->tensor_parallel;
    if (t->world % n != 0)
        return complain("--tensor-parallel %d does not divide the %d ranks", n, t->world);
    t->dp = t->pg;
    if (n > 1) { /* groups of n consecutive ranks share a batch */
        t->tp = awl_dist_split(t->pg, t->rank / n, t->rank);
        t->dp = awl_dist_split(t->pg, t->rank % n, t->rank);
        if (!t->tp || !t->dp) return fail("making the tensor- and data-parallel groups");
    }
    t->dp_rank = awl_dist_rank(t->dp);
    t->dp_world = awl_dist_world_size(t->dp);
    if (!is_leader(t) && !freopen("/dev/null", "w", stdout))
        return complain("rank %d: cannot silence its standard output", t->rank);
    return 0;
}

/* --threads, else OMP_NUM_THREADS (awlrun shares the cores out), else
 * every core. */
static int thread_count(const settings *s)
{
    if (option_given(s, "threads")) return s->threads;
    const char *env = getenv("OMP_NUM_THREADS");
    int n = env ? atoi(env) : 0;
    return n > 0 ? n : (int)sysconf(_SC_NPROCESSORS_ONLN);
}

/* 0, 1 after a failure, or 128 + the signal that stopped it. */
static int run(trainer *t)
{
    settings *s = &t->s;
    awl_set_num_threads(thread_count(s));
    if (rank_device(t) < 0 || check_device(s) < 0 || join_job(t) < 0) return 1;
    if (is_leader(t) && s->save && check_writable("save", s->save) < 0) return 1;
    if (is_leader(t) && s->log && s->log[0] && check_writable("log", s->log) < 0) return 1;
    if (is_leader(t) && s->profile && check_writable("profile", s->profile) < 0) return 1;
    if (s->resume) {
        if (resume_settings(t) < 0) return 1;
    } else if (configure(t) < 0 || (s->init_from && init_from_settings(t) < 0)) {
        return 1;
    }
    bool trains = t->state.step < s->steps;
    if (s->resume && !trains && s->steps > 0)
        printf("the checkpoint is at step %lld, --steps %lld: nothing to train\n",
               (long long)t->state.step, (long long)s->steps);
    resolve_defaults(t);
    if (prepare_data(t, trains) < 0 || check_prompt(t) < 0 || build_model(t) < 0 || open_log(t) < 0)
        return 1;
    if (s->resume) printf("resumed from %s at step %lld\n", s->resume, (long long)t->state.step);
    if (trains) {
        catch_signals();
        int status = train(t);
        if (status < 0) return 1;
        if (status > 0) {
            if (s->save && save_checkpoint(t, s->save) < 0) return 1;
            if (s->save) printf("saved %s at step %lld\n", s->save, (long long)t->state.step);
            return 128 + status;
        }
    }
    if (s->save && save_checkpoint(t, s->save) < 0) return 1;
    if (s->save) printf("saved %s at step %lld\n", s->save, (long long)t->state.step);
    if (stop_signal) return 128 + stop_signal;
    return print_sample(t) < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    trainer t = {0};
    t.s = default_settings();
    int parsed = parse_args(argc, argv, &t.s);
    if (parsed > 0) print_help(argv[0]);
    if (parsed != 0) return parsed > 0 ? 0 : 2;
    if (check_settings(&t.s) < 0 || parse_profile_steps(&t.s) < 0) return 2;
    int status = run(&t);
    if (t.log) fclose(t.log);
    awl_ddp_free(t.ddp);
    awl_zero_free(t.zero);
    awl_tp_gpt_free(t.tp_model);
    if (t.dp != t.pg) awl_dist_destroy(t.dp);
    awl_dist_destroy(t.tp);
    awl_dist_destroy(t.pg);
    awl_safetensors_close(t.init_file);
    awl_optimizer_free(t.opt);
    awl_gpt_free(t.model);
    awl_text_dataset_free(t.data);
    awl_tokenizer_free(t.tok);
    awl_train_state_clear(&t.resumed);
    return status;
}
