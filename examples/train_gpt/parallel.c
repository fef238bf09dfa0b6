/*
 * examples/train_gpt/parallel.c - one training step's verbs, whatever runs
 * it: one process, DDP, ZeRO or a tensor-parallel split (train_gpt.h says
 * which the trainer holds). The loop in train.c calls these and no more.
 *
 * A checkpoint is always one whole model: with --tensor-parallel the
 * pieces (and the optimizer's state) are gathered into it first, and a
 * resume cuts them again (go_parallel in main.c), so checkpoints move
 * freely between one process, DDP, ZeRO and any split.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_gpt.h"

int set_lr(trainer *t, double lr)
{
    return t->zero ? awl_zero_set_lr(t->zero, lr) : awl_optimizer_set_lr(t->opt, lr);
}

awl_tensor *model_loss(trainer *t, awl_tensor *x, awl_tensor *y, double scale)
{
    if (!t->tp_model) return awl_gpt_loss_scaled(t->model, x, y, scale);
    awl_tensor *loss = awl_tp_gpt_loss(t->tp_model, x, y);
    return scale != 1.0 ? awl_mul_scalar(loss, scale) : loss;
}

void accumulate_locally(trainer *t, bool on)
{
    if (t->zero) on ? awl_zero_no_sync_begin(t->zero) : awl_zero_no_sync_end(t->zero);
    if (t->ddp) on ? awl_ddp_no_sync_begin(t->ddp) : awl_ddp_no_sync_end(t->ddp);
}

int wait_gradients(trainer *t)
{
    if (t->zero) return awl_zero_wait(t->zero);
    return t->ddp ? awl_ddp_wait(t->ddp) : 0;
}

double gradient_wait_seconds(const trainer *t)
{
    if (t->zero) {
        awl_zero_stats st;
        awl_zero_get_stats(t->zero, &st);
        return st.wait_s;
    }
    awl_ddp_stats st = {0};
    if (t->ddp) awl_ddp_get_stats(t->ddp, &st);
    return st.wait_s;
}

double clip_gradients(trainer *t, double max_norm)
{
    if (t->zero) return awl_zero_clip_grad_norm(t->zero, max_norm);
    if (t->tp_model) return awl_tp_gpt_clip_grad_norm(t->tp_model, max_norm);
    /* the clipping factor goes to the next step, which applies it as the
     * fused AdamW kernel reads the gradients: no pass that scales them */
    return awl_optimizer_clip_grad_norm(t->opt, max_norm);
}

int optimizer_step(trainer *t)
{
    return t->zero ? awl_zero_step(t->zero) : awl_optimizer_step(t->opt);
}

int zero_gradients(trainer *t)
{
    if (t->zero) return awl_zero_zero_grad(t->zero);
    if (t->ddp) return awl_ddp_zero_grad(t->ddp); /* keep the bucket views */
    return awl_optimizer_zero_grad_ex(t->opt, true); /* set_to_none, as PyTorch */
}

/* ---- the whole model, from the pieces ---------------------------------------------- */

static const char *const moments[2] = {".exp_avg", ".exp_avg_sq"};

/* The state tensor of `o` named "<param><suffix>". */
static awl_tensor *state_of(const awl_optimizer *o, const char *param, const char *suffix)
{
    size_t n = strlen(param);
    for (int i = 0; i < awl_optimizer_num_states(o); i++) {
        const char *name;
        awl_tensor *s = awl_optimizer_state(o, i, &name);
        if (strncmp(name, param, n) == 0 && strcmp(name + n, suffix) == 0) return s;
    }
    return NULL;
}

int tp_take_state(trainer *t, const awl_optimizer *whole)
{
    const awl_param_list *p = trained_params(t);
    for (int i = 0; i < p->count; i++)
        for (int m = 0; m < 2; m++) {
            awl_tensor *from = state_of(whole, p->items[i].name, moments[m]);
            awl_tensor *to = state_of(t->opt, p->items[i].name, moments[m]);
            if (!from || !to || awl_tp_gpt_cut_piece(t->tp_model, p->items[i].name, from, to) < 0)
                return -1;
        }
    awl_optimizer_set_step_count(t->opt, awl_optimizer_step_count(whole));
    for (int i = 0; i < awl_optimizer_num_params(t->opt); i++)
        awl_optimizer_set_param_step(t->opt, i, awl_optimizer_param_step(whole, 0));
    return 0;
}

awl_optimizer *whole_optimizer(trainer *t)
{
    if (!t->tp_model) return t->opt;
    const settings *s = &t->s;
    if (awl_tp_gpt_gather(t->tp_model, t->model) < 0) return NULL;
    awl_optimizer *whole = awl_adamw_new(awl_gpt_parameters(t->model), awl_optimizer_get_lr(t->opt),
                                         s->beta1, s->beta2, 1e-8, s->weight_decay);
    const awl_param_list *p = trained_params(t);
    int status = whole ? 0 : -1;
    for (int i = 0; i < p->count && status == 0; i++)
        for (int m = 0; m < 2 && status == 0; m++) {
            awl_tensor *piece = state_of(t->opt, p->items[i].name, moments[m]);
            awl_tensor *all = state_of(whole, p->items[i].name, moments[m]);
            status = piece && all ? awl_tp_gpt_gather_piece(t->tp_model, p->items[i].name, piece, all)
                                  : -1;
        }
    if (status < 0) {
        awl_optimizer_free(whole);
        return NULL;
    }
    awl_optimizer_set_step_count(whole, awl_optimizer_step_count(t->opt));
    for (int i = 0; i < awl_optimizer_num_params(whole); i++)
        awl_optimizer_set_param_step(whole, i, awl_optimizer_param_step(t->opt, 0));
    return whole;
}

int gather_model(trainer *t) { return t->tp_model ? awl_tp_gpt_gather(t->tp_model, t->model) : 0; }

/* ---- the memory ledger ----------------------------------------------------------------- */

/* Bytes of the distinct storages behind tensors[0..n). */
static int64_t distinct_bytes(awl_tensor *const *tensors, int n)
{
    int64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        bool seen = !tensors[i];
        for (int j = 0; j < i && !seen; j++) seen = tensors[j] && tensors[j]->storage == tensors[i]->storage;
        if (!seen) bytes += (int64_t)tensors[i]->storage->nbytes;
    }
    return bytes;
}

void memory_ledger(trainer *t, memory_use *out)
{
    const awl_param_list *p = trained_params(t);
    awl_tensor **list = calloc((size_t)p->count + 1, sizeof *list);
    for (int i = 0; i < p->count; i++) list[i] = p->items[i].tensor;
    out->params = distinct_bytes(list, p->count);
    for (int i = 0; i < p->count; i++) list[i] = p->items[i].tensor->grad;
    out->grads = distinct_bytes(list, p->count);
    free(list);
    out->optimizer = 0;
    if (t->zero) {
        awl_zero_stats st;
        awl_zero_get_stats(t->zero, &st);
        out->grads = st.gradient_bytes;
        out->optimizer = st.optimizer_bytes;
    }
    for (int i = 0; t->opt && i < awl_optimizer_num_states(t->opt); i++) {
        awl_tensor *s = awl_optimizer_state(t->opt, i, NULL);
        out->optimizer += awl_numel(s) * (int64_t)awl_dtype_size(s->dtype);
    }
    awl_memory_stats mem;
    awl_memory_get_stats(t->s.device, &mem);
    out->peak = mem.peak;
}
