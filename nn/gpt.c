/*
 * nn/gpt.c - the GPT model (see gpt.h).
 *
 * The module tree mirrors nanoGPT's so that parameter names match it:
 *
 *     GPT
 *     └── transformer (ModuleDict)
 *         ├── wte (Embedding), wpe (Embedding)
 *         ├── h (ModuleList) ── 0, 1, ... (Block)
 *         └── ln_f (LayerNorm)
 *
 * The head is not a module: logits = ln_f(x) @ wte^T through awl_linear,
 * which reads the embedding through a transposed view. That is the weight
 * tying, and it is why the head's weight is listed once.
 *
 * A shortcut on the hot path: position embeddings are a slice of wpe's
 * first T rows (positions are 0..T-1, so no index tensor and no gather).
 * Generation (nn/generate.c) runs the same layers through
 * nn/gpt_internal.h, with positions of its own and a key/value cache.
 *
 * Mixed precision: the model keeps an autocast dtype and sets the thread's
 * autocast state (nn/autocast.c) around each of its forwards, restoring the
 * caller's afterwards. A checkpointed block is recomputed during backward,
 * outside that window, so each block's segment records the autocast dtype
 * its forward ran under and re-establishes it when replayed (PyTorch's
 * checkpoint does the same): the recomputed graph then has the dtypes the
 * first one had.
 *
 * Initialisation draws from the Philox stream (seed, 0) and then restores the
 * global generator: building a model does not disturb the randomness of
 * whatever runs around it. The layers' own default initialisation runs
 * first (from the same stream) and is overwritten; that costs one extra
 * fill per parameter at build time and keeps the layers ignorant of GPT.
 */
#include "nn/gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "nn/functional_internal.h"
#include "nn/gpt_internal.h"
#include "tensor/profiler.h"

/* ---- configurations ------------------------------------------------------------------- */

static const struct {
    const char *name;
    awl_gpt_config cfg;
} named_configs[] = {
    {"cpu-small", {65, 64, 4, 4, 128, 16, 0.0, true}},
    {"cpu-medium", {65, 128, 6, 6, 192, 16, 0.0, true}},
    {"shakespeare-char", {65, 256, 6, 6, 384, 64, 0.2, true}},
    {"gpt2-124m", {50304, 1024, 12, 12, 768, 16, 0.0, true}},
};

int awl_gpt_config_named(const char *name, awl_gpt_config *out)
{
    int n = (int)(sizeof named_configs / sizeof named_configs[0]);
    for (int i = 0; name && out && i < n; i++) {
        if (strcmp(name, named_configs[i].name) == 0) {
            *out = named_configs[i].cfg;
            return AWL_OK;
        }
    }
    return awl_error(AWL_ERR_INVALID,
                     "awl_gpt_config_named: unknown configuration '%s' (known: "
                     "cpu-small, cpu-medium, shakespeare-char, gpt2-124m)",
                     name ? name : "(null)");
}

int64_t awl_gpt_config_num_params(const awl_gpt_config *cfg)
{
    int64_t C = cfg->n_embd, b = cfg->bias ? 1 : 0;
    /* ln_1, ln_2: 2C (+2C); c_attn 3C^2 (+3C); attn c_proj C^2 (+C); c_fc 4C^2
     * (+4C); mlp c_proj 4C^2 (+C) */
    int64_t per_layer = 12 * C * C + 2 * C + b * 11 * C;
    return (int64_t)cfg->vocab * C + (int64_t)cfg->block * C + cfg->n_layer * per_layer + C + b * C;
}

double awl_gpt_flops_per_token(const awl_gpt_config *cfg)
{
    return 6.0 * (double)awl_gpt_config_num_params(cfg) +
           12.0 * cfg->n_layer * (double)cfg->block * cfg->n_embd;
}

double awl_gpt_matmul_rate(const char *device, awl_dtype dtype)
{
    return awl_measure_matmul_rate(device, dtype);
}

/* ---- construction ------------------------------------------------------------------------ */

static int check_config(const awl_gpt_config *c)
{
    if (!c) return awl_error(AWL_ERR_INVALID, "awl_gpt_new: no configuration");
    if (c->vocab <= 0 || c->block <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_embd <= 0 ||
        c->n_embd % c->n_head != 0 || !(c->dropout >= 0.0 && c->dropout < 1.0))
        return awl_error(AWL_ERR_INVALID,
                         "awl_gpt_new: invalid configuration: vocab %d, block %d, "
                         "n_layer %d, n_head %d, n_embd %d, dropout %g (sizes "
                         "positive, n_embd a multiple of n_head, dropout in [0, 1))",
                         c->vocab, c->block, c->n_layer, c->n_head, c->n_embd, c->dropout);
    return AWL_OK;
}

static void gpt_destroy(awl_module *self)
{
    awl_gpt *g = (awl_gpt *)self;
    awl_param_list_clear(&g->params);
    free(g->blocks);
    free(g->segments);
}

static awl_tensor *gpt_module_forward(awl_module *self, awl_tensor *idx)
{
    return awl_gpt_forward((awl_gpt *)self, idx);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* nanoGPT's _init_weights plus its scaled residual projections. */
static int gpt_init(awl_gpt *g)
{
    double proj_std = 0.02 / sqrt(2.0 * g->cfg.n_layer);
    for (int i = 0; i < g->params.count; i++) {
        const char *name = g->params.items[i].name;
        awl_tensor *t = g->params.items[i].tensor;
        int status;
        if (ends_with(name, ".bias"))
            status = awl_init_constant_(t, 0.0);
        else if (t->ndim == 1) /* LayerNorm weight */
            status = awl_init_constant_(t, 1.0);
        else if (ends_with(name, "c_proj.weight"))
            status = awl_init_normal_(t, 0.0, proj_std);
        else
            status = awl_init_normal_(t, 0.0, 0.02);
        if (status < 0) return status;
    }
    return AWL_OK;
}

/* Builds the module tree; NULL after an error (everything freed). */
static awl_gpt *gpt_build(const awl_gpt_config *c, const char *device)
{
    awl_gpt *g = (awl_gpt *)awl_module_alloc(sizeof *g, "GPT", gpt_module_forward, gpt_destroy);
    g->cfg = *c;
    g->autocast = AWL_F32;
    g->blocks = awl_xcalloc((size_t)c->n_layer, sizeof *g->blocks);
    g->segments = awl_xcalloc((size_t)c->n_layer, sizeof *g->segments);
    awl_module *h = awl_module_container_new("ModuleList");
    for (int i = 0; i < c->n_layer && h; i++) {
        char name[16];
        snprintf(name, sizeof name, "%d", i);
        g->blocks[i] = awl_block_new(c->n_embd, c->n_head, c->dropout, c->bias, device);
        if (awl_module_add_child(h, name, g->blocks[i]) < 0) {
            awl_module_free(h);
            h = NULL;
        }
    }
    g->wte = awl_embedding_new(c->vocab, c->n_embd, device);
    g->wpe = awl_embedding_new(c->block, c->n_embd, device);
    g->ln_f = awl_layer_norm_new(c->n_embd, 1e-5, c->bias, device);
    awl_module *transformer = awl_module_with_children(
        awl_module_container_new("ModuleDict"), 4, (const char *[]){"wte", "wpe", "h", "ln_f"},
        (awl_module *[]){g->wte, g->wpe, h, g->ln_f});
    if (awl_module_add_child(&g->base, "transformer", transformer) < 0 ||
        awl_module_parameters(&g->base, &g->params) < 0) {
        awl_module_free(&g->base);
        return NULL;
    }
    return g;
}

awl_gpt *awl_gpt_new(const awl_gpt_config *cfg, const char *device, uint64_t seed)
{
    if (check_config(cfg) < 0) return NULL;
    uint64_t outer_seed, outer_offset;
    awl_rng_get_state(&outer_seed, &outer_offset);
    awl_rng_set_state(seed, 0);
    awl_gpt *g = gpt_build(cfg, device);
    if (g) {
        awl_rng_set_state(seed, 0);
        if (gpt_init(g) < 0) {
            awl_module_free(&g->base);
            g = NULL;
        }
    }
    awl_rng_set_state(outer_seed, outer_offset);
    return g;
}

void awl_gpt_free(awl_gpt *model)
{
    if (model) awl_module_free(&model->base);
}

const awl_gpt_config *awl_gpt_get_config(const awl_gpt *model)
{
    return model ? &model->cfg : NULL;
}

awl_module *awl_gpt_module(awl_gpt *model) { return model ? &model->base : NULL; }

const awl_param_list *awl_gpt_parameters(awl_gpt *model)
{
    if (!model) return NULL;
    awl_param_list now = {0};
    if (awl_module_parameters(&model->base, &now) < 0) {
        awl_param_list_clear(&now);
        return NULL;
    }
    bool same = now.count == model->params.count;
    for (int i = 0; same && i < now.count; i++)
        same = now.items[i].tensor == model->params.items[i].tensor;
    if (same) {
        awl_param_list_clear(&now);
    } else {
        awl_param_list_clear(&model->params);
        model->params = now;
    }
    return &model->params;
}

int64_t awl_gpt_num_params(const awl_gpt *model)
{
    return model ? awl_param_list_numel(&model->params) : -1;
}

void awl_gpt_set_checkpointing(awl_gpt *model, bool on)
{
    if (model) model->checkpointing = on;
}

/* Whether the model's device computes in dtype: its products and
 * element-wise arithmetic, as its backend declares them. */
static int check_autocast_device(awl_gpt *g, awl_dtype dtype)
{
    char device[32];
    awl_tensor_device_name(awl_module_get_param(g->wte, "weight"), device, sizeof device);
    if (awl_device_supports(device, AWL_KERNEL_MATMUL, 0, dtype) &&
        awl_device_supports(device, AWL_KERNEL_BINARY, AWL_BINARY_ADD, dtype))
        return AWL_OK;
    return awl_error(AWL_ERR_UNSUPPORTED,
                     "awl_gpt_set_autocast: the model's device %s cannot "
                     "compute in %s (use float32 there, or a CUDA device)",
                     device, awl_dtype_name(dtype));
}

int awl_gpt_set_autocast(awl_gpt *model, awl_dtype dtype)
{
    if (!model) return AWL_ERR_INVALID;
    if (dtype != AWL_F32 && dtype != AWL_BF16)
        return awl_error(AWL_ERR_INVALID,
                         "awl_gpt_set_autocast: %s is not an autocast dtype "
                         "(bfloat16, or float32 for off)",
                         awl_dtype_name(dtype));
    int status = dtype == AWL_F32 ? AWL_OK : check_autocast_device(model, dtype);
    if (status == AWL_OK) model->autocast = dtype;
    return status;
}

awl_dtype awl_gpt_get_autocast(const awl_gpt *model) { return model ? model->autocast : AWL_F32; }

awl_dtype awl_gpt_autocast_enter(const awl_gpt *g)
{
    awl_dtype before = awl_autocast_get();
    if (g->autocast != AWL_F32) awl_autocast_set(g->autocast);
    return before;
}

/* ---- forward ------------------------------------------------------------------------------ */

static awl_tensor *block_segment(void *ctx, int n_inputs, awl_tensor *const *inputs)
{
    (void)n_inputs;
    const block_segment_ctx *s = ctx;
    awl_dtype before = awl_autocast_set(s->autocast);
    awl_tensor *out = awl_module_forward(s->block, inputs[0]);
    awl_autocast_set(before);
    return out;
}

/* dropout(wte[idx] + wpe[pos]), pos NULL: 0..T-1. */
static awl_tensor *embed(awl_gpt *g, awl_tensor *idx, awl_tensor *pos)
{
    if (!idx) return NULL;
    char s[AWL_MAX_DIMS * 24];
    if (idx->ndim != 2 || idx->dtype != AWL_I32 || idx->shape[1] < 1 ||
        idx->shape[1] > g->cfg.block) {
        awl_error(AWL_ERR_INVALID,
                  "awl_gpt_forward: idx must be int32 (B, T) with 1 <= T <= "
                  "block (%d); got %s %s",
                  g->cfg.block, awl_dtype_name(idx->dtype), awl_shape_str(idx, s, sizeof s));
        return NULL;
    }
    int64_t T = idx->shape[1];
    awl_tensor *wte = awl_module_get_param(g->wte, "weight");
    awl_tensor *wpe = awl_module_get_param(g->wpe, "weight");
    return awl_add_dropout(awl_embedding(wte, idx),
                           pos ? awl_embedding(wpe, pos) : awl_slice(wpe, 0, 0, T, 1),
                           g->cfg.dropout, g->base.training);
}

/* The blocks, then ln_f. A checkpointed block is a segment of its own,
 * whole. Otherwise each block is left open at its last residual addition
 * (awl_nn_block_forward_open), which the next block's ln_1, or ln_f, then
 * makes in the same kernel as its LayerNorm: the same values and graph as
 * the blocks' own forwards, without reading the stream back. */
static awl_tensor *blocks_and_norm(awl_gpt *g, awl_tensor *x)
{
    if (!x) return NULL;
    bool checkpoint = g->checkpointing && awl_is_grad_enabled();
    awl_tensor *h = NULL; /* the last block's branch, not yet added */
    double p = 0.0;
    for (int i = 0; i < g->cfg.n_layer; i++) {
        g->segments[i] = (block_segment_ctx){g->blocks[i], awl_autocast_get()};
        if (checkpoint)
            x = awl_checkpoint(block_segment, &g->segments[i], 1, &x);
        else
            h = awl_nn_block_forward_open(g->blocks[i], &x, h, p, &p);
    }
    return h ? awl_nn_add_layer_norm(g->ln_f, &x, h, p) : awl_module_forward(g->ln_f, x);
}

awl_tensor *awl_gpt_hidden(awl_gpt *g, awl_tensor *idx, awl_tensor *pos)
{
    return blocks_and_norm(g, embed(g, idx, pos));
}

awl_tensor *awl_gpt_head(awl_gpt *g, awl_tensor *h)
{
    return awl_linear(awl_autocast(h), awl_autocast(awl_module_get_param(g->wte, "weight")), NULL);
}

/* The tensors a forward under autocast casts, written to out (when not
 * NULL) from index n on: the weights and biases of every Linear layer in
 * m's tree. Returns the new count. */
static int linear_params(const awl_module *m, awl_tensor **out, int n)
{
    if (strcmp(m->type, "Linear") == 0)
        for (int i = 0; i < m->n_params; i++, n++)
            if (out) out[n] = *m->params[i].slot;
    for (int i = 0; i < m->n_children; i++) n = linear_params(m->children[i].module, out, n);
    return n;
}

/* Under autocast, casts every weight the forward reads in bfloat16 at once
 * (nn/autocast.c's cache: one kernel on CUDA, not one per tensor). */
static int cache_weight_casts(awl_gpt *g)
{
    if (g->autocast == AWL_F32) return AWL_OK;
    int n = linear_params(&g->base, NULL, 0);
    awl_tensor **ts = awl_xmalloc((size_t)(n + 1) * sizeof *ts);
    linear_params(&g->base, ts, 0);
    ts[n] = awl_module_get_param(g->wte, "weight"); /* the tied head */
    int status = awl_autocast_cache(n + 1, ts);
    free(ts);
    return status;
}

awl_tensor *awl_gpt_forward(awl_gpt *model, awl_tensor *idx)
{
    if (!model) return NULL;
    awl_dtype before = awl_gpt_autocast_enter(model);
    awl_tensor *logits = NULL;
    /* The weights are cast after the embeddings, so that in backward the
     * cast of the tied wte hands it the head's gradient before the token
     * embedding's backward runs, which then adds its rows into that
     * gradient (autograd/ops_index.c) instead of into zeros. */
    awl_tensor *x = embed(model, idx, NULL);
    if (x && cache_weight_casts(model) == AWL_OK)
        logits = awl_gpt_head(model, blocks_and_norm(model, x));
    awl_autocast_cache_clear();
    awl_autocast_set(before);
    return logits;
}

/* Under autocast the logits are bfloat16; the cross-entropy kernel
 * accumulates in float32 and the loss comes back float32. */
awl_tensor *awl_gpt_loss(awl_gpt *model, awl_tensor *idx, awl_tensor *targets)
{
    return awl_gpt_loss_scaled(model, idx, targets, 1.0);
}

awl_tensor *awl_gpt_loss_scaled(awl_gpt *model, awl_tensor *idx, awl_tensor *targets, double scale)
{
    if (!model || !targets) return NULL;
    return awl_cross_entropy_scaled(awl_gpt_forward(model, idx), targets, -1, scale);
}
