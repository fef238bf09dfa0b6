/*
 * nn/module.c - the module tree: parameters, children, names, modes, devices.
 *
 * A module stores, for each parameter, a pointer to the field of its own
 * struct that holds the tensor (a "slot"). Layers then read their weights as
 * plain fields (lin->weight) in forward, while generic code (moving to a
 * device, casting, listing) walks the slots without knowing the layer's type.
 * Children are owned pointers with names; full parameter names are built by
 * joining names along the path, exactly as PyTorch's named_parameters does.
 *
 * Weight tying (GPT's head reuses the token embedding) is one tensor in two
 * slots. Listing and counting visit each tensor once, under its first name,
 * and moving a module keeps tied slots tied by mapping old tensors to new
 * ones.
 *
 * Parameters are created and replaced outside any caller's scope: every
 * tensor a module holds is a reference it owns, taken with awl_retain inside
 * a private scope, so building or moving a model in the middle of someone's
 * scope neither leaks nor frees their temporaries.
 */
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

static char *copy_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = awl_xmalloc(n);
    memcpy(c, s, n);
    return c;
}

awl_module *awl_module_alloc(size_t size, const char *type, awl_module_forward_fn forward,
                             void (*destroy)(awl_module *self))
{
    awl_module *m = awl_xcalloc(1, size < sizeof *m ? sizeof *m : size);
    m->type = type;
    m->forward = forward;
    m->destroy = destroy;
    m->training = true;
    return m;
}

static bool name_taken(const awl_module *m, const char *name)
{
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return true;
    for (int i = 0; i < m->n_children; i++)
        if (strcmp(m->children[i].name, name) == 0) return true;
    return false;
}

int awl_module_add_param(awl_module *m, const char *name, awl_tensor **slot)
{
    if (!m || !name || !slot) return AWL_ERR_INVALID;
    awl_tensor *t = *slot;
    int status = AWL_OK;
    if (!t)
        status = AWL_ERR_INVALID; /* the tensor's constructor recorded why */
    else if (name_taken(m, name))
        status = awl_error(AWL_ERR_INVALID,
                           "awl_module_add_param: %s already has a member "
                           "named '%s'",
                           m->type, name);
    else if (!awl_requires_grad_(t, true))
        status = AWL_ERR_INVALID;
    if (status < 0) {
        awl_release(t);
        *slot = NULL;
        return status;
    }
    awl_tensor_set_memory_role(t, AWL_MEMORY_PARAMETER);
    m->params = awl_xrealloc(m->params, (size_t)(m->n_params + 1) * sizeof *m->params);
    m->params[m->n_params++] = (awl_module_param){copy_string(name), slot};
    return AWL_OK;
}

int awl_module_new_param(awl_module *m, const char *name, awl_tensor **slot, int ndim,
                         const int64_t *shape, const char *device)
{
    if (!m || !slot) return AWL_ERR_INVALID;
    awl_scope_begin();
    *slot = awl_retain(awl_zeros(ndim, shape, AWL_F32, device));
    awl_scope_end();
    return awl_module_add_param(m, name, slot);
}

int awl_module_add_child(awl_module *m, const char *name, awl_module *child)
{
    if (!m || !name || !child) {
        awl_module_free(child);
        return AWL_ERR_INVALID;
    }
    if (name_taken(m, name)) {
        awl_module_free(child);
        return awl_error(AWL_ERR_INVALID,
                         "awl_module_add_child: %s already has a member "
                         "named '%s'",
                         m->type, name);
    }
    m->children = awl_xrealloc(m->children, (size_t)(m->n_children + 1) * sizeof *m->children);
    m->children[m->n_children++] = (awl_module_child){copy_string(name), child};
    return AWL_OK;
}

awl_module *awl_module_with_children(awl_module *m, int n, const char *const *names,
                                     awl_module *const *children)
{
    int status = m ? AWL_OK : AWL_ERR_INVALID;
    for (int i = 0; i < n; i++) {
        if (status == AWL_OK)
            status = awl_module_add_child(m, names[i], children[i]);
        else
            awl_module_free(children[i]);
    }
    if (status < 0) {
        awl_module_free(m);
        return NULL;
    }
    return m;
}

awl_tensor *awl_module_forward(awl_module *m, awl_tensor *x)
{
    if (!m || !x) return NULL;
    if (!m->forward) {
        awl_error(AWL_ERR_INVALID, "awl_module_forward: %s has no forward (a container)", m->type);
        return NULL;
    }
    return m->forward(m, x);
}

void awl_module_train(awl_module *m, bool on)
{
    if (!m) return;
    m->training = on;
    for (int i = 0; i < m->n_children; i++) awl_module_train(m->children[i].module, on);
}

/* ---- walking every slot ----------------------------------------------------------- */

typedef struct slot_list {
    awl_tensor ***slots;
    int count, capacity;
} slot_list;

static void collect_slots(awl_module *m, slot_list *out)
{
    for (int i = 0; i < m->n_params; i++) {
        if (out->count == out->capacity) {
            out->capacity = out->capacity ? 2 * out->capacity : 32;
            out->slots = awl_xrealloc(out->slots, (size_t)out->capacity * sizeof *out->slots);
        }
        out->slots[out->count++] = m->params[i].slot;
    }
    for (int i = 0; i < m->n_children; i++) collect_slots(m->children[i].module, out);
}

/* Replaces each distinct parameter tensor by convert(t) (a new leaf that
 * requires grad), keeping tied slots tied. */
typedef awl_tensor *(*convert_fn)(awl_tensor *t, const void *arg);

static int replace_params(awl_module *m, convert_fn convert, const void *arg)
{
    if (!m) return AWL_ERR_INVALID;
    slot_list all = {0};
    collect_slots(m, &all);
    awl_tensor **old = awl_xcalloc((size_t)(all.count > 0 ? all.count : 1), sizeof *old);
    for (int i = 0; i < all.count; i++) old[i] = *all.slots[i];
    int status = AWL_OK;
    for (int i = 0; i < all.count && status == AWL_OK; i++) {
        int first = 0;
        while (old[first] != old[i]) first++;
        if (first < i) { /* tied: take the tensor its first slot now holds */
            awl_tensor *shared = awl_retain(*all.slots[first]);
            awl_release(*all.slots[i]);
            *all.slots[i] = shared;
            continue;
        }
        awl_scope_begin();
        awl_tensor *fresh = awl_retain(convert(old[i], arg));
        awl_scope_end();
        if (!fresh) {
            status = AWL_ERR_INVALID;
        } else if (fresh != old[i]) {
            awl_tensor_set_memory_role(fresh, AWL_MEMORY_PARAMETER);
            awl_release(old[i]);
            *all.slots[i] = fresh;
        } else {
            awl_release(fresh);
        }
    }
    free(old);
    free(all.slots);
    return status;
}

static awl_tensor *convert_device(awl_tensor *t, const void *arg)
{
    const char *device = arg;
    awl_device want;
    if (awl_device_parse(device, &want) < 0) return NULL;
    if (awl_device_equal(want, t->storage->device)) return t;
    return awl_requires_grad_(awl_tensor_to_device(awl_tensor_detach(t), device), t->requires_grad);
}

static awl_tensor *convert_dtype(awl_tensor *t, const void *arg)
{
    awl_dtype dtype = *(const awl_dtype *)arg;
    if (t->dtype == dtype) return t;
    return awl_requires_grad_(awl_tensor_cast(awl_tensor_detach(t), dtype), t->requires_grad);
}

int awl_module_to(awl_module *m, const char *device)
{
    if (!m) return AWL_ERR_INVALID;
    awl_device parsed;
    if (awl_device_parse(device ? device : "cpu", &parsed) < 0) return AWL_ERR_INVALID;
    return replace_params(m, convert_device, device ? device : "cpu");
}

int awl_module_cast(awl_module *m, awl_dtype dtype)
{
    if (!m) return AWL_ERR_INVALID;
    if (!awl_dtype_is_float(dtype))
        return awl_error(AWL_ERR_INVALID,
                         "awl_module_cast: parameters must be a float dtype, "
                         "not %s",
                         awl_dtype_name(dtype));
    return replace_params(m, convert_dtype, &dtype);
}

/* ---- names ------------------------------------------------------------------------ */

static bool list_has(const awl_param_list *list, const awl_tensor *t)
{
    for (int i = 0; i < list->count; i++)
        if (list->items[i].tensor == t) return true;
    return false;
}

static int list_params(awl_module *m, const char *prefix, awl_param_list *out)
{
    int added = 0;
    size_t plen = strlen(prefix);
    for (int i = 0; i < m->n_params; i++) {
        awl_tensor *t = *m->params[i].slot;
        if (list_has(out, t)) continue;
        char *name = awl_xmalloc(plen + strlen(m->params[i].name) + 1);
        memcpy(name, prefix, plen);
        strcpy(name + plen, m->params[i].name);
        int status = awl_param_list_add(out, name, t);
        free(name);
        if (status < 0) return status;
        added++;
    }
    for (int i = 0; i < m->n_children; i++) {
        const char *cname = m->children[i].name;
        char *child_prefix = awl_xmalloc(plen + strlen(cname) + 2);
        memcpy(child_prefix, prefix, plen);
        strcpy(child_prefix + plen, cname);
        strcat(child_prefix, ".");
        int n = list_params(m->children[i].module, child_prefix, out);
        free(child_prefix);
        if (n < 0) return n;
        added += n;
    }
    return added;
}

int awl_module_parameters(awl_module *m, awl_param_list *out)
{
    if (!m || !out) return AWL_ERR_INVALID;
    return list_params(m, "", out);
}

int64_t awl_module_num_params(awl_module *m)
{
    awl_param_list list = {0};
    int64_t n = awl_module_parameters(m, &list) < 0 ? -1 : awl_param_list_numel(&list);
    awl_param_list_clear(&list);
    return n;
}

/* The direct member named by path's first component [path, end). */
static awl_module *child_named(awl_module *m, const char *name, size_t len)
{
    for (int i = 0; i < m->n_children; i++)
        if (strlen(m->children[i].name) == len && strncmp(m->children[i].name, name, len) == 0)
            return m->children[i].module;
    return NULL;
}

/* Walks all but the last component of path; *last points at that component. */
static awl_module *walk_to_parent(awl_module *m, const char *path, const char **last)
{
    const char *dot;
    while (m && (dot = strchr(path, '.')) != NULL) {
        m = child_named(m, path, (size_t)(dot - path));
        path = dot + 1;
    }
    *last = path;
    return m;
}

awl_tensor *awl_module_get_param(awl_module *m, const char *path)
{
    if (!m || !path) return NULL;
    const char *last;
    awl_module *parent = walk_to_parent(m, path, &last);
    for (int i = 0; parent && i < parent->n_params; i++)
        if (strcmp(parent->params[i].name, last) == 0) return *parent->params[i].slot;
    return NULL;
}

awl_module *awl_module_get_child(awl_module *m, const char *path)
{
    if (!m || !path) return NULL;
    const char *last;
    awl_module *parent = walk_to_parent(m, path, &last);
    return parent ? child_named(parent, last, strlen(last)) : NULL;
}

static void print_tree(FILE *f, const awl_module *m, const char *name, int depth)
{
    fprintf(f, "%*s%s%s%s\n", 2 * depth, "", name ? name : "", name ? ": " : "", m->type);
    for (int i = 0; i < m->n_params; i++) {
        const awl_tensor *t = *m->params[i].slot;
        char shape[AWL_MAX_DIMS * 24];
        fprintf(f, "%*s%s %s %s\n", 2 * depth + 2, "", m->params[i].name,
                awl_shape_str(t, shape, sizeof shape), awl_dtype_name(t->dtype));
    }
    for (int i = 0; i < m->n_children; i++)
        print_tree(f, m->children[i].module, m->children[i].name, depth + 1);
}

void awl_module_fprint(FILE *f, const awl_module *m)
{
    if (f && m) print_tree(f, m, NULL, 0);
}

void awl_module_zero_grad(awl_module *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) awl_clear_grad(*m->params[i].slot);
    for (int i = 0; i < m->n_children; i++) awl_module_zero_grad(m->children[i].module);
}

void awl_module_free(awl_module *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_children; i++) {
        awl_module_free(m->children[i].module);
        free(m->children[i].name);
    }
    for (int i = 0; i < m->n_params; i++) {
        awl_release(*m->params[i].slot);
        *m->params[i].slot = NULL;
        free(m->params[i].name);
    }
    if (m->destroy) m->destroy(m);
    free(m->children);
    free(m->params);
    free(m);
}
