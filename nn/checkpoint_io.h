/*
 * nn/checkpoint_io.h - saving and resuming training: model parameters,
 * optimizer state and the trainer's own state in one safetensors file.
 *
 * (Not to be confused with activation checkpointing, autograd/checkpoint.c,
 * which trades compute for memory inside one step.)
 *
 * The file is an ordinary safetensors file (nn/safetensors.h):
 *   - each parameter under its nn/param.h name ("transformer.h.0.attn.c_attn.weight"),
 *     so `safetensors.torch.load_file` in Python reads the weights;
 *   - the optimizer's state under "optimizer.<param>.exp_avg" and so on;
 *   - metadata (all strings): "awl.format" = "checkpoint",
 *     "awl.format_version" = "2", "step", "rng.seed", "rng.offset",
 *     "data.seed", "data.position.train", "data.position.val", "tokenizer",
 *     "config", "optimizer" (sgd/adam/adamw), "optimizer.step_count",
 *     "optimizer.step.<param>" (each parameter's update count),
 *     "optimizer.lr" (the learning rate when saved, for reference),
 *     "extra.<key>" for the caller's own entries, "crc32.<tensor>", and
 *     "awl.metadata_crc32": the CRC-32 of every other entry (sorted by key,
 *     each as key NUL value NUL; the crc32.* entries left out, as their
 *     tensors check them), so an edited or corrupted metadata value is
 *     caught like a corrupted tensor byte. Version 1 files (the same
 *     without it) are still read.
 *
 *     awl_train_state st = {0};
 *     st.step = it;
 *     awl_rng_get_state(&st.rng_seed, &st.rng_offset);
 *     st.data_seed = awl_text_dataset_get_seed(ds);
 *     st.data_position[AWL_SPLIT_TRAIN] = awl_text_dataset_get_position(ds, AWL_SPLIT_TRAIN);
 *     awl_train_state_set_tokenizer(&st, tokenizer_string);
 *     awl_train_state_set_config(&st, "{\"n_layer\":4,...}");
 *     if (awl_checkpoint_save("ckpt.safetensors", params, opt, &st) < 0) ...
 *     awl_train_state_clear(&st);
 *
 *     awl_train_state in = {0};
 *     if (awl_checkpoint_load("ckpt.safetensors", params, opt, &in) < 0) ...
 *     awl_rng_set_state(in.rng_seed, in.rng_offset);  // the caller restores what it owns
 *     ...
 *     awl_train_state_clear(&in);
 *
 * Saving is crash-safe (a temporary file, fsync, rename) and refuses a
 * tensor holding NaN or infinity (a checkpoint is something to go back to,
 * and a non-finite weight never trains back); loading checks
 * the whole file first (every offset, dtype, shape and CRC, every name
 * against the model and optimizer) and changes nothing unless all of it is
 * right. A checkpoint resumes bitwise: the same weights, optimizer state,
 * step counts, RNG and data positions give the same next step.
 */
#ifndef AWL_NN_CHECKPOINT_IO_H
#define AWL_NN_CHECKPOINT_IO_H

#include <stdint.h>

#include "nn/optim.h"
#include "nn/param.h"
#include "nn/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a trainer needs besides weights and optimizer state to continue a
 * run exactly. The strings are owned by the struct (set them with the
 * setters, free them with awl_train_state_clear); start from {0}. */
typedef struct awl_train_state {
    int64_t step;              /* training iterations completed                */
    uint64_t rng_seed;         /* the global generator (awl_rng_get_state)     */
    uint64_t rng_offset;       /* with rng_seed                                */
    uint64_t data_seed;        /* the batch sampler (awl_text_dataset_get_seed) */
    uint64_t data_position[2]; /* batches drawn: [0] train, [1] validation     */
    char *tokenizer;           /* awl_tokenizer_serialize's string, or NULL    */
    char *config_json;         /* the model configuration as JSON, or NULL     */
    int n_extra;               /* any other entries, e.g. "best_val_loss"      */
    char **extra_keys, **extra_values;
} awl_train_state;

/* Copies a string into the state (NULL removes it). Returns 0. */
int awl_train_state_set_tokenizer(awl_train_state *s, const char *tokenizer);
int awl_train_state_set_config(awl_train_state *s, const char *config_json);
/* Adds or replaces an extra entry (stored as metadata "extra.<key>"). */
int awl_train_state_set_extra(awl_train_state *s, const char *key, const char *value);
/* The value of an extra entry, or NULL. */
const char *awl_train_state_get_extra(const awl_train_state *s, const char *key);
/* Frees the strings and zeroes the struct. */
void awl_train_state_clear(awl_train_state *s);

/* Writes params, opt's state (opt may be NULL: weights only) and state
 * (may be NULL) to path, crash-safely: on failure path is unchanged.
 * Returns 0, AWL_ERR_INVALID (bad names or strings, or a tensor holding NaN
 * or infinity, named with the element: nothing is written), AWL_ERR_IO or
 * a device error. */
int awl_checkpoint_save(const char *path, const awl_param_list *params, const awl_optimizer *opt,
                        const awl_train_state *state);

/* Reads path into the existing parameter tensors (on any device; dtypes and
 * shapes must match exactly) and, when opt is not NULL, into the
 * optimizer's state tensors and step counts (the optimizer must be of the
 * kind that wrote the file; its hyper-parameters are the caller's and are
 * not changed); fills *state_out (may be NULL), overwriting it without
 * freeing what it held. Every parameter must be in the file, and every
 * tensor of the file must be a parameter or (when opt is not NULL) a state
 * of opt; the optimizer's tensors are ignored when opt is NULL. A file
 * without awl's metadata (written by another tool) loads as weights only,
 * its CRCs checked where present.
 * Returns 0; AWL_ERR_IO when the file cannot be read; AWL_ERR_FORMAT, with
 * a message naming the file and the problem, when it is malformed, corrupt
 * or does not fit the model, in which case nothing has been changed; a
 * device error if a copy fails (then some tensors may have been loaded). */
int awl_checkpoint_load(const char *path, const awl_param_list *params, awl_optimizer *opt,
                        awl_train_state *state_out);

/* The train state of an opened awl checkpoint, without touching any
 * tensor: what a trainer reads first to learn which model to build. Checks
 * the format, its version, every metadata value it parses and the
 * metadata CRC. Returns 0 and fills *out (overwritten, not freed: start
 * from {0}, free with awl_train_state_clear), or AWL_ERR_FORMAT with a
 * message naming the file (also when the file is not awl's). */
int awl_checkpoint_read_state(const awl_safetensors *f, awl_train_state *out);

/* The index (row-major) of the first NaN or infinity of a float tensor on
 * any device, with the value in *value; -1 when every element is finite
 * (or t is NULL or int32). What a saver or a trainer names when a value
 * went bad. */
int64_t awl_tensor_first_non_finite(awl_tensor *t, double *value);

#ifdef __cplusplus
}
#endif

#endif
