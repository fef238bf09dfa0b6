/*
 * nn/gpt.h - a nanoGPT-style GPT: token and position embeddings, pre-LN
 * transformer blocks, a final LayerNorm and a head tied to the token
 * embedding.
 *
 *     awl_gpt_config cfg;
 *     awl_gpt_config_named("cpu-small", &cfg);
 *     awl_gpt *model = awl_gpt_new(&cfg, "cpu", 1337);
 *     awl_scope_begin();
 *     awl_tensor *loss = awl_keep(awl_gpt_loss(model, x, y));   // x, y int32 (B, T)
 *     awl_scope_end();
 *     awl_backward(loss);
 *     ...                                                       // optimizer over
 * awl_gpt_parameters(model) awl_gpt_free(model);
 *
 * Parameter names are nanoGPT's (and Hugging Face GPT-2's):
 * transformer.wte.weight, transformer.wpe.weight, transformer.h.<i>.ln_1.weight,
 * ...attn.c_attn.weight, ...attn.c_proj.*, ...ln_2.*, ...mlp.c_fc.*,
 * ...mlp.c_proj.*, transformer.ln_f.*. The head's weight is the token
 * embedding and is listed once, as transformer.wte.weight.
 */
#ifndef AWL_NN_GPT_H
#define AWL_NN_GPT_H

#include "nn/nn.h"
#include "nn/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct awl_gpt_config {
    int vocab; /* vocabulary size                                    */
    int block; /* context length                                     */
    int n_layer;
    int n_head;
    int n_embd; /* a multiple of n_head                               */
    int batch;  /* the configuration's batch size (used by trainers)  */
    double dropout;
    bool bias; /* biases in Linear and LayerNorm (nanoGPT: true)     */
} awl_gpt_config;

/* The configurations of DESIGN.md: "cpu-small", "cpu-medium",
 * "shakespeare-char", "gpt2-124m". Returns 0, or negative for an unknown
 * name (listing the known ones). Dropout is 0 except for shakespeare-char
 * (0.2, as nanoGPT's config). */
int awl_gpt_config_named(const char *name, awl_gpt_config *out);

/* Number of parameters a configuration has (tied head counted once). */
int64_t awl_gpt_config_num_params(const awl_gpt_config *cfg);

/* Training FLOPs per token, for MFU: 6 N + 12 n_layer block n_embd
 * (PaLM's estimate, as nanoGPT's estimate_mfu, with N = all parameters). */
double awl_gpt_flops_per_token(const awl_gpt_config *cfg);

/* The best FLOP/s of awl's own matmul in dtype on device, measured now
 * (awl_measure_matmul_rate, tensor/profiler.h): the sgemm ceiling a run is
 * compared with. MFU is not measured against it but against the device's
 * fixed peak, awl_device_peak_flops, so that it cannot read above 100%. */
double awl_gpt_matmul_rate(const char *device, awl_dtype dtype);

/* The configuration as one JSON object (the "config" entry of a
 * checkpoint, which Python tools read too):
 *   {"vocab":65,"block":64,"n_layer":4,"n_head":4,"n_embd":128,
 *    "batch":16,"dropout":0,"bias":true}
 * written into buf[0..size). Returns 0, or AWL_ERR_INVALID when it does not
 * fit. */
int awl_gpt_config_to_json(const awl_gpt_config *cfg, char *buf, size_t size);

/* Parses that object strictly: the keys above, each at most once (vocab,
 * block, n_layer, n_head and n_embd required; batch 1, dropout 0 and bias
 * true when absent), integers in [1, 2^31 - 1], dropout in [0, 1), n_embd
 * a multiple of n_head, nothing after the object. Returns 0 and fills *out,
 * or AWL_ERR_FORMAT naming the byte offset and the key (*out untouched). */
int awl_gpt_config_from_json(const char *json, awl_gpt_config *out);

typedef struct awl_gpt awl_gpt;

/* Builds and initialises a model on device (NULL: "cpu"). Initialisation
 * draws from the Philox stream (seed, 0) and leaves the global generator as
 * it was: seed training-time randomness (dropout) with awl_manual_seed.
 * Init: N(0, 0.02) for Linear and Embedding weights, N(0, 0.02 / sqrt(2
 * n_layer)) for the residual projections (attn.c_proj, mlp.c_proj), zero
 * biases, LayerNorm weight 1 and bias 0. Returns NULL after an error. */
awl_gpt *awl_gpt_new(const awl_gpt_config *cfg, const char *device, uint64_t seed);

/* Frees the model and its parameters. NULL is a no-op. */
void awl_gpt_free(awl_gpt *model);

/* The configuration the model was built with. */
const awl_gpt_config *awl_gpt_get_config(const awl_gpt *model);

/* The root module: train/eval (awl_module_train), awl_module_to, printing
 * names. The model owns it. */
awl_module *awl_gpt_module(awl_gpt *model);

/* The parameters, named as in the header comment, in nanoGPT's order. The
 * list belongs to the model and stays valid until awl_gpt_free; it is
 * refreshed when the module's parameters were replaced (awl_module_to). */
const awl_param_list *awl_gpt_parameters(awl_gpt *model);

/* Number of parameters (the tied head counted once). */
int64_t awl_gpt_num_params(const awl_gpt *model);

/* idx int32 (B, T) with T <= block -> logits (B, T, vocab), owned by the
 * current scope. */
awl_tensor *awl_gpt_forward(awl_gpt *model, awl_tensor *idx);

/* Mean cross-entropy of the next-token prediction: idx, targets int32
 * (B, T) -> scalar (targets equal to -1 are ignored). */
awl_tensor *awl_gpt_loss(awl_gpt *model, awl_tensor *idx, awl_tensor *targets);
/* scale times the loss as one op (awl_cross_entropy_scaled): gradient
 * accumulation's loss / n, whose gradient the forward can then write. */
awl_tensor *awl_gpt_loss_scaled(awl_gpt *model, awl_tensor *idx, awl_tensor *targets, double scale);

/* Checkpoint every block (autograd/checkpoint.h): activations of the blocks
 * are recomputed in backward instead of kept. Gradients are unchanged. */
void awl_gpt_set_checkpointing(awl_gpt *model, bool on);

/* Mixed precision (nn/autocast.c): with AWL_BF16, every forward of the
 * model (loss, evaluation, generation, recomputed checkpoint segments) runs
 * under bfloat16 autocast: Linear layers, attention and the head compute in
 * bfloat16 with float32 accumulation, while the parameters, their gradients
 * (and so the optimizer state), the residual stream, LayerNorm and the loss
 * stay float32. AWL_F32 (the default) turns it off. Returns 0, or negative:
 * for another dtype, or a device whose backend cannot compute in bfloat16
 * (the CPU backend stores bf16 but refuses arithmetic on it). */
int awl_gpt_set_autocast(awl_gpt *model, awl_dtype dtype);

/* The model's autocast dtype (AWL_F32 when off). */
awl_dtype awl_gpt_get_autocast(const awl_gpt *model);

/* Generation (a key/value cache, sampling, awl_gpt_generate) is in
 * nn/generate.h. */

/* ---- weights from other tools (nn/gpt_io.c) ---------------------------------------- */

/* The architecture of the GPT whose weights f holds, as PyTorch's nanoGPT
 * names them (a state_dict saved with safetensors, awl's own checkpoints
 * included): vocab and n_embd from transformer.wte.weight (or
 * lm_head.weight when only the tied head was kept), block from
 * transformer.wpe.weight, n_layer from the blocks present, bias from
 * transformer.ln_f.bias. Names may carry torch.compile's "_orig_mod."
 * prefix. Shapes cannot tell the number of heads: it comes from the file's
 * "config" metadata when it has one, else stays cfg->n_head; batch and
 * dropout stay the caller's. Returns 0 and updates *cfg, or a negative
 * status with a message naming the file. */
int awl_gpt_config_from_weights(const awl_safetensors *f, awl_gpt_config *cfg);

/* Copies the weights of f into model, converting float16, bfloat16 and
 * float64 to the parameters' dtype. A separate lm_head.weight must equal
 * the embedding (awl ties the head); causal-mask buffers (".attn.bias",
 * ".attn.masked_bias") and an awl checkpoint's optimizer state are
 * ignored; any other tensor, a missing parameter or a shape that differs
 * is an error, and then nothing has been changed. Returns 0 or a negative
 * status with a message naming the file and the tensor. */
int awl_gpt_load_weights(awl_gpt *model, const awl_safetensors *f);

#ifdef __cplusplus
}
#endif

#endif
