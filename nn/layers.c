/*
 * nn/layers.c - the layers: Linear, Embedding, LayerNorm, Dropout, GELU, MLP,
 * Block, Sequential, Residual and the plain container. (CausalSelfAttention
 * is in nn/attention.c, beside the attention functions.)
 *
 * Each layer is a struct that starts with awl_module, holds its parameters
 * as plain fields registered as slots (nn/module.c), and has a forward that
 * calls one functional op (nn/functional.c) or its children. Layers keep
 * their hyper-parameters (eps, p) and read the training flag at forward
 * time, so train/eval needs no per-layer code.
 *
 * Mixed precision lives here too, in two places: Linear casts to the
 * autocast dtype (nn/autocast.c), and the residual additions cast a
 * bfloat16 branch back to the float32 stream.
 *
 * Names follow PyTorch and nanoGPT ("weight", "bias", "c_fc", "ln_1") so a
 * model built from these layers has the parameter names PyTorch would print.
 */
#include "nn/nn.h"

#include <math.h>

#include "common/alloc.h"
#include "nn/functional_internal.h"

static bool check_sizes(const char *op, int64_t a, int64_t b)
{
    if (a > 0 && b > 0) return true;
    awl_error(AWL_ERR_INVALID, "%s: sizes must be positive, got %lld and %lld", op, (long long)a,
              (long long)b);
    return false;
}

/* m when its construction went well, else NULL (m freed). */
static awl_module *built(awl_module *m, bool ok)
{
    if (ok) return m;
    awl_module_free(m);
    return NULL;
}

/* ---- Linear ------------------------------------------------------------------------- */

typedef struct linear_layer {
    awl_module base;
    awl_tensor *weight, *bias;
} linear_layer;

/* Under autocast (nn/autocast.c) the product runs in the autocast dtype. */
static awl_tensor *linear_forward(awl_module *self, awl_tensor *x)
{
    linear_layer *l = (linear_layer *)self;
    return awl_linear(awl_autocast(x), awl_autocast(l->weight), awl_autocast(l->bias));
}

awl_module *awl_linear_new(int64_t in_features, int64_t out_features, bool bias, const char *device)
{
    if (!check_sizes("awl_linear_new", in_features, out_features)) return NULL;
    linear_layer *l = (linear_layer *)awl_module_alloc(sizeof *l, "Linear", linear_forward, NULL);
    awl_module *m = &l->base;
    double bound = 1.0 / sqrt((double)in_features); /* PyTorch's default init */
    bool ok = awl_module_new_param(m, "weight", &l->weight, AWL_SHAPE(out_features, in_features),
                                   device) == 0 &&
              awl_init_uniform_(l->weight, -bound, bound) == 0;
    if (ok && bias)
        ok = awl_module_new_param(m, "bias", &l->bias, AWL_SHAPE(out_features), device) == 0 &&
             awl_init_uniform_(l->bias, -bound, bound) == 0;
    return built(m, ok);
}

/* ---- Embedding ---------------------------------------------------------------------- */

typedef struct embedding_layer {
    awl_module base;
    awl_tensor *weight;
} embedding_layer;

static awl_tensor *embedding_forward(awl_module *self, awl_tensor *idx)
{
    return awl_embedding(((embedding_layer *)self)->weight, idx);
}

awl_module *awl_embedding_new(int64_t num, int64_t dim, const char *device)
{
    if (!check_sizes("awl_embedding_new", num, dim)) return NULL;
    embedding_layer *e =
        (embedding_layer *)awl_module_alloc(sizeof *e, "Embedding", embedding_forward, NULL);
    return built(&e->base, awl_module_new_param(&e->base, "weight", &e->weight, AWL_SHAPE(num, dim),
                                                device) == 0 &&
                               awl_init_normal_(e->weight, 0.0, 1.0) == 0);
}

/* ---- LayerNorm ---------------------------------------------------------------------- */

typedef struct layer_norm_layer {
    awl_module base;
    awl_tensor *weight, *bias;
    double eps;
} layer_norm_layer;

static awl_tensor *layer_norm_forward(awl_module *self, awl_tensor *x)
{
    layer_norm_layer *l = (layer_norm_layer *)self;
    return awl_layer_norm(x, l->weight, l->bias, l->eps);
}

awl_module *awl_layer_norm_new(int64_t dim, double eps, bool bias, const char *device)
{
    if (!check_sizes("awl_layer_norm_new", dim, 1)) return NULL;
    layer_norm_layer *l =
        (layer_norm_layer *)awl_module_alloc(sizeof *l, "LayerNorm", layer_norm_forward, NULL);
    l->eps = eps;
    awl_module *m = &l->base;
    bool ok = awl_module_new_param(m, "weight", &l->weight, AWL_SHAPE(dim), device) == 0 &&
              awl_init_constant_(l->weight, 1.0) == 0;
    if (ok && bias) ok = awl_module_new_param(m, "bias", &l->bias, AWL_SHAPE(dim), device) == 0;
    return built(m, ok);
}

/* ln(x) read by a Linear: under autocast (a float32 x) in the autocast
 * dtype, rounded by the LayerNorm's kernel rather than by the Linear's cast
 * after it (awl_layer_norm_to: the same output bits). */
static awl_dtype for_linear(const awl_tensor *x)
{
    awl_dtype to = awl_autocast_get();
    return to == AWL_F32 || x->dtype != AWL_F32 ? x->dtype : to;
}

static awl_tensor *layer_norm_for_linear(awl_module *ln, awl_tensor *x)
{
    layer_norm_layer *l = (layer_norm_layer *)ln;
    return x ? awl_layer_norm_to(x, l->weight, l->bias, l->eps, for_linear(x)) : NULL;
}

/* *x = *x + dropout(h) (a residual addition, p already 0 outside
 * training), then ln of it, in one op (awl_dropout_add_layer_norm_to: one
 * kernel where the backend has it): in x's dtype, or read by a Linear
 * (linear) as layer_norm_for_linear gives it. */
static awl_tensor *add_layer_norm(awl_module *ln, awl_tensor **x, awl_tensor *h, double p,
                                  bool linear)
{
    layer_norm_layer *l = (layer_norm_layer *)ln;
    awl_tensor *in = *x;
    if (!in || !h) return *x = NULL;
    awl_dtype to = linear ? for_linear(in) : in->dtype;
    return awl_dropout_add_layer_norm_to(in, h, p, true, l->weight, l->bias, l->eps, to, x);
}

awl_tensor *awl_nn_add_layer_norm(awl_module *ln, awl_tensor **x, awl_tensor *h, double p)
{
    return add_layer_norm(ln, x, h, p, false);
}

/* ---- Dropout, GELU ------------------------------------------------------------------ */

typedef struct dropout_layer {
    awl_module base;
    double p;
} dropout_layer;

static awl_tensor *dropout_forward(awl_module *self, awl_tensor *x)
{
    return awl_dropout(x, ((dropout_layer *)self)->p, self->training);
}

awl_module *awl_dropout_new(double p)
{
    if (!(p >= 0.0 && p <= 1.0)) {
        awl_error(AWL_ERR_INVALID, "awl_dropout_new: probability %g is outside [0, 1]", p);
        return NULL;
    }
    dropout_layer *d =
        (dropout_layer *)awl_module_alloc(sizeof *d, "Dropout", dropout_forward, NULL);
    d->p = p;
    return &d->base;
}

static awl_tensor *gelu_forward(awl_module *self, awl_tensor *x)
{
    (void)self;
    return awl_gelu(x);
}

awl_module *awl_gelu_new(void)
{
    return awl_module_alloc(sizeof(awl_module), "GELU", gelu_forward, NULL);
}

/* ---- MLP and Block ------------------------------------------------------------------ */

typedef struct mlp_layer {
    awl_module base;
    awl_module *c_fc, *c_proj;
    double dropout;
} mlp_layer;

/* x (B, T, C) -> (B, T, C) through a hidden (B, T, 4C), before the output
 * dropout. */
awl_tensor *awl_nn_mlp_branch(awl_module *self, awl_tensor *x, double *p)
{
    mlp_layer *l = (mlp_layer *)self;
    *p = self->training ? l->dropout : 0.0;
    linear_layer *fc = (linear_layer *)l->c_fc, *proj = (linear_layer *)l->c_proj;
    return awl_mlp(awl_autocast(x), awl_autocast(fc->weight), awl_autocast(fc->bias),
                   awl_autocast(proj->weight), awl_autocast(proj->bias));
}

static awl_tensor *mlp_forward(awl_module *self, awl_tensor *x)
{
    double p;
    awl_tensor *y = awl_nn_mlp_branch(self, x, &p);
    return awl_dropout(y, p, self->training);
}

awl_module *awl_mlp_new(int64_t n_embd, double dropout, bool bias, const char *device)
{
    if (!check_sizes("awl_mlp_new", n_embd, 1)) return NULL;
    mlp_layer *l = (mlp_layer *)awl_module_alloc(sizeof *l, "MLP", mlp_forward, NULL);
    l->dropout = dropout;
    l->c_fc = awl_linear_new(n_embd, 4 * n_embd, bias, device);
    l->c_proj = awl_linear_new(4 * n_embd, n_embd, bias, device);
    return awl_module_with_children(&l->base, 2, (const char *[]){"c_fc", "c_proj"},
                                    (awl_module *[]){l->c_fc, l->c_proj});
}

typedef struct block_layer {
    awl_module base;
    awl_module *ln_1, *attn, *ln_2, *mlp;
} block_layer;

/* x (B, T, C) -> (B, T, C): x + attn(ln_1(x)), then the same with the MLP.
 * Under autocast ln_1 and ln_2 give their output in bfloat16 directly
 * (layer_norm_for_linear): only the branches' first Linears read it. Each
 * branch's output dropout and its addition to the residual stream are
 * one op (awl_dropout_add), which also casts a bfloat16 branch (autocast)
 * up to the float32 stream, as PyTorch's type promotion does; the first
 * addition and ln_2 after it are one op too (add_layer_norm),
 * and so are the second and what reads it next where the caller leaves
 * the block open (awl_nn_block_forward_open: a GPT's blocks). */
awl_tensor *awl_nn_block_forward_open(awl_module *block, awl_tensor **x, awl_tensor *h_in,
                                      double p_in, double *p)
{
    block_layer *b = (block_layer *)block;
    awl_tensor *in =
        h_in ? add_layer_norm(b->ln_1, x, h_in, p_in, true) : layer_norm_for_linear(b->ln_1, *x);
    awl_tensor *h = awl_nn_attention_branch(b->attn, in, p);
    h = awl_nn_mlp_branch(b->mlp, add_layer_norm(b->ln_2, x, h, *p, true), p);
    if (!h) *x = NULL; /* a failed block leaves no stream to go on with */
    return h;
}

static awl_tensor *block_forward(awl_module *self, awl_tensor *x)
{
    double p;
    awl_tensor *h = awl_nn_block_forward_open(self, &x, NULL, 0.0, &p);
    return awl_dropout_add(x, h, p, true);
}

awl_module *awl_block_new(int64_t n_embd, int n_head, double dropout, bool bias, const char *device)
{
    block_layer *b = (block_layer *)awl_module_alloc(sizeof *b, "Block", block_forward, NULL);
    b->ln_1 = awl_layer_norm_new(n_embd, 1e-5, bias, device);
    b->attn = awl_causal_self_attention_new(n_embd, n_head, dropout, bias, device);
    b->ln_2 = awl_layer_norm_new(n_embd, 1e-5, bias, device);
    b->mlp = awl_mlp_new(n_embd, dropout, bias, device);
    return awl_module_with_children(&b->base, 4, (const char *[]){"ln_1", "attn", "ln_2", "mlp"},
                                    (awl_module *[]){b->ln_1, b->attn, b->ln_2, b->mlp});
}

/* ---- Sequential, Residual, containers ----------------------------------------------- */

static awl_tensor *sequential_forward(awl_module *self, awl_tensor *x)
{
    for (int i = 0; i < self->n_children && x; i++)
        x = awl_module_forward(self->children[i].module, x);
    return x;
}

int awl_sequential_append(awl_module *seq, awl_module *m)
{
    if (!seq) {
        awl_module_free(m);
        return AWL_ERR_INVALID;
    }
    char name[16];
    snprintf(name, sizeof name, "%d", seq->n_children);
    return awl_module_add_child(seq, name, m);
}

awl_module *awl_sequential_new(int n, awl_module *const *modules)
{
    awl_module *seq = awl_module_alloc(sizeof(awl_module), "Sequential", sequential_forward, NULL);
    int status = AWL_OK;
    for (int i = 0; i < n; i++) {
        if (status == AWL_OK)
            status = awl_sequential_append(seq, modules[i]);
        else
            awl_module_free(modules[i]);
    }
    if (status < 0) {
        awl_module_free(seq);
        return NULL;
    }
    return seq;
}

static awl_tensor *residual_forward(awl_module *self, awl_tensor *x)
{
    awl_tensor *branch = awl_module_forward(self->children[0].module, x);
    /* under autocast a bfloat16 branch joins a float32 x (type promotion);
     * awl_add broadcasts, so inner may return any shape that fits x */
    if (x && branch && branch->dtype != x->dtype) branch = awl_cast(branch, x->dtype);
    return awl_add(x, branch);
}

awl_module *awl_residual_new(awl_module *inner)
{
    if (!inner) return NULL;
    awl_module *r = awl_module_alloc(sizeof(awl_module), "Residual", residual_forward, NULL);
    return awl_module_with_children(r, 1, (const char *[]){"fn"}, &inner);
}

awl_module *awl_module_container_new(const char *type)
{
    return awl_module_alloc(sizeof(awl_module), type ? type : "ModuleDict", NULL, NULL);
}
