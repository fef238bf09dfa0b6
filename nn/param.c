/*
 * nn/param.c - the named parameter list (see param.h).
 */
#include "nn/param.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

int awl_param_list_add(awl_param_list *list, const char *name, awl_tensor *t)
{
    if (!list || !name || !t) return AWL_ERR_INVALID;
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? 2 * list->capacity : 16;
        list->items = awl_xrealloc(list->items, (size_t)list->capacity * sizeof *list->items);
    }
    size_t len = strlen(name) + 1;
    char *copy = awl_xmalloc(len);
    memcpy(copy, name, len);
    list->items[list->count++] = (awl_param){copy, awl_retain(t)};
    return AWL_OK;
}

awl_tensor *awl_param_list_find(const awl_param_list *list, const char *name)
{
    for (int i = 0; list && i < list->count; i++)
        if (strcmp(list->items[i].name, name) == 0) return list->items[i].tensor;
    return NULL;
}

int64_t awl_param_list_numel(const awl_param_list *list)
{
    int64_t n = 0;
    for (int i = 0; list && i < list->count; i++) n += awl_numel(list->items[i].tensor);
    return n;
}

void awl_param_list_clear(awl_param_list *list)
{
    if (!list) return;
    for (int i = 0; i < list->count; i++) {
        free(list->items[i].name);
        awl_release(list->items[i].tensor);
    }
    free(list->items);
    list->items = NULL;
    list->count = list->capacity = 0;
}
