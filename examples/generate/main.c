/*
 * examples/generate - continue text with a trained GPT, printing tokens as
 * they come, then the prompt's and the decoding's tokens/s.
 *
 *     ./build/generate --checkpoint ckpt.safetensors --prompt "ROMEO:" --max-new-tokens 300
 *     ./build/generate --checkpoint ckpt.safetensors --prompt "A" --prompt "B" --top-p 0.9
 *     ./build/generate --init-from gpt2.safetensors --prompt-ids 464,2068 --device cuda
 *     ./build/generate --config shakespeare-char --prompt-ids 1,2,3 --no-cache
 *     ./build/generate --help
 *
 * The model comes from one of three places: --checkpoint, a checkpoint
 * train_gpt --save wrote (weights, configuration and tokenizer);
 * --init-from, weights with nanoGPT's names (PyTorch's state_dict saved with
 * safetensors, or an awl checkpoint), as train_gpt's --init-from reads
 * them; or --config, a named configuration with random weights (for
 * measuring speed). Prompts are text (--prompt, repeatable: several make a
 * batch, which needs a tokenizer) or token ids (--prompt-ids).
 *
 * Generation is awl_gpt_generate (nn/generate.h): with the key/value
 * cache, the prompts run once (the prefill) and then one token per row a
 * step; --no-cache runs the whole context for every token instead. One
 * prompt's tokens are printed as each is produced; a batch's rows are
 * printed when all are done. The last line, on stderr, gives the prompt's
 * tokens/s (the prefill, up to the first new token) and the decoding's
 * (every later token).
 *
 * Every option is checked before the model is loaded, by the option parser
 * train_gpt uses too (examples/common/options.h): a usage error exits with
 * status 2 after one line that names the option and what it allows; any
 * other failure exits with 1.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/options.h"
#include "awl.h"

enum { MAX_PROMPTS = 64, USAGE = 2, FAILURE = 1 };

typedef struct settings {
    const char *checkpoint, *init_from, *config, *device, *precision, *prompt_ids, *stop;
    const char *prompts[MAX_PROMPTS];
    int n_prompts;
    int max_new_tokens, top_k, n_head, threads, stop_id;
    double temperature, top_p;
    int64_t seed;
    bool no_cache;
    uint64_t given; /* bit i: options[i] was on the command line */
} settings;

/* ---- the options ------------------------------------------------------------------ */

/* Prints "generate: <formatted message>" and returns -1. */
#define complain(...) options_complain("generate", __VA_ARGS__)

#define FIELD(f) offsetof(settings, f)
#define COUNT(lo, hi) .ilo = (lo), .ihi = (hi)

static int add_prompt(void *settings_, const char *text);

static const option_spec options[] = {
    {"checkpoint", "PATH", "a checkpoint of train_gpt --save (weights, configuration, tokenizer)",
     OPT_STRING, FIELD(checkpoint), .ilo = 0},
    {"init-from", "PATH",
     "weights with nanoGPT's names (safetensors from PyTorch, or an awl checkpoint)", OPT_STRING,
     FIELD(init_from), .ilo = 0},
    {"config", "NAME", "a named configuration with random weights (for measuring speed)",
     OPT_CHOICE, FIELD(config), .choices = "cpu-small|cpu-medium|shakespeare-char|gpt2-124m"},
    {"n-head", "N", "--init-from: the number of heads, when the file does not record it", OPT_INT,
     FIELD(n_head), COUNT(1, 1024)},
    {"prompt", "TEXT", "text to continue, in the tokenizer's vocabulary; repeat for a batch",
     OPT_STRING, FIELD(prompts), .store = add_prompt},
    {"prompt-ids", "LIST", "a prompt as comma-separated token ids (a model without tokenizer)",
     OPT_STRING, FIELD(prompt_ids), .ilo = 0},
    {"max-new-tokens", "N", "tokens to add to each prompt (default 200)", OPT_INT,
     FIELD(max_new_tokens), COUNT(1, 1 << 20)},
    {"temperature", "X", "sampling temperature (default 0.8; 0: always the most likely token)",
     OPT_DOUBLE, FIELD(temperature), .dlo = 0, .dhi = 100},
    {"top-k", "N", "sample among the k most likely tokens (default 200; 0: all)", OPT_INT,
     FIELD(top_k), COUNT(0, 2147483647)},
    {"top-p", "X",
     "sample among the fewest most likely tokens whose probability reaches X "
     "(default 1: all)",
     OPT_DOUBLE, FIELD(top_p), .dlo = 0, .dhi = 1, .dlo_open = true},
    {"stop", "TEXT", "end a row after it produces this text, which must be one token", OPT_STRING,
     FIELD(stop), .ilo = 0},
    {"stop-id", "N", "end a row after it produces this token id (default -1: none)", OPT_INT,
     FIELD(stop_id), COUNT(-1, 2147483647)},
    {"seed", "N", "seed of the sampling (default 1337)", OPT_INT64, FIELD(seed),
     COUNT(0, 9223372036854775807LL)},
    {"device", "DEV", "cpu (default), cuda or cuda:N", OPT_STRING, FIELD(device), .ilo = 0},
    {"precision", "P", "fp32 (default), tf32 or bf16 (CUDA only)", OPT_CHOICE, FIELD(precision),
     .choices = "fp32|tf32|bf16"},
    {"threads", "N", "CPU threads (default: OMP_NUM_THREADS, else all cores)", OPT_INT,
     FIELD(threads), COUNT(1, 4096)},
    {"no-cache", NULL, "run the whole context for every token (no key/value cache)", OPT_FLAG,
     FIELD(no_cache), .ilo = 0},
};
static const option_table table = {"generate", options, (int)(sizeof options / sizeof *options),
                                   24};
_Static_assert(sizeof options / sizeof *options <= 64, "settings.given has 64 bits");

static bool option_given(const settings *s, const char *name)
{
    return options_given(&table, s->given, name);
}

/* --prompt's value, repeatable: one row of the batch each. */
static int add_prompt(void *settings_, const char *text)
{
    settings *s = settings_;
    if (s->n_prompts == MAX_PROMPTS) return complain("--prompt: at most %d prompts", MAX_PROMPTS);
    s->prompts[s->n_prompts++] = text;
    return 0;
}

static void print_help(void)
{
    printf("usage: generate (--checkpoint PATH | --init-from PATH | --config NAME) [options]\n\n"
           "Continues prompts with a GPT, printing tokens as they come, then tokens/s.\n\n");
    options_print_help(&table);
    printf("\nExit status: 0 done, 1 failure, 2 usage error.\n");
}

/* What no single option can tell. 0 or -1. */
static int check_settings(const settings *s)
{
    int sources = (s->checkpoint != NULL) + (s->init_from != NULL) + (s->config != NULL);
    if (sources != 1)
        return complain("give exactly one of --checkpoint PATH, --init-from PATH and --config "
                        "NAME (%d given): where the model comes from",
                        sources);
    const char *paths[2] = {s->checkpoint, s->init_from}, *names[2] = {"checkpoint", "init-from"};
    for (int i = 0; i < 2; i++)
        if (paths[i] && !paths[i][0]) return complain("--%s: the path is empty", names[i]);
    if (option_given(s, "n-head") && !s->init_from)
        return complain("--n-head is for --init-from, whose file may not record the heads (a "
                        "checkpoint and a configuration do)");
    if ((s->n_prompts > 0) == (s->prompt_ids != NULL))
        return complain("give --prompt TEXT (one or more) or --prompt-ids LIST, not %s",
                        s->n_prompts ? "both" : "neither");
    for (int i = 0; i < s->n_prompts; i++)
        if (!s->prompts[i][0])
            return complain("--prompt %d is empty: a prompt needs at least one token", i + 1);
    if (s->stop && s->stop_id != -1)
        return complain("--stop and --stop-id %d exclude each other (one stop token)", s->stop_id);
    if (s->stop && !s->stop[0]) return complain("--stop is empty: it must be one token");
    if (strcmp(s->precision, "bf16") == 0 && strncmp(s->device, "cuda", 4) != 0)
        return complain("--precision bf16 needs --device cuda: the CPU backend has no bfloat16 "
                        "matmul");
    return 0;
}

/* The device exists and has what a forward needs. 0 or -1. */
static int check_device(const char *name)
{
    awl_device device;
    if (awl_device_parse(name, &device) < 0) {
        fprintf(stderr, "generate: --device: %s\n", awl_last_error());
        return -1;
    }
    if (!awl_device_available(name))
        return complain("--device %s: no such device on this machine", name);
    char missing[1024];
    int n_missing = awl_device_missing_primitives(name, missing, sizeof missing);
    if (n_missing > 0)
        return complain("device %s cannot run a model yet: %d required primitive%s not "
                        "implemented:\n%s",
                        name, n_missing, n_missing == 1 ? " is" : "s are", missing);
    return 0;
}

/* ---- the model and the prompts -------------------------------------------------------- */

typedef struct job {
    settings s;
    awl_gpt_config cfg;
    awl_gpt *model;
    awl_tokenizer *tok; /* NULL: prompts and output as ids */
    int32_t *prompt[MAX_PROMPTS];
    int n_prompt[MAX_PROMPTS], batch;
} job;

static int fail(const char *what)
{
    fprintf(stderr, "generate: %s: %s\n", what, awl_last_error());
    return -1;
}

/* The configuration, the tokenizer and the weights of --checkpoint or
 * --init-from. */
static int load_model(job *j)
{
    const char *opt = j->s.checkpoint ? "--checkpoint" : "--init-from";
    const char *path = j->s.checkpoint ? j->s.checkpoint : j->s.init_from;
    awl_safetensors *f = awl_safetensors_open(path);
    if (!f) return fail(opt);
    awl_train_state st = {0};
    const char *tokenizer = NULL;
    int status = 0;
    if (awl_safetensors_metadata_get(f, "awl.format")) {
        status = awl_checkpoint_read_state(f, &st) < 0 ? fail(opt) : 0;
        tokenizer = st.tokenizer;
    } else {
        tokenizer = awl_safetensors_metadata_get(f, "tokenizer");
    }
    if (status == 0 && j->s.checkpoint && (!st.config_json || !tokenizer))
        status = complain("--checkpoint %s: the file has no %s: --init-from reads weights alone "
                          "(prompts then are --prompt-ids)",
                          path, st.config_json ? "tokenizer" : "model configuration");
    if (status == 0) {
        awl_gpt_config_named("gpt2-124m", &j->cfg); /* the heads, when the file cannot say */
        if (option_given(&j->s, "n-head")) j->cfg.n_head = j->s.n_head;
        status = awl_gpt_config_from_weights(f, &j->cfg) < 0 ? fail(opt) : 0;
    }
    if (status == 0 && !awl_safetensors_metadata_get(f, "config") && !option_given(&j->s, "n-head"))
        fprintf(stderr,
                "generate: note: %s does not record the number of heads (shapes cannot tell): "
                "using %d, GPT-2's; give --n-head if the model had another\n",
                path, j->cfg.n_head);
    if (status == 0 && tokenizer) {
        j->tok = awl_tokenizer_deserialize(tokenizer, strlen(tokenizer));
        if (!j->tok) status = fail(opt);
    }
    if (status == 0 && j->tok && awl_tokenizer_vocab_size(j->tok) > j->cfg.vocab)
        status = complain("%s %s: the tokenizer has %d tokens but the model %d", opt, path,
                          awl_tokenizer_vocab_size(j->tok), j->cfg.vocab);
    j->cfg.dropout = 0.0;
    if (status == 0) {
        j->model = awl_gpt_new(&j->cfg, j->s.device, 0);
        if (!j->model || awl_gpt_load_weights(j->model, f) < 0) status = fail(opt);
    }
    awl_train_state_clear(&st);
    awl_safetensors_close(f);
    return status;
}

/* --prompt-ids "1,2,3" into j->prompt[0]. */
static int parse_ids(job *j)
{
    const char *text = j->s.prompt_ids;
    size_t n = 1;
    for (const char *c = text; *c; c++) n += *c == ',';
    j->prompt[0] = malloc(n * sizeof *j->prompt[0]);
    j->n_prompt[0] = 0;
    j->batch = 1;
    for (const char *c = text;; c++) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(c, &end, 10);
        if (end == c || (*end && *end != ',') || errno == ERANGE || v < 0 || v >= j->cfg.vocab)
            return complain("--prompt-ids '%s': expected comma-separated token ids in [0, %d) "
                            "(the model's vocabulary)",
                            text, j->cfg.vocab);
        j->prompt[0][j->n_prompt[0]++] = (int32_t)v;
        c = end;
        if (!*c) return 0;
    }
}

/* The prompts as ids, and the stop token. */
static int prepare_prompts(job *j, int *stop_id)
{
    *stop_id = j->s.stop_id;
    if ((j->s.n_prompts || j->s.stop) && !j->tok)
        return complain("--%s needs a tokenizer, and the model has none: give --prompt-ids and "
                        "--stop-id",
                        j->s.n_prompts ? "prompt" : "stop");
    if (*stop_id >= j->cfg.vocab)
        return complain("--stop-id %d is outside the model's vocabulary [0, %d)", *stop_id,
                        j->cfg.vocab);
    if (j->s.stop) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (awl_tokenizer_encode(j->tok, j->s.stop, strlen(j->s.stop), &ids, &n) < 0)
            return fail("--stop");
        *stop_id = n == 1 ? ids[0] : -1;
        free(ids);
        if (n != 1)
            return complain("--stop '%s' is %zu tokens for this tokenizer: it must be one",
                            j->s.stop, n);
    }
    if (j->s.prompt_ids) return parse_ids(j);
    j->batch = j->s.n_prompts;
    for (int b = 0; b < j->batch; b++) {
        size_t n = 0;
        if (awl_tokenizer_encode(j->tok, j->s.prompts[b], strlen(j->s.prompts[b]), &j->prompt[b],
                                 &n) < 0) {
            char what[64];
            snprintf(what, sizeof what, "--prompt %d", b + 1);
            return fail(what);
        }
        j->n_prompt[b] = (int)n;
    }
    return 0;
}

/* ---- generation ------------------------------------------------------------------------ */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints ids[0..n): text through the tokenizer, else ids with spaces. */
static void print_tokens(const job *j, const int32_t *ids, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    if (j->tok && awl_tokenizer_decode(j->tok, ids, n, &text, &len) == 0)
        fwrite(text, 1, len, stdout);
    else
        for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    free(text);
}

typedef struct progress {
    const job *j;
    double first, last; /* when the first and the latest new tokens were ready */
    int steps;
} progress;

/* The step callback: marks the time and prints one prompt's new token. */
static int on_step(void *user, const int32_t *tokens, int batch)
{
    progress *p = user;
    p->last = now();
    if (p->steps++ == 0) p->first = p->last;
    if (batch == 1 && tokens[0] >= 0) {
        print_tokens(p->j, tokens, 1);
        fflush(stdout);
    }
    return 0;
}

static int generate(job *j, int stop_id)
{
    awl_generate_options o = awl_generate_defaults();
    o.max_new_tokens = j->s.max_new_tokens;
    o.temperature = j->s.temperature;
    o.top_k = j->s.top_k;
    o.top_p = j->s.top_p;
    o.stop_token = stop_id;
    o.seed = (uint64_t)j->s.seed;
    o.use_cache = !j->s.no_cache;
    progress p = {.j = j};
    o.on_step = on_step;
    o.user = &p;
    int32_t *out[MAX_PROMPTS];
    int n_out[MAX_PROMPTS], prompt_tokens = 0;
    for (int b = 0; b < j->batch; b++) {
        out[b] = malloc((size_t)(j->n_prompt[b] + o.max_new_tokens) * sizeof *out[b]);
        prompt_tokens += j->n_prompt[b];
    }
    if (j->batch == 1) print_tokens(j, j->prompt[0], (size_t)j->n_prompt[0]);
    fflush(stdout);
    double start = now();
    int status = awl_gpt_generate(j->model, j->batch, (const int32_t *const *)j->prompt,
                                  j->n_prompt, &o, out, n_out);
    if (status < 0) fail("generating");
    int new_tokens = 0;
    for (int b = 0; b < j->batch && status == 0; b++) {
        new_tokens += n_out[b] - j->n_prompt[b];
        if (j->batch > 1) {
            printf("---- prompt %d ----\n", b + 1);
            print_tokens(j, out[b], (size_t)n_out[b]);
        }
        printf("\n");
    }
    fflush(stdout); /* the text before the figures, when both go to one file */
    if (status == 0) {
        /* the first step's tokens come from the prefill; the rest are decoding's */
        int decoded = new_tokens - j->batch;
        double prefill = p.first - start, decode = p.last - p.first;
        fprintf(stderr,
                "generate: prompt %d tokens in %.3f s (%.1f tokens/s); decode %d tokens in "
                "%.3f s (%.1f tokens/s); %s, %s\n",
                prompt_tokens, prefill, prompt_tokens / prefill, decoded, decode,
                decode > 0 ? decoded / decode : 0.0,
                o.use_cache ? "key/value cache" : "no cache (--no-cache)", j->s.device);
    }
    for (int b = 0; b < j->batch; b++) free(out[b]);
    return status;
}

int main(int argc, char **argv)
{
    job j = {.s = {.device = "cpu",
                   .precision = "fp32",
                   .max_new_tokens = 200,
                   .temperature = 0.8,
                   .top_k = 200,
                   .top_p = 1.0,
                   .stop_id = -1,
                   .seed = 1337}};
    int parsed = options_parse(&table, argc, argv, &j.s, &j.s.given);
    if (parsed == 1) {
        print_help();
        return 0;
    }
    if (parsed < 0 || check_settings(&j.s) < 0) return USAGE;
    if (check_device(j.s.device) < 0) return FAILURE;
    if (j.s.threads) awl_set_num_threads(j.s.threads);
    if (strcmp(j.s.precision, "fp32") != 0) awl_set_float32_matmul_precision("high");
    int status = 0;
    if (j.s.config) {
        awl_gpt_config_named(j.s.config, &j.cfg);
        j.cfg.dropout = 0.0;
        j.model = awl_gpt_new(&j.cfg, j.s.device, (uint64_t)j.s.seed);
        if (!j.model) status = fail("--config");
    } else {
        status = load_model(&j);
    }
    if (status == 0 && strcmp(j.s.precision, "bf16") == 0 &&
        awl_gpt_set_autocast(j.model, AWL_BF16) < 0)
        status = fail("--precision bf16");
    int stop_id = -1;
    bool usage = false;
    if (status == 0) {
        status = prepare_prompts(&j, &stop_id);
        usage = status < 0; /* prompts that do not fit the model are the user's to fix */
    }
    if (status == 0) status = generate(&j, stop_id);
    for (int b = 0; b < MAX_PROMPTS; b++) free(j.prompt[b]);
    awl_tokenizer_free(j.tok);
    awl_gpt_free(j.model);
    return status == 0 ? 0 : usage ? USAGE : FAILURE;
}
