/*
 * nn/attention.c - scaled dot-product attention and the causal
 * self-attention layer.
 *
 * Composed, attention is q k^T * scale, a causal mask, softmax, dropout and a
 * product with v: it materialises the (B, H, T, T) score matrix and keeps
 * the softmax for backward. Fused, the backend's attention kernel computes
 * the output and one log-sum-exp per query row, and its backward recomputes
 * the scores from q, k and the log-sum-exp; no (T, T) matrix is stored.
 * With dropout, the fused kernel takes the generator's state (seed, offset)
 * and draws the attention mask of common/dropout.h from it; the composed
 * path multiplies its (B, H, T, T) weights by the same mask. The node keeps
 * the state, and the backward (and a checkpointed block's replay, which
 * resets the generator) draws it again.
 *
 * Layout is where the copies hide. c_attn produces q, k and v side by side,
 * (B, T, 3C); a head is every D-th slice of a third of that. All of these
 * are strided views, which the kernel reads in place:
 *     q[b, h, t, d] = qkv[b, t, h * D + d]            strides (T*3C, D, 3C, 1)
 * and the output is written through the view (B, H, T, D) -> (B, T, C) with
 * strides (T*C, D, C, 1), which is exactly the memory of the (B, T, C) tensor
 * c_proj wants: the "transpose(1, 2).contiguous().view(B, T, C)" of nanoGPT
 * costs nothing. awl_attention_qkv goes one step further in backward: the
 * gradients of q, k and v are written through the same kind of views into one
 * (B, T, 3C) buffer, which is c_attn's output gradient, so no zero-filled
 * slice gradients are summed.
 *
 * As in nn/functional.c, the fused nodes' backward falls back to the
 * gradient formula written with differentiable ops when create_graph is on:
 *     P = softmax(S), S = q k^T * scale (masked)
 *     dv = P^T dO, dP = dO v^T, dS = P * (dP - rowsum(dP * P)),
 *     dq = dS k * scale, dk = dS^T q * scale.
 *
 * Generation (awl_attention_qkv_cached) keeps each layer's keys and values
 * in a cache, so that a new token's query attends to them without
 * recomputing them. Its writes go through the same views of qkv into the
 * cache; reading the cache's first S positions is a slice. A prompt that
 * fills an empty cache is ordinary causal attention (the fused kernel);
 * later tokens, whose queries are fewer than their keys, take the composed
 * path, with the causal mask shifted by the positions already cached. No
 * graph is recorded: the cache is written in place.
 */
#include "nn/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "common/alloc.h"
#include "nn/functional_internal.h"

typedef struct attn_ctx {
    double scale;
    bool causal;
    int n_head;               /* awl_attention_qkv only */
    awl_dropout_args dropout; /* p = 0: none */
} attn_ctx;

/* The kernels' dropout argument: NULL without dropout. */
static const awl_dropout_args *ctx_dropout(const attn_ctx *c)
{
    return c->dropout.p > 0.0 ? &c->dropout : NULL;
}

/* Draws attention dropout over `rows` rows of S weights from the global
 * generator into d: the blocks of common/dropout.h's attention mask. NULL
 * for p = 0. The fused kernel and, where it declines, the composed path get
 * the same draw. */
static const awl_dropout_args *take_dropout(double p, int64_t rows, int64_t S, awl_dropout_args *d)
{
    if (p == 0.0) return NULL;
    /* a draw counts elements, four to a block */
    *d = awl_nn_dropout_draw(p, 4 * (uint64_t)rows * awl_attention_dropout_chunks(S));
    return d;
}

/* ---- the composed computation ------------------------------------------------------ */

/* (T, S) in like's dtype and device: 1 where key j lies after query i,
 * which sits at position offset + i (0 but over a key/value cache). */
static awl_tensor *causal_mask(awl_tensor *like, int64_t T, int64_t S, int64_t offset)
{
    char device[32];
    double *m = awl_xmalloc((size_t)(T * S > 0 ? T * S : 1) * sizeof *m);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < S; j++) m[i * S + j] = j > offset + i ? 1.0 : 0.0;
    awl_tensor *mask =
        awl_tensor_cast(awl_from_data(m, AWL_SHAPE(T, S), AWL_F64,
                                      awl_tensor_device_name(like, device, sizeof device)),
                        like->dtype);
    free(m);
    return mask;
}

/* q k^T * scale, causally masked when causal (query i at position offset
 * + i): q (..., T, D), k (..., S, D) -> (..., T, S). */
static awl_tensor *attention_scores(awl_tensor *q, awl_tensor *k, double scale, bool causal,
                                    int64_t offset)
{
    awl_tensor *s = awl_mul_scalar(awl_matmul(q, awl_transpose(k, -2, -1)), scale);
    if (causal && s)
        s = awl_masked_fill(s, causal_mask(s, q->shape[q->ndim - 2], k->shape[k->ndim - 2], offset),
                            -INFINITY);
    return s;
}

/* softmax(q k^T * scale, masked): q (..., T, D), k (..., S, D) -> (..., T, S). */
static awl_tensor *attention_weights(awl_tensor *q, awl_tensor *k, double scale, bool causal)
{
    return awl_softmax(attention_scores(q, k, scale, causal, 0), -1);
}

/* p (..., T, S) times the multipliers of attention dropout draw d
 * (common/dropout.h), built on the host: the composed path's dropout, taken
 * only where no fused kernel runs. */
static awl_tensor *attention_dropout(awl_tensor *p, const awl_dropout_args *d)
{
    if (!p) return NULL;
    const int64_t S = p->shape[p->ndim - 1], rows = S ? awl_numel(p) / S : 0;
    const uint32_t threshold = awl_attention_dropout_threshold(d->p);
    const float scale = (float)awl_attention_dropout_scale(threshold);
    float *m = awl_xmalloc((size_t)(rows * S > 0 ? rows * S : 1) * sizeof *m);
    for (int64_t r = 0; r < rows; r++)
        awl_attention_dropout_multipliers(m + r * S, S, d->seed, d->offset, (uint64_t)r, S,
                                          threshold, scale);
    char device[32];
    awl_tensor *mask =
        awl_tensor_cast(awl_from_data(m, p->ndim, p->shape, AWL_F32,
                                      awl_tensor_device_name(p, device, sizeof device)),
                        p->dtype);
    free(m);
    return awl_mul(p, mask);
}

static awl_tensor *sdpa_composed(awl_tensor *q, awl_tensor *k, awl_tensor *v, double scale,
                                 bool causal, const awl_dropout_args *drop)
{
    awl_tensor *p = attention_weights(q, k, scale, causal);
    if (drop) p = attention_dropout(p, drop);
    return awl_matmul(p, v);
}

/* The gradient formula of the header comment, as differentiable ops; each
 * of dq, dk, dv may be NULL when not wanted. With dropout (mask M, kept
 * weights scaled by s), dv = (s M P)^T dO and dP = s M (dO v^T); dS keeps
 * its form, since rowsum(dP * P) is still the dot product the dropped
 * softmax's backward needs. */
static void sdpa_grad_composed(awl_tensor *q, awl_tensor *k, awl_tensor *v, awl_tensor *dout,
                               double scale, bool causal, const awl_dropout_args *drop,
                               awl_tensor **dq, awl_tensor **dk, awl_tensor **dv)
{
    awl_tensor *p = attention_weights(q, k, scale, causal);
    if (dv) *dv = awl_matmul(awl_transpose(drop ? attention_dropout(p, drop) : p, -2, -1), dout);
    awl_tensor *dp = awl_matmul(dout, awl_transpose(v, -2, -1));
    if (drop) dp = attention_dropout(dp, drop);
    awl_tensor *ds = awl_mul(p, awl_sub(dp, awl_sum(awl_mul(dp, p), AWL_DIMS(-1), true)));
    if (dq) *dq = awl_mul_scalar(awl_matmul(ds, k), scale);
    if (dk) *dk = awl_mul_scalar(awl_matmul(awl_transpose(ds, -2, -1), q), scale);
}

/* ---- kernel views -------------------------------------------------------------------- */

/* Heads of a contiguous (B, T, W) tensor: columns [offset, offset + H*D) as
 * a (B, H, T, D) view. */
static awl_tensor *heads_view(awl_tensor *t, int n_head, int64_t offset, int64_t D)
{
    int64_t B = t->shape[0], T = t->shape[1], W = t->shape[2];
    return awl_tensor_as_strided(t, AWL_SHAPE(B, n_head, T, D), (int64_t[]){T * W, D, W, 1},
                                 t->offset + offset);
}

/* t itself when its last axis is contiguous (what the kernels need), else a
 * contiguous copy. */
static awl_tensor *rows_contiguous(awl_tensor *t)
{
    if (!t) return NULL;
    return t->strides[t->ndim - 1] == 1 || t->shape[t->ndim - 1] == 1 ? t
                                                                      : awl_tensor_contiguous(t);
}

/* A new (B, H, T, D) tensor whose memory is laid out (B, T, H, D). */
static awl_tensor *new_bthd(awl_tensor *like, int64_t B, int64_t H, int64_t T, int64_t D)
{
    awl_tensor *mem = awl_tensor_new_on(like, AWL_SHAPE(B, T, H, D), like->dtype);
    return awl_tensor_permute(mem, (int[]){0, 2, 1, 3});
}

/* ---- awl_scaled_dot_product_attention ------------------------------------------------ */

/* Saved: q, k, v, out, lse. */
static int sdpa_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const attn_ctx *c = awl_node_ctx(node);
    awl_tensor *q = awl_node_saved(node, 0), *k = awl_node_saved(node, 1),
               *v = awl_node_saved(node, 2), *out = awl_node_saved(node, 3),
               *lse = awl_node_saved(node, 4);
    if (!q || !k || !v || !out || !lse) return AWL_ERR_INVALID;
    if (!awl_is_grad_enabled() && awl_fused_available(AWL_KERNEL_ATTENTION_BACKWARD, q)) {
        int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
        awl_tensor *dq = new_bthd(q, B, H, T, D), *dk = new_bthd(q, B, H, T, D),
                   *dv = new_bthd(q, B, H, T, D);
        awl_tensor *qc = rows_contiguous(q), *kc = rows_contiguous(k), *vc = rows_contiguous(v),
                   *dout = rows_contiguous(grad);
        if (!dq || !dk || !dv || !qc || !kc || !vc || !dout) return AWL_ERR_INVALID;
        awl_attention_args args = {c->scale, c->causal, ctx_dropout(c)};
        int status = awl_tensor_attention_backward(dq, dk, dv, dout, qc, kc, vc, out, lse, &args);
        if (status != AWL_ERR_UNSUPPORTED) {
            awl_tensor *all[3] = {dq, dk, dv};
            for (int i = 0; i < 3; i++) grads[i] = awl_node_needs_grad(node, i) ? all[i] : NULL;
            return status;
        }
    }
    sdpa_grad_composed(q, k, v, grad, c->scale, c->causal, ctx_dropout(c),
                       awl_node_needs_grad(node, 0) ? &grads[0] : NULL,
                       awl_node_needs_grad(node, 1) ? &grads[1] : NULL,
                       awl_node_needs_grad(node, 2) ? &grads[2] : NULL);
    return AWL_OK;
}

static awl_tensor *sdpa_fused(awl_tensor *q, awl_tensor *k, awl_tensor *v, double scale,
                              bool causal, const awl_dropout_args *drop, bool *unsupported)
{
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
    *unsupported = false;
    awl_scope_begin();
    awl_tensor *qc = rows_contiguous(q), *kc = rows_contiguous(k), *vc = rows_contiguous(v);
    awl_tensor *out = new_bthd(q, B, H, T, D);
    awl_tensor *lse = awl_tensor_new_on(q, AWL_SHAPE(B, H, T), AWL_F32);
    bool ok = qc && kc && vc && out && lse;
    if (ok) {
        awl_attention_args args = {scale, causal, drop};
        int status = awl_tensor_attention_forward(out, lse, qc, kc, vc, &args);
        *unsupported = status == AWL_ERR_UNSUPPORTED;
        ok = status == AWL_OK;
    }
    if (!ok) out = NULL;
    awl_node *node = awl_node_record(out, "scaled_dot_product_attention", sdpa_backward, 3,
                                     (awl_tensor *[]){q, k, v}, sizeof(attn_ctx));
    if (node) {
        *(attn_ctx *)awl_node_ctx(node) =
            (attn_ctx){scale, causal, 0, drop ? *drop : (awl_dropout_args){0}};
        awl_node_save(node, q);
        awl_node_save(node, k);
        awl_node_save(node, v);
        awl_node_save_output(node, out);
        awl_node_save(node, lse);
    }
    out = awl_keep(out);
    awl_scope_end();
    return out;
}

awl_tensor *awl_scaled_dot_product_attention(awl_tensor *q, awl_tensor *k, awl_tensor *v,
                                             bool causal, double dropout_p)
{
    if (!q || !k || !v) return NULL;
    const char *op = "awl_scaled_dot_product_attention";
    char s1[AWL_MAX_DIMS * 24], s2[AWL_MAX_DIMS * 24], s3[AWL_MAX_DIMS * 24];
    bool ok = q->ndim >= 2 && k->ndim == q->ndim && v->ndim == q->ndim;
    for (int d = 0; ok && d < q->ndim - 2; d++)
        ok = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
    if (ok)
        ok = k->shape[k->ndim - 1] == q->shape[q->ndim - 1] &&
             v->shape[v->ndim - 2] == k->shape[k->ndim - 2];
    if (!ok) {
        awl_error(AWL_ERR_INVALID,
                  "%s: q %s, k %s, v %s: expected (..., T, D), (..., S, D), "
                  "(..., S, Dv)",
                  op, awl_shape_str(q, s1, sizeof s1), awl_shape_str(k, s2, sizeof s2),
                  awl_shape_str(v, s3, sizeof s3));
        return NULL;
    }
    if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) {
        awl_error(AWL_ERR_INVALID, "%s: dropout probability %g is outside [0, 1]", op, dropout_p);
        return NULL;
    }
    double scale = 1.0 / sqrt((double)q->shape[q->ndim - 1]);
    int64_t rows = 1; /* of the (..., T, S) weights */
    for (int i = 0; i < q->ndim - 1; i++) rows *= q->shape[i];
    awl_dropout_args d;
    const awl_dropout_args *drop = take_dropout(dropout_p, rows, k->shape[k->ndim - 2], &d);
    bool unsupported = true;
    awl_tensor *out = NULL;
    if (q->ndim == 4 && awl_same_shape(q, k) && awl_same_shape(q, v) &&
        awl_fused_available(AWL_KERNEL_ATTENTION_FORWARD, q) &&
        awl_check_same_device(op, q, k) == 0 && awl_check_same_device(op, q, v) == 0 &&
        q->dtype == k->dtype && q->dtype == v->dtype)
        out = sdpa_fused(q, k, v, scale, causal, drop, &unsupported);
    if (!out && unsupported) out = sdpa_composed(q, k, v, scale, causal, drop);
    return out;
}

/* ---- awl_attention_qkv: qkv (B, T, 3C) -> (B, T, C) ---------------------------------- */

/* q, k, v of qkv as differentiable views (B, H, T, D). */
static int split_heads(awl_tensor *qkv, int n_head, awl_tensor *out[3])
{
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3;
    for (int i = 0; i < 3; i++) {
        awl_tensor *part = awl_slice(qkv, 2, i * C, (i + 1) * C, 1);
        out[i] = awl_permute(awl_reshape(part, AWL_SHAPE(B, T, n_head, C / n_head)),
                             (int[]){0, 2, 1, 3});
        if (!out[i]) return AWL_ERR_INVALID;
    }
    return AWL_OK;
}

/* (B, H, T, D) -> (B, T, H*D). */
static awl_tensor *merge_heads(awl_tensor *y)
{
    if (!y) return NULL;
    return awl_reshape(awl_transpose(y, 1, 2),
                       AWL_SHAPE(y->shape[0], y->shape[2], y->shape[1] * y->shape[3]));
}

/* Saved: qkv, out, lse. */
static int attention_qkv_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const attn_ctx *c = awl_node_ctx(node);
    awl_tensor *qkv = awl_node_saved(node, 0), *out = awl_node_saved(node, 1),
               *lse = awl_node_saved(node, 2);
    if (!qkv || !out || !lse) return AWL_ERR_INVALID;
    int64_t C = qkv->shape[2] / 3, D = C / c->n_head;
    if (!awl_is_grad_enabled() && awl_fused_available(AWL_KERNEL_ATTENTION_BACKWARD, qkv)) {
        awl_tensor *qc = awl_tensor_contiguous(qkv), *dout = awl_tensor_contiguous(grad);
        awl_tensor *dqkv = awl_tensor_new_on(qkv, qkv->ndim, qkv->shape, qkv->dtype);
        if (!qc || !dout || !dqkv) return AWL_ERR_INVALID;
        int h = c->n_head;
        awl_attention_args args = {c->scale, c->causal, ctx_dropout(c)};
        int status = awl_tensor_attention_backward(
            heads_view(dqkv, h, 0, D), heads_view(dqkv, h, C, D), heads_view(dqkv, h, 2 * C, D),
            heads_view(dout, h, 0, D), heads_view(qc, h, 0, D), heads_view(qc, h, C, D),
            heads_view(qc, h, 2 * C, D), heads_view(out, h, 0, D), lse, &args);
        if (status != AWL_ERR_UNSUPPORTED) {
            grads[0] = dqkv;
            return status;
        }
    }
    awl_tensor *qkv_heads[3], *d[3] = {NULL, NULL, NULL};
    if (split_heads(qkv, c->n_head, qkv_heads) < 0) return AWL_ERR_INVALID;
    awl_tensor *dout =
        awl_permute(awl_reshape(grad, AWL_SHAPE(grad->shape[0], grad->shape[1], c->n_head, D)),
                    (int[]){0, 2, 1, 3});
    sdpa_grad_composed(qkv_heads[0], qkv_heads[1], qkv_heads[2], dout, c->scale, c->causal,
                       ctx_dropout(c), &d[0], &d[1], &d[2]);
    for (int i = 0; i < 3; i++) d[i] = merge_heads(d[i]);
    grads[0] = awl_concat(3, d, 2);
    return AWL_OK;
}

static awl_tensor *attention_qkv_fused(awl_tensor *qkv, int n_head, bool causal, double scale,
                                       const awl_dropout_args *drop, bool *unsupported)
{
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, D = C / n_head;
    *unsupported = false;
    awl_scope_begin();
    awl_tensor *qc = awl_tensor_contiguous(qkv);
    awl_tensor *out = awl_tensor_new_on(qkv, AWL_SHAPE(B, T, C), qkv->dtype);
    awl_tensor *lse = awl_tensor_new_on(qkv, AWL_SHAPE(B, n_head, T), AWL_F32);
    bool ok = qc && out && lse;
    if (ok) {
        awl_attention_args args = {scale, causal, drop};
        int status = awl_tensor_attention_forward(
            heads_view(out, n_head, 0, D), lse, heads_view(qc, n_head, 0, D),
            heads_view(qc, n_head, C, D), heads_view(qc, n_head, 2 * C, D), &args);
        *unsupported = status == AWL_ERR_UNSUPPORTED;
        ok = status == AWL_OK;
    }
    if (!ok) out = NULL;
    awl_node *node =
        awl_node_record(out, "attention_qkv", attention_qkv_backward, 1, &qkv, sizeof(attn_ctx));
    if (node) {
        *(attn_ctx *)awl_node_ctx(node) =
            (attn_ctx){scale, causal, n_head, drop ? *drop : (awl_dropout_args){0}};
        awl_node_save(node, qkv);
        awl_node_save_output(node, out);
        awl_node_save(node, lse);
    }
    out = awl_keep(out);
    awl_scope_end();
    return out;
}

awl_tensor *awl_attention_qkv(awl_tensor *qkv, int n_head, bool causal, double dropout_p)
{
    if (!qkv) return NULL;
    char s[AWL_MAX_DIMS * 24];
    if (qkv->ndim != 3 || n_head <= 0 || qkv->shape[2] % (3 * (int64_t)n_head) != 0) {
        awl_error(AWL_ERR_INVALID,
                  "awl_attention_qkv: qkv %s must be (B, T, 3C) with C a "
                  "multiple of n_head (%d)",
                  awl_shape_str(qkv, s, sizeof s), n_head);
        return NULL;
    }
    if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) {
        awl_error(AWL_ERR_INVALID, "awl_attention_qkv: dropout probability %g is outside [0, 1]",
                  dropout_p);
        return NULL;
    }
    double scale = 1.0 / sqrt((double)(qkv->shape[2] / 3 / n_head));
    const int64_t T = qkv->shape[1];
    awl_dropout_args d;
    const awl_dropout_args *drop = take_dropout(dropout_p, qkv->shape[0] * n_head * T, T, &d);
    bool unsupported = true;
    awl_tensor *out = NULL;
    if (awl_fused_available(AWL_KERNEL_ATTENTION_FORWARD, qkv) && awl_dtype_is_float(qkv->dtype))
        out = attention_qkv_fused(qkv, n_head, causal, scale, drop, &unsupported);
    if (out || !unsupported) return out;
    awl_tensor *heads[3];
    if (split_heads(qkv, n_head, heads) < 0) return NULL;
    return merge_heads(sdpa_composed(heads[0], heads[1], heads[2], scale, causal, drop));
}

/* ---- attention over a key/value cache (generation) ------------------------------------- */

/* What a hidden key scores: not -infinity, so that a padding position,
 * which may see no key at all, still gets finite (unused) values; a NaN
 * there would reach the real positions through 0 * NaN in the product with
 * v. Representable in float32 and bfloat16, and far below any real score. */
#define HIDDEN_KEY_SCORE (-1e30)

static int check_cache(const awl_tensor *qkv, int n_head, const awl_attention_cache *c)
{
    char s1[AWL_MAX_DIMS * 24], s2[AWL_MAX_DIMS * 24];
    bool ok = qkv->ndim == 3 && n_head > 0 && qkv->shape[2] % (3 * (int64_t)n_head) == 0 && c->k &&
              c->v && c->k->ndim == 4 && awl_same_shape(c->k, c->v);
    if (ok) {
        int64_t C = qkv->shape[2] / 3;
        const int64_t *k = c->k->shape;
        ok = k[0] == qkv->shape[0] && k[1] == n_head && k[3] == C / n_head && c->length >= 0 &&
             c->length + qkv->shape[1] <= k[2] && c->k->dtype == qkv->dtype &&
             c->v->dtype == qkv->dtype;
    }
    if (!ok)
        return awl_error(AWL_ERR_INVALID,
                         "awl_attention_qkv_cached: qkv %s (n_head %d) does not fit the cache "
                         "%s holding %lld: expected qkv (B, T, 3C), a cache (B, n_head, "
                         "capacity, C / n_head) of its dtype with room for T more",
                         awl_shape_str(qkv, s1, sizeof s1), n_head,
                         c->k ? awl_shape_str(c->k, s2, sizeof s2) : "(none)",
                         (long long)c->length);
    return AWL_OK;
}

/* The new tokens' keys and values (views of qkv) into the cache at
 * [length, length + T). */
static int cache_append(awl_tensor *qkv, int n_head, awl_attention_cache *c)
{
    int64_t T = qkv->shape[1], C = qkv->shape[2] / 3, D = C / n_head;
    int64_t start = c->length, stop = start + T;
    int status =
        awl_tensor_copy_(awl_tensor_slice(c->k, 2, start, stop, 1), heads_view(qkv, n_head, C, D));
    if (status == AWL_OK)
        status = awl_tensor_copy_(awl_tensor_slice(c->v, 2, start, stop, 1),
                                  heads_view(qkv, n_head, 2 * C, D));
    return status;
}

awl_tensor *awl_attention_qkv_cached(awl_tensor *qkv, int n_head, awl_attention_cache *cache)
{
    if (!qkv || !cache || check_cache(qkv, n_head, cache) < 0) return NULL;
    int64_t T = qkv->shape[1], D = qkv->shape[2] / 3 / n_head;
    int64_t past = cache->length, S = past + T;
    awl_no_grad_begin();
    awl_scope_begin();
    awl_tensor *x = awl_tensor_contiguous(qkv), *out = NULL;
    if (x && cache_append(x, n_head, cache) == AWL_OK) {
        if (past == 0 && !cache->key_mask) {
            /* the cache holds these tokens alone: ordinary attention (fused
             * where the device has the kernel) */
            out = awl_attention_qkv(x, n_head, true, 0.0);
        } else {
            /* query i sits at position past + i; one query sees every key.
             * The queries get a (B, H, T, D) block of their own: as a view
             * of qkv their batch and head axes do not merge into one batch
             * axis, and CUDA's product then runs one batched call per row
             * of the batch instead of one for all of them. */
            awl_tensor *s = attention_scores(awl_tensor_contiguous(heads_view(x, n_head, 0, D)),
                                             awl_tensor_slice(cache->k, 2, 0, S, 1),
                                             1.0 / sqrt((double)D), T > 1, past);
            if (cache->key_mask)
                s = awl_masked_fill(s, awl_tensor_slice(cache->key_mask, 3, 0, S, 1),
                                    HIDDEN_KEY_SCORE);
            out =
                merge_heads(awl_matmul(awl_softmax(s, -1), awl_tensor_slice(cache->v, 2, 0, S, 1)));
        }
    }
    if (out) cache->length = S;
    out = awl_keep(out);
    awl_scope_end();
    awl_no_grad_end();
    return out;
}

/* ---- the layer -------------------------------------------------------------------------- */

typedef struct attention_layer {
    awl_module base;
    awl_module *c_attn, *c_proj;
    int n_head;
    double dropout;
    awl_attention_cache *cache; /* during generation; NULL otherwise */
} attention_layer;

/* x (B, T, C) -> (B, T, C), before the output dropout. */
awl_tensor *awl_nn_attention_branch(awl_module *self, awl_tensor *x, double *p)
{
    attention_layer *a = (attention_layer *)self;
    *p = self->training ? a->dropout : 0.0;
    awl_tensor *qkv = awl_module_forward(a->c_attn, x);
    awl_tensor *y = a->cache ? awl_attention_qkv_cached(qkv, a->n_head, a->cache)
                             : awl_attention_qkv(qkv, a->n_head, true, *p);
    return awl_module_forward(a->c_proj, y);
}

static awl_tensor *attention_forward(awl_module *self, awl_tensor *x)
{
    double p;
    awl_tensor *y = awl_nn_attention_branch(self, x, &p);
    return awl_dropout(y, p, self->training);
}

int awl_causal_self_attention_set_cache(awl_module *attn, awl_attention_cache *cache)
{
    if (!attn || strcmp(attn->type, "CausalSelfAttention") != 0)
        return awl_error(AWL_ERR_INVALID,
                         "awl_causal_self_attention_set_cache: %s is not a CausalSelfAttention",
                         attn ? attn->type : "(null)");
    ((attention_layer *)attn)->cache = cache;
    return AWL_OK;
}

awl_module *awl_causal_self_attention_new(int64_t n_embd, int n_head, double dropout, bool bias,
                                          const char *device)
{
    if (n_head <= 0 || n_embd <= 0 || n_embd % n_head != 0 || !(dropout >= 0.0 && dropout < 1.0)) {
        awl_error(AWL_ERR_INVALID,
                  "awl_causal_self_attention_new: n_embd %lld, n_head %d, dropout "
                  "%g: n_embd must be a positive multiple of n_head and dropout "
                  "in [0, 1)",
                  (long long)n_embd, n_head, dropout);
        return NULL;
    }
    attention_layer *a = (attention_layer *)awl_module_alloc(sizeof *a, "CausalSelfAttention",
                                                             attention_forward, NULL);
    a->n_head = n_head;
    a->dropout = dropout;
    a->c_attn = awl_linear_new(n_embd, 3 * n_embd, bias, device);
    a->c_proj = awl_linear_new(n_embd, n_embd, bias, device);
    return awl_module_with_children(&a->base, 2, (const char *[]){"c_attn", "c_proj"},
                                    (awl_module *[]){a->c_attn, a->c_proj});
}
