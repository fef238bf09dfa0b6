/*
 * nn/param.h - named parameters: the currency between modules, optimizers
 * and checkpoints.
 *
 * A module lists its parameters under the names PyTorch and Hugging Face use
 * ("transformer.h.0.attn.c_attn.weight"), so an optimizer can choose weight
 * decay by shape or name, a checkpoint can store tensors under names
 * PyTorch's safetensors loader understands, and a user can find a tensor by
 * the name printed in an error.
 */
#ifndef AWL_NN_PARAM_H
#define AWL_NN_PARAM_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One parameter: its full dotted name and the leaf tensor (requires grad). */
typedef struct awl_param {
    char *name;
    awl_tensor *tensor;
} awl_param;

/* An ordered list of parameters. The list owns its name strings and one
 * reference to each tensor. */
typedef struct awl_param_list {
    int count, capacity;
    awl_param *items;
} awl_param_list;

/* Appends (a copy of name, one more reference to t). Returns 0 or negative. */
int awl_param_list_add(awl_param_list *list, const char *name, awl_tensor *t);
/* The parameter named `name`, or NULL. */
awl_tensor *awl_param_list_find(const awl_param_list *list, const char *name);
/* Total number of elements. */
int64_t awl_param_list_numel(const awl_param_list *list);
/* Releases the tensors and names; the list is empty and reusable after. */
void awl_param_list_clear(awl_param_list *list);

#ifdef __cplusplus
}
#endif

#endif
