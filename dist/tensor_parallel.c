/*
 * dist/tensor_parallel.c - Megatron-style tensor parallelism (Shoeybi et
 * al., arXiv:1909.08053): the two conjugate operators, the parallel Linear
 * layers, and a GPT split over a group of ranks.
 *
 *   f (awl_tp_copy):   forward the identity,  backward an allreduce (sum);
 *   g (awl_tp_reduce): forward an allreduce,  backward the identity.
 *
 * A column-parallel Linear keeps 1/N of the weight's rows (output
 * features): y_r = f(x) W_r^T + b_r, the output split across ranks. A
 * row-parallel Linear keeps 1/N of its columns (input features) and takes
 * a split input: y = g(x_r W_r^T) + b. A GPT block puts them in pairs:
 *
 *     attention:  ln_1 -> f -> c_attn (column: this rank's heads' q, k, v)
 *                 -> attention over those heads -> c_proj (row) -> g
 *     MLP:        ln_2 -> f -> c_fc (column) -> GELU -> c_proj (row) -> g
 *
 * so each block does exactly two allreduces in forward (the g's) and two in
 * backward (the f's), of (B, T, C) activations. Everything else (the
 * embeddings, the LayerNorms, the row-parallel biases, the tied head) is
 * replicated: every rank computes it on the same activations, so its
 * gradients come out the same on every rank with no communication. The
 * ranks of a group must run the same batches and the same dropout streams.
 *
 * awl_tp_gpt_new cuts a rank's pieces out of an ordinary awl_gpt (so a
 * split model starts with exactly the weights of the unsplit one), and
 * awl_tp_gpt_gather puts the pieces back together (for checkpoints and
 * sampling). The split model's parameters carry the full model's names.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/checkpoint.h"
#include "autograd/node.h"
#include "dist/dist_internal.h"
#include "nn/gpt.h"

/* ---- f and g ---------------------------------------------------------------------------- */

typedef struct tp_ctx {
    awl_process_group *pg;
} tp_ctx;

/* grad, summed over the group (a copy: grad belongs to the engine). */
static awl_tensor *summed(awl_process_group *pg, awl_tensor *grad)
{
    awl_tensor *g = awl_tensor_clone(grad);
    return g && awl_dist_allreduce(pg, g, AWL_DIST_SUM) == AWL_OK ? g : NULL;
}

static int copy_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const tp_ctx *c = awl_node_ctx(node);
    grads[0] = summed(c->pg, grad);
    return grads[0] ? AWL_OK : AWL_ERR_DIST;
}

static int reduce_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    (void)node;
    grads[0] = grad;
    return AWL_OK;
}

awl_tensor *awl_tp_copy(awl_process_group *pg, awl_tensor *x)
{
    if (!x) return NULL;
    awl_tensor *out = awl_tensor_detach(x);
    awl_node *node = awl_node_record(out, "tp_copy", copy_backward, 1, &x, sizeof(tp_ctx));
    if (node) ((tp_ctx *)awl_node_ctx(node))->pg = pg;
    return out;
}

awl_tensor *awl_tp_reduce(awl_process_group *pg, awl_tensor *x)
{
    if (!x) return NULL;
    awl_tensor *out = summed(pg, x);
    if (!out) return NULL;
    awl_node *node = awl_node_record(out, "tp_reduce", reduce_backward, 1, &x, sizeof(tp_ctx));
    if (node) ((tp_ctx *)awl_node_ctx(node))->pg = pg;
    return out;
}

awl_tensor *awl_tp_column_linear(awl_process_group *pg, awl_tensor *x, awl_tensor *weight,
                                 awl_tensor *bias)
{
    return awl_linear(awl_tp_copy(pg, x), weight, bias);
}

awl_tensor *awl_tp_row_linear(awl_process_group *pg, awl_tensor *x, awl_tensor *weight,
                              awl_tensor *bias)
{
    awl_tensor *y = awl_tp_reduce(pg, awl_linear(x, weight, NULL));
    return bias ? awl_add(y, bias) : y;
}

/* ---- the split GPT ------------------------------------------------------------------------ */

typedef struct awl_tp_gpt awl_tp_gpt;

typedef struct tp_block {
    awl_tensor *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b;
    awl_tensor *ln2_w, *ln2_b, *fc_w, *fc_b, *mlp_w, *mlp_b;
    awl_tp_gpt *model; /* for a checkpointed segment's replay */
} tp_block;

struct awl_tp_gpt {
    awl_process_group *pg;
    awl_gpt_config cfg; /* the whole model's */
    awl_tensor *wte, *wpe, *lnf_w, *lnf_b;
    tp_block *blocks;
    awl_param_list params;
    awl_param_list split; /* the pieces that are a part of their parameter */
    bool training, checkpointing;
};

/* How a parameter of the whole model is cut: not at all, by rows (the
 * output features of a column-parallel Linear; c_attn's q, k and v each
 * by heads), or by columns (the input features of a row-parallel one). */
typedef enum tp_cut { CUT_NONE, CUT_ROWS, CUT_QKV_ROWS, CUT_COLUMNS } tp_cut;

static tp_cut cut_of(const char *name)
{
    if (strstr(name, ".attn.c_attn.")) return CUT_QKV_ROWS;
    if (strstr(name, ".mlp.c_fc.")) return CUT_ROWS;
    if (strstr(name, ".c_proj.weight")) return CUT_COLUMNS;
    return CUT_NONE; /* embeddings, LayerNorms, the row-parallel biases */
}

/* Rank r's piece of the whole model's parameter w (a new leaf). */
static awl_tensor *piece_of(awl_tensor *w, tp_cut cut, int r, int n)
{
    awl_tensor *p = NULL;
    awl_scope_begin();
    int64_t rows = w->shape[0];
    switch (cut) {
    case CUT_NONE: p = awl_tensor_clone(w); break;
    case CUT_ROWS: p = awl_tensor_clone(awl_tensor_slice(w, 0, rows * r / n, rows * (r + 1) / n, 1)); break;
    case CUT_COLUMNS: {
        int64_t cols = w->shape[1];
        p = awl_tensor_clone(awl_tensor_slice(w, 1, cols * r / n, cols * (r + 1) / n, 1));
        break;
    }
    case CUT_QKV_ROWS: { /* q, k and v are each C rows: this rank's heads of each */
        int64_t C = rows / 3;
        awl_tensor *parts[3];
        for (int i = 0; i < 3; i++)
            parts[i] = awl_tensor_slice(w, 0, i * C + C * r / n, i * C + C * (r + 1) / n, 1);
        p = awl_tensor_concat(3, parts, 0);
        break;
    }
    }
    p = awl_retain(p);
    awl_scope_end();
    return p ? awl_requires_grad_(p, true) : NULL;
}

static awl_tensor **slot_of(awl_tp_gpt *m, const char *name)
{
    int layer;
    char rest[128];
    if (strcmp(name, "transformer.wte.weight") == 0) return &m->wte;
    if (strcmp(name, "transformer.wpe.weight") == 0) return &m->wpe;
    if (strcmp(name, "transformer.ln_f.weight") == 0) return &m->lnf_w;
    if (strcmp(name, "transformer.ln_f.bias") == 0) return &m->lnf_b;
    if (sscanf(name, "transformer.h.%d.%127s", &layer, rest) != 2 || layer < 0 ||
        layer >= m->cfg.n_layer)
        return NULL;
    tp_block *b = &m->blocks[layer];
    static const struct {
        const char *name;
        size_t offset;
    } fields[] = {
        {"ln_1.weight", offsetof(tp_block, ln1_w)},       {"ln_1.bias", offsetof(tp_block, ln1_b)},
        {"attn.c_attn.weight", offsetof(tp_block, attn_w)}, {"attn.c_attn.bias", offsetof(tp_block, attn_b)},
        {"attn.c_proj.weight", offsetof(tp_block, proj_w)}, {"attn.c_proj.bias", offsetof(tp_block, proj_b)},
        {"ln_2.weight", offsetof(tp_block, ln2_w)},       {"ln_2.bias", offsetof(tp_block, ln2_b)},
        {"mlp.c_fc.weight", offsetof(tp_block, fc_w)},    {"mlp.c_fc.bias", offsetof(tp_block, fc_b)},
        {"mlp.c_proj.weight", offsetof(tp_block, mlp_w)}, {"mlp.c_proj.bias", offsetof(tp_block, mlp_b)},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (strcmp(rest, fields[i].name) == 0) return (awl_tensor **)((char *)b + fields[i].offset);
    return NULL;
}

awl_tp_gpt *awl_tp_gpt_new(awl_gpt *full, awl_process_group *pg)
{
    const char *op = "awl_tp_gpt_new";
    if (!full || !pg) {
        awl_error(AWL_ERR_INVALID, "%s: no %s", op, full ? "process group" : "model");
        return NULL;
    }
    const awl_gpt_config *cfg = awl_gpt_get_config(full);
    int n = awl_dist_world_size(pg);
    if (cfg->n_head % n != 0 || (4 * cfg->n_embd) % n != 0) {
        awl_error(AWL_ERR_INVALID, "%s: %d heads (width %d) do not split over %d ranks", op,
                  cfg->n_head, cfg->n_embd, n);
        return NULL;
    }
    awl_tp_gpt *m = calloc(1, sizeof *m);
    m->pg = pg;
    m->cfg = *cfg;
    m->training = true;
    m->blocks = calloc((size_t)cfg->n_layer, sizeof *m->blocks);
    const awl_param_list *all = awl_gpt_parameters(full);
    int status = AWL_OK;
    for (int i = 0; i < all->count && status == AWL_OK; i++) {
        const char *name = all->items[i].name;
        awl_tensor **slot = slot_of(m, name);
        if (!slot) {
            status = awl_error(AWL_ERR_INVALID, "%s: the model's parameter %s has no place in the split GPT", op, name);
            break;
        }
        *slot = piece_of(all->items[i].tensor, cut_of(name), awl_dist_rank(pg), n);
        status = *slot ? awl_param_list_add(&m->params, name, *slot) : AWL_ERR_OOM;
        if (status == AWL_OK && cut_of(name) != CUT_NONE)
            status = awl_param_list_add(&m->split, name, *slot);
    }
    for (int i = 0; i < cfg->n_layer; i++) m->blocks[i].model = m;
    if (status < 0) {
        awl_tp_gpt_free(m);
        return NULL;
    }
    return m;
}

void awl_tp_gpt_free(awl_tp_gpt *m)
{
    if (!m) return;
    for (int i = 0; i < m->params.count; i++) awl_release(m->params.items[i].tensor);
    awl_param_list_clear(&m->params);
    awl_param_list_clear(&m->split);
    free(m->blocks);
    free(m);
}

const awl_param_list *awl_tp_gpt_parameters(awl_tp_gpt *m) { return m ? &m->params : NULL; }

void awl_tp_gpt_train(awl_tp_gpt *m, bool on)
{
    if (m) m->training = on;
}

void awl_tp_gpt_set_checkpointing(awl_tp_gpt *m, bool on)
{
    if (m) m->checkpointing = on;
}

static awl_tensor *tp_block_forward(awl_tp_gpt *m, const tp_block *b, awl_tensor *x)
{
    awl_process_group *pg = m->pg;
    double p = m->training ? m->cfg.dropout : 0;
    int heads = m->cfg.n_head / awl_dist_world_size(pg);
    awl_tensor *h = awl_layer_norm(x, b->ln1_w, b->ln1_b, 1e-5);
    awl_tensor *qkv = awl_tp_column_linear(pg, h, b->attn_w, b->attn_b);
    awl_tensor *a = awl_attention_qkv(qkv, heads, true, p);
    x = awl_add(x, awl_dropout(awl_tp_row_linear(pg, a, b->proj_w, b->proj_b), p, m->training));
    h = awl_layer_norm(x, b->ln2_w, b->ln2_b, 1e-5);
    awl_tensor *u = awl_gelu(awl_tp_column_linear(pg, h, b->fc_w, b->fc_b));
    return awl_add(x, awl_dropout(awl_tp_row_linear(pg, u, b->mlp_w, b->mlp_b), p, m->training));
}

static awl_tensor *tp_block_segment(void *user, int n_inputs, awl_tensor *const *inputs)
{
    (void)n_inputs;
    const tp_block *b = user;
    return tp_block_forward(b->model, b, inputs[0]);
}

awl_tensor *awl_tp_gpt_forward(awl_tp_gpt *m, awl_tensor *idx)
{
    if (!m || !idx) return NULL;
    if (idx->ndim != 2 || idx->dtype != AWL_I32 || idx->shape[1] > m->cfg.block) {
        awl_error(AWL_ERR_INVALID, "awl_tp_gpt_forward: idx must be int32 (B, T) with T <= %d",
                  m->cfg.block);
        return NULL;
    }
    awl_tensor *x = awl_add(awl_embedding(m->wte, idx), awl_slice(m->wpe, 0, 0, idx->shape[1], 1));
    x = awl_dropout(x, m->cfg.dropout, m->training);
    /* a checkpointed block recomputes its forward, allreduces included,
     * during backward */
    bool checkpoint = m->checkpointing && awl_is_grad_enabled();
    for (int i = 0; i < m->cfg.n_layer; i++)
        x = checkpoint ? awl_checkpoint(tp_block_segment, &m->blocks[i], 1, &x)
                       : tp_block_forward(m, &m->blocks[i], x);
    return awl_linear(awl_layer_norm(x, m->lnf_w, m->lnf_b, 1e-5), m->wte, NULL);
}

awl_tensor *awl_tp_gpt_loss(awl_tp_gpt *m, awl_tensor *idx, awl_tensor *targets)
{
    return awl_cross_entropy(awl_tp_gpt_forward(m, idx), targets, -1);
}

/* Every rank's piece of `name` (this rank's is `mine`) put together into
 * `whole`, on every rank. */
int awl_tp_gpt_gather_piece(awl_tp_gpt *m, const char *name, awl_tensor *mine, awl_tensor *whole)
{
    if (!m || !name || !mine || !whole) return AWL_ERR_INVALID;
    int n = awl_dist_world_size(m->pg), status = AWL_OK;
    tp_cut cut = cut_of(name);
    awl_scope_begin();
    if (cut == CUT_NONE) {
        status = awl_tensor_copy_(whole, mine);
    } else {
        /* every rank's piece side by side, then each where it belongs */
        int64_t k = awl_numel(mine);
        awl_tensor *pieces = awl_tensor_new_on(mine, 1, (int64_t[]){k * n}, whole->dtype);
        status = awl_dist_allgather(m->pg, pieces, awl_tensor_contiguous(mine));
        for (int r = 0; r < n && status == AWL_OK; r++) {
            awl_tensor *p = awl_tensor_reshape(awl_tensor_slice(pieces, 0, r * k, (r + 1) * k, 1),
                                               mine->ndim, mine->shape);
            int64_t rows = whole->shape[0];
            if (cut == CUT_ROWS) {
                status = awl_tensor_copy_(awl_tensor_slice(whole, 0, rows * r / n, rows * (r + 1) / n, 1), p);
            } else if (cut == CUT_COLUMNS) {
                int64_t cols = whole->shape[1];
                status = awl_tensor_copy_(awl_tensor_slice(whole, 1, cols * r / n, cols * (r + 1) / n, 1), p);
            } else {
                int64_t C = rows / 3, h = C / n;
                for (int q = 0; q < 3 && status == AWL_OK; q++)
                    status = awl_tensor_copy_(
                        awl_tensor_slice(whole, 0, q * C + C * r / n, q * C + C * (r + 1) / n, 1),
                        awl_tensor_slice(p, 0, q * h, (q + 1) * h, 1));
            }
        }
    }
    awl_scope_end();
    return status;
}

int awl_tp_gpt_cut_piece(awl_tp_gpt *m, const char *name, awl_tensor *whole, awl_tensor *mine)
{
    if (!m || !name || !whole || !mine) return AWL_ERR_INVALID;
    awl_tensor *p = piece_of(whole, cut_of(name), awl_dist_rank(m->pg), awl_dist_world_size(m->pg));
    int status = p ? awl_tensor_copy_(mine, p) : AWL_ERR_INVALID;
    awl_release(p);
    return status;
}

int awl_tp_gpt_gather(awl_tp_gpt *m, awl_gpt *full)
{
    if (!m || !full) return AWL_ERR_INVALID;
    const awl_param_list *all = awl_gpt_parameters(full);
    int status = AWL_OK;
    for (int i = 0; i < all->count && status == AWL_OK; i++)
        status = awl_tp_gpt_gather_piece(m, all->items[i].name, *slot_of(m, all->items[i].name),
                                         all->items[i].tensor);
    return status;
}

double awl_tp_gpt_clip_grad_norm(awl_tp_gpt *m, double max_norm)
{
    if (!m) return -1;
    /* the split pieces' squares summed over the group, the replicated
     * parameters' counted once (every rank has the same) */
    double all = awl_clip_grad_norm(&m->params, INFINITY);
    double part = m->split.count ? awl_clip_grad_norm(&m->split, INFINITY) : 0;
    if (all < 0 || part < 0) return -1;
    double sq[1] = {part * part};
    awl_scope_begin();
    awl_tensor *t = awl_from_data(sq, AWL_SHAPE(1), AWL_F64, "cpu");
    int status = awl_dist_allreduce(m->pg, t, AWL_DIST_SUM);
    if (status == AWL_OK) awl_to_host(t, sq, sizeof sq);
    awl_scope_end();
    if (status < 0) return -1;
    double norm = sqrt(all * all - part * part + sq[0]), coef = max_norm / (norm + 1e-6);
    if (coef < 1 && awl_scale_grads(&m->params, coef) < 0) return -1;
    return norm;
}
