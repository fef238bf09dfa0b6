/*
 * examples/train_gpt/checkpoint.c - saving a run, resuming it, and starting
 * one from another tool's weights.
 *
 * A checkpoint (nn/checkpoint_io.h) holds the tensors, the run state, the
 * tokenizer, the architecture as JSON ("config", which Python tools read)
 * and every SCOPE_RUN option as "extra.<option>": the schedule, the
 * optimizer's hyper-parameters, evaluation and the seed that sampling
 * uses. Resuming reads all of that before anything is built, so the run
 * continues with what it was started with; an option given again with the
 * same value is fine, with another value it is an error (a silently
 * different schedule or batch is not a resumed run). Values read back go
 * through the command line's parser, with its ranges.
 *
 * --init-from takes weights alone: the architecture from their shapes
 * (nn/gpt_io.c), the tokenizer from the file's metadata when it has one
 * (else one is built from --data), a fresh optimizer and step 0.
 */
#include <stdlib.h>
#include <string.h>

#include "train_gpt.h"

#define STEPS_MAX 2147483647LL

/* ---- the run state -------------------------------------------------------------- */

/* Reads the live generator and data stream into t->state. */
static void capture_state(trainer *t)
{
    awl_rng_get_state(&t->state.rng_seed, &t->state.rng_offset);
    if (!t->data) return;
    t->state.data_seed = awl_text_dataset_get_seed(t->data);
    t->state.data_position[0] = awl_text_dataset_get_position(t->data, AWL_SPLIT_TRAIN);
    t->state.data_position[1] = awl_text_dataset_get_position(t->data, AWL_SPLIT_VAL);
}

/* Sets the generator and data stream from t->state. */
static void restore_state(trainer *t)
{
    awl_rng_set_state(t->state.rng_seed, t->state.rng_offset);
    if (!t->data) return;
    awl_text_dataset_seed(t->data, t->state.data_seed);
    awl_text_dataset_set_position(t->data, AWL_SPLIT_TRAIN, t->state.data_position[0]);
    awl_text_dataset_set_position(t->data, AWL_SPLIT_VAL, t->state.data_position[1]);
}

/* ---- every rank's state ------------------------------------------------------------ */

enum { STATE_WORDS = 10 }; /* run_state's five 64-bit numbers, as int32 halves */

static void pack_state(const run_state *s, int32_t *w)
{
    uint64_t v[5] = {s->rng_seed, s->rng_offset, s->data_seed, s->data_position[0],
                     s->data_position[1]};
    for (int i = 0; i < 5; i++) {
        w[2 * i] = (int32_t)(uint32_t)(v[i] >> 32);
        w[2 * i + 1] = (int32_t)(uint32_t)v[i];
    }
}

static void unpack_state(const int32_t *w, run_state *s)
{
    uint64_t v[5];
    for (int i = 0; i < 5; i++) v[i] = (uint64_t)(uint32_t)w[2 * i] << 32 | (uint32_t)w[2 * i + 1];
    s->rng_seed = v[0];
    s->rng_offset = v[1];
    s->data_seed = v[2];
    s->data_position[0] = v[3];
    s->data_position[1] = v[4];
}

/* Records every rank's generator and data stream as "dist.rank.<r>" (on
 * rank 0; every rank takes part in gathering them). */
static int record_ranks(trainer *t, awl_train_state *st)
{
    int32_t mine[STATE_WORDS], *all = calloc((size_t)t->world * STATE_WORDS, sizeof *all);
    pack_state(&t->state, mine);
    awl_scope_begin();
    awl_tensor *out = awl_empty(AWL_SHAPE((int64_t)t->world * STATE_WORDS), AWL_I32, "cpu");
    int status = awl_dist_allgather(t->pg, out, awl_from_data(mine, AWL_SHAPE(STATE_WORDS), AWL_I32, "cpu"));
    if (status == 0) status = awl_to_host(out, all, (size_t)t->world * STATE_WORDS * sizeof *all);
    awl_scope_end();
    char key[64], value[160];
    snprintf(value, sizeof value, "%d", t->world);
    awl_train_state_set_extra(st, "dist.world_size", value);
    for (int r = 0; r < t->world && status == 0; r++) {
        run_state s;
        unpack_state(all + r * STATE_WORDS, &s);
        snprintf(key, sizeof key, "dist.rank.%d", r);
        snprintf(value, sizeof value, "%llu %llu %llu %llu %llu", (unsigned long long)s.rng_seed,
                 (unsigned long long)s.rng_offset, (unsigned long long)s.data_seed,
                 (unsigned long long)s.data_position[0], (unsigned long long)s.data_position[1]);
        awl_train_state_set_extra(st, key, value);
    }
    free(all);
    return status;
}

/* This rank's state from a checkpoint of a run with as many ranks; 1 when
 * the checkpoint's run had another number of ranks (the streams then
 * start afresh), -1 on a malformed entry. */
static int recall_rank(trainer *t, const awl_train_state *st)
{
    const char *world = awl_train_state_get_extra(st, "dist.world_size");
    int saved = world ? atoi(world) : 1;
    if (saved != t->world) return 1;
    if (t->world == 1) return 0;
    char key[64];
    snprintf(key, sizeof key, "dist.rank.%d", t->rank);
    const char *v = awl_train_state_get_extra(st, key);
    unsigned long long n[5];
    if (!v || sscanf(v, "%llu %llu %llu %llu %llu", &n[0], &n[1], &n[2], &n[3], &n[4]) != 5)
        return complain("--resume %s: its %s is missing or malformed", t->s.resume, key);
    t->state.rng_seed = n[0];
    t->state.rng_offset = n[1];
    t->state.data_seed = n[2];
    t->state.data_position[0] = n[3];
    t->state.data_position[1] = n[4];
    return 0;
}

/* ---- saving --------------------------------------------------------------------- */

int save_checkpoint(trainer *t, const char *path)
{
    capture_state(t);
    awl_train_state st = {0};
    if (t->world > 1 && record_ranks(t, &st) < 0) {
        awl_train_state_clear(&st);
        return fail("gathering the ranks' state for the checkpoint");
    }
    /* the whole model's optimizer (gathered from the pieces when split);
     * ZeRO gathers its own shards as it saves */
    awl_optimizer *whole = t->zero ? NULL : whole_optimizer(t);
    if (!t->zero && !whole) {
        awl_train_state_clear(&st);
        return fail("gathering the model for the checkpoint");
    }
    st.step = t->state.step;
    st.rng_seed = t->state.rng_seed;
    st.rng_offset = t->state.rng_offset;
    st.data_seed = t->state.data_seed;
    st.data_position[0] = t->state.data_position[0];
    st.data_position[1] = t->state.data_position[1];
    char *tok_text = NULL, config[512], value[256];
    size_t tok_len;
    int status = awl_tokenizer_serialize(t->tok, &tok_text, &tok_len) < 0 ? fail("saving the tokenizer")
                 : awl_gpt_config_to_json(&t->cfg, config, sizeof config) < 0 ? fail("saving the config")
                                                                               : 0;
    if (status < 0) {
        free(tok_text);
        if (whole != t->opt) awl_optimizer_free(whole);
        awl_train_state_clear(&st);
        return -1;
    }
    awl_train_state_set_tokenizer(&st, tok_text);
    free(tok_text);
    awl_train_state_set_config(&st, config);
    for (int i = 0; i < n_train_options; i++) {
        const option_spec *o = &train_options[i];
        if (o->scope != SCOPE_RUN) continue;
        /* a run that has not trained (--init-from ... --steps 0 --save) has
         * no length yet: the run that resumes it decides */
        if (strcmp(o->name, "decay-steps") == 0 && t->s.steps == 0 &&
            !option_set(&t->s, "decay-steps"))
            continue;
        format_option(o, &t->s, value, sizeof value);
        awl_train_state_set_extra(&st, o->name, value);
    }
    /* rank 0 writes (ZeRO's save is collective and writes there too) */
    status = t->zero       ? awl_zero_save(t->zero, path, &st)
                 : is_leader(t) ? awl_checkpoint_save(path, awl_gpt_parameters(t->model), whole, &st)
                                : 0;
    if (whole != t->opt) awl_optimizer_free(whole);
    awl_train_state_clear(&st);
    if (status < 0) {
        char what[4200];
        snprintf(what, sizeof what, "saving %s (nothing written there)", path);
        return fail(what);
    }
    return 0;
}

/* ---- --resume ------------------------------------------------------------------- */

/* The SCOPE_RUN options the checkpoint records, into t->s. */
static int resume_options(trainer *t, const char *source)
{
    settings from_file = t->s;
    for (int i = 0; i < n_train_options; i++) {
        const option_spec *o = &train_options[i];
        const char *value = awl_train_state_get_extra(&t->resumed, o->name);
        if (o->scope != SCOPE_RUN || !value) continue;
        if (parse_option_value(o, value, &from_file, source) < 0) return -1;
        from_file.from_checkpoint |= 1ull << i;
        if ((t->s.given >> i & 1) && !option_equal(o, &t->s, &from_file)) {
            char given[256];
            format_option(o, &t->s, given, sizeof given);
            return complain("--%s %s contradicts %s, which was trained with --%s %s: a resumed "
                            "run keeps the options it was started with (--init-from starts a new "
                            "run from its weights)",
                            o->name, given, t->s.resume, o->name, value);
        }
    }
    t->s = from_file;
    return 0;
}

/* An architecture option given on the command line that differs from cfg
 * is an error; `what` names where cfg came from. */
static int check_architecture(const settings *s, const awl_gpt_config *cfg, const char *what,
                              bool with_training_fields)
{
    const struct {
        const char *name;
        double have, want;
        bool training; /* batch and dropout: the run's, not the weights' */
    } fields[] = {
        {"n-layer", s->n_layer, cfg->n_layer, false}, {"n-head", s->n_head, cfg->n_head, false},
        {"n-embd", s->n_embd, cfg->n_embd, false},    {"block", s->block, cfg->block, false},
        {"batch", s->batch, cfg->batch, true},        {"dropout", s->dropout, cfg->dropout, true},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        if (fields[i].training && !with_training_fields) continue;
        if (option_given(s, fields[i].name) && fields[i].have != fields[i].want)
            return complain("--%s %g contradicts %s, whose model has %s %g", fields[i].name,
                            fields[i].have, what, fields[i].name, fields[i].want);
    }
    return 0;
}

/* The tokenizer a file records; a given --tokenizer must be its kind. */
static int adopt_tokenizer(trainer *t, const char *text, const char *what)
{
    t->tok = awl_tokenizer_deserialize(text, strlen(text));
    if (!t->tok) {
        char where[4200];
        snprintf(where, sizeof where, "%s: its tokenizer", what);
        return fail(where);
    }
    if (option_given(&t->s, "tokenizer") && strcmp(awl_tokenizer_kind(t->tok), t->s.tokenizer) != 0)
        return complain("--tokenizer %s contradicts %s, whose tokenizer is %s", t->s.tokenizer,
                        what, awl_tokenizer_kind(t->tok));
    t->s.tokenizer = awl_tokenizer_kind(t->tok);
    return 0;
}

int resume_settings(trainer *t)
{
    const char *path = t->s.resume;
    awl_safetensors *f = awl_safetensors_open(path);
    if (!f) return fail("--resume");
    int status = awl_checkpoint_read_state(f, &t->resumed);
    awl_safetensors_close(f);
    if (status < 0) return fail("--resume");
    char source[4200], what[4200];
    snprintf(source, sizeof source, "--resume %s (the checkpoint's value)", path);
    snprintf(what, sizeof what, "the checkpoint %s", path);
    if (t->resumed.step < 0 || t->resumed.step > STEPS_MAX)
        return complain("--resume %s: the checkpoint's step %lld is outside [0, %lld]", path,
                        (long long)t->resumed.step, STEPS_MAX);
    if (!t->resumed.config_json || !t->resumed.tokenizer)
        return complain("--resume %s: the checkpoint has no %s: it holds weights, not a run "
                        "(--init-from starts a new run from them)",
                        path, t->resumed.config_json ? "tokenizer" : "model configuration");
    if (resume_options(t, source) < 0) return -1;
    if (awl_gpt_config_from_json(t->resumed.config_json, &t->cfg) < 0) return fail("--resume");
    if (check_architecture(&t->s, &t->cfg, what, true) < 0) return -1;
    if (adopt_tokenizer(t, t->resumed.tokenizer, what) < 0) return -1;
    if (awl_tokenizer_vocab_size(t->tok) != t->cfg.vocab)
        return complain("--resume %s: the tokenizer has %d tokens but the model %d", path,
                        awl_tokenizer_vocab_size(t->tok), t->cfg.vocab);
    t->state.step = t->resumed.step;
    return 0;
}

int resume_tensors(trainer *t)
{
    awl_train_state st = {0};
    if (awl_checkpoint_load(t->s.resume, awl_gpt_parameters(t->model), t->opt, &st) < 0)
        return fail("--resume");
    t->state = (run_state){.step = st.step,
                           .rng_seed = st.rng_seed,
                           .rng_offset = st.rng_offset,
                           .data_seed = st.data_seed,
                           .data_position = {st.data_position[0], st.data_position[1]}};
    int other = recall_rank(t, &st);
    awl_train_state_clear(&st);
    if (other < 0) return -1;
    if (other > 0) {
        /* rank 0 continues the checkpoint's streams; the others start afresh */
        if (t->rank > 0) return 0;
        printf("note: %s was written by a run of another number of ranks: the other ranks' "
               "batches and dropout start afresh (the run is not a bitwise continuation)\n",
               t->s.resume);
    }
    restore_state(t);
    return 0;
}

/* ---- --init-from ---------------------------------------------------------------- */

int init_from_settings(trainer *t)
{
    const char *path = t->s.init_from;
    char what[4200];
    snprintf(what, sizeof what, "the weights %s", path);
    t->init_file = awl_safetensors_open(path);
    if (!t->init_file) return fail("--init-from");
    const char *tokenizer = NULL;
    awl_train_state st = {0};
    if (awl_safetensors_metadata_get(t->init_file, "awl.format")) {
        /* an awl checkpoint: its metadata is checked before it is used */
        if (awl_checkpoint_read_state(t->init_file, &st) < 0) return fail("--init-from");
        tokenizer = st.tokenizer;
    } else {
        tokenizer = awl_safetensors_metadata_get(t->init_file, "tokenizer");
    }
    int status = awl_gpt_config_from_weights(t->init_file, &t->cfg) < 0 ? fail("--init-from") : 0;
    if (status == 0 && !awl_safetensors_metadata_get(t->init_file, "config") &&
        !option_given(&t->s, "n-head"))
        printf("note: %s does not record the number of heads (shapes cannot tell): using %d, "
               "--config %s's; give --n-head if the model had another\n",
               path, t->cfg.n_head, t->s.config);
    if (status == 0) status = check_architecture(&t->s, &t->cfg, what, false);
    if (status == 0 && tokenizer) status = adopt_tokenizer(t, tokenizer, what);
    awl_train_state_clear(&st);
    return status;
}

int init_from_weights(trainer *t)
{
    int status = awl_gpt_load_weights(t->model, t->init_file) < 0 ? fail("--init-from") : 0;
    awl_safetensors_close(t->init_file);
    t->init_file = NULL;
    return status;
}
