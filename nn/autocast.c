/*
 * nn/autocast.c - mixed precision by automatic casting (PyTorch's autocast).
 *
 * Mixed precision keeps the parameters, their gradients and the optimizer
 * state in float32 (the "master weights") and runs the matrix products in
 * bfloat16 on tensor cores. Rather than a second copy of the model in
 * bfloat16, the layers cast at the point of use: while this thread's
 * autocast dtype is AWL_BF16, a Linear layer casts its float32 input,
 * weight and bias to bfloat16 through awl_cast, so the product runs in
 * bfloat16 (cuBLAS accumulates in float32) and awl_cast's backward hands
 * float32 gradients back to the parameters. What follows a Linear (GELU,
 * dropout, attention on c_attn's output) then runs in bfloat16 because its
 * input is bfloat16; where a bfloat16 branch meets the float32 residual
 * stream (Block's two additions), the branch is cast up, as PyTorch's type
 * promotion does. So the residual stream, LayerNorm's arithmetic and the
 * embeddings stay float32, and the fused kernels that read bfloat16
 * (softmax, cross-entropy, attention) accumulate in float32 internally. A
 * Block's two LayerNorms, whose outputs only its Linears read, hand those
 * Linears bfloat16 directly (awl_layer_norm_to: the kernel rounds its
 * float32 result on the way out, the Linear's cast's bits, without
 * the float32 output and the cast pass).
 *
 * The rule "modules autocast, functional ops compute in the dtype they are
 * given" keeps every functional op's contract simple: awl_linear on two
 * float32 tensors is a float32 product whatever the autocast state. Only
 * float32 is cast: float64 tensors (gradient checks) are left alone, as
 * PyTorch does.
 *
 * The state is per thread and is set and restored by value, which nests:
 *     awl_dtype before = awl_autocast_set(AWL_BF16);
 *     ... forward ...
 *     awl_autocast_set(before);
 * Anything that re-runs a forward later (activation checkpointing) must
 * re-establish the state it ran under; awl_gpt does for its blocks.
 *
 * Casting at the point of use costs a kernel per weight and bias (97 for
 * gpt2-124m: its 96 Linear weights and biases and the head's embedding,
 * most of them tiny biases whose launch costs more than their work). So a forward may first cast
 * the weights it will read all at once into the cache below (awl_autocast_cache), one kernel for
 * all of them, and the layers' awl_autocast then finds their casts there. Each cast keeps its own
 * cast node, so the gradients are the same as without the cache, bit for bit. A checkpointed
 * block's replay in backward runs after the forward has cleared the cache and casts as before.
 *
 * Kept casts remove even that kernel. The weights change only in the optimizer's step, so AdamW
 * can write each weight's bfloat16 copy in the pass that writes the weight (2 bytes more a
 * parameter, where the cast reads 4 and writes 2 again; awl_optimizer_keep_casts). After the
 * step it hands the copies over here (awl_autocast_keep), each with the weight's write count
 * (awl_tensor_version) at that moment, and while the count has not moved, the weight holds
 * exactly the values its copy was rounded from: the cache and awl_autocast then give the copy
 * (awl_cast_kept: the copy's storage with a cast node, so the gradients are the same as through
 * awl_cast). Any other write to the weight (a checkpoint loaded into it, a copy_, fill_ or
 * another optimizer) moves the count, and the weight is cast again as before. The table is the
 * process's, not the thread's, and holds a reference to both tensors until awl_autocast_forget.
 */
#include <pthread.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "nn/nn.h"

static _Thread_local awl_dtype autocast_dtype = AWL_F32;

/* The weight-cast cache: cast[i] is source[i] in the autocast dtype. */
static _Thread_local struct {
    int n;
    awl_tensor **source, **cast;
} cache;

awl_dtype awl_autocast_set(awl_dtype dtype)
{
    awl_dtype before = autocast_dtype;
    if (!awl_dtype_is_float(dtype)) {
        awl_error(AWL_ERR_INVALID,
                  "awl_autocast_set: %s is not a float dtype (float32 turns "
                  "autocast off, bfloat16 turns it on)",
                  awl_dtype_name(dtype));
        return before;
    }
    autocast_dtype = dtype;
    return before;
}

awl_dtype awl_autocast_get(void) { return autocast_dtype; }

/* ---- kept casts -------------------------------------------------------------------- */

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
struct kept_cast {
    awl_tensor *source, *cast; /* one reference each */
    uint64_t version;          /* source's write count when cast was written */
};
static struct kept_cast *kept;
static int n_kept, kept_cap;

int awl_autocast_keep(awl_tensor *source, awl_tensor *cast)
{
    if (!source || !cast) return AWL_ERR_INVALID;
    if (source->dtype != AWL_F32 || !awl_dtype_is_float(cast->dtype) || cast->dtype == AWL_F32 ||
        awl_numel(cast) != awl_numel(source) || !awl_is_contiguous(cast) ||
        !awl_same_device(source, cast)) {
        char ss[160], cs[160];
        return awl_error(AWL_ERR_INVALID,
                         "awl_autocast_keep: a kept cast is a contiguous copy of a float32 tensor "
                         "in a narrower float dtype, of its size and on its device; got a %s %s "
                         "source and a %s%s %s cast",
                         awl_dtype_name(source->dtype), awl_shape_str(source, ss, sizeof ss),
                         awl_is_contiguous(cast) ? "" : "non-contiguous ",
                         awl_dtype_name(cast->dtype), awl_shape_str(cast, cs, sizeof cs));
    }
    uint64_t version = awl_tensor_version(source);
    pthread_mutex_lock(&kept_lock);
    int i = 0;
    while (i < n_kept && kept[i].source != source) i++;
    if (i == n_kept) {
        if (n_kept == kept_cap) {
            kept_cap = kept_cap ? 2 * kept_cap : 64;
            kept = awl_xrealloc(kept, (size_t)kept_cap * sizeof *kept);
        }
        kept[n_kept++] = (struct kept_cast){awl_retain(source), NULL, 0};
    }
    awl_tensor *old = kept[i].cast;
    kept[i].cast = awl_retain(cast);
    kept[i].version = version;
    pthread_mutex_unlock(&kept_lock);
    awl_release(old);
    return AWL_OK;
}

void awl_autocast_forget(awl_tensor *source)
{
    awl_tensor *gone[2] = {NULL, NULL};
    pthread_mutex_lock(&kept_lock);
    for (int i = 0; i < n_kept; i++)
        if (kept[i].source == source) {
            gone[0] = kept[i].source;
            gone[1] = kept[i].cast;
            kept[i] = kept[--n_kept];
            break;
        }
    if (n_kept == 0) {
        free(kept);
        kept = NULL;
        kept_cap = 0;
    }
    pthread_mutex_unlock(&kept_lock);
    awl_release(gone[0]);
    awl_release(gone[1]);
}

/* t's kept cast in dtype, if it is still t's value (its write count has not moved since); a
 * reference the caller releases, or NULL. */
static awl_tensor *kept_cast_of(awl_tensor *t, awl_dtype dtype)
{
    awl_tensor *found = NULL;
    pthread_mutex_lock(&kept_lock);
    for (int i = 0; i < n_kept && !found; i++)
        if (kept[i].source == t && kept[i].cast->dtype == dtype &&
            kept[i].version == awl_tensor_version(t))
            found = awl_retain(kept[i].cast);
    pthread_mutex_unlock(&kept_lock);
    return found;
}

/* awl_cast(t, dtype), from t's kept cast where it is current. */
static awl_tensor *cast_or_kept(awl_tensor *t, awl_dtype dtype)
{
    awl_tensor *copy = kept_cast_of(t, dtype);
    if (!copy) return awl_cast(t, dtype);
    awl_tensor *out = awl_cast_kept(t, copy);
    awl_release(copy);
    return out;
}

/* ---- casting at the point of use ------------------------------------------------------ */

awl_tensor *awl_autocast(awl_tensor *t)
{
    if (!t || autocast_dtype == AWL_F32 || t->dtype != AWL_F32) return t;
    for (int i = 0; i < cache.n; i++)
        if (cache.source[i] == t && cache.cast[i]->dtype == autocast_dtype) return cache.cast[i];
    return cast_or_kept(t, autocast_dtype);
}

void awl_autocast_cache_clear(void)
{
    free(cache.source);
    free(cache.cast);
    cache.n = 0;
    cache.source = cache.cast = NULL;
}

int awl_autocast_cache(int n, awl_tensor *const *ts)
{
    awl_autocast_cache_clear();
    if (autocast_dtype == AWL_F32 || n <= 0) return AWL_OK;
    cache.source = awl_xmalloc((size_t)n * sizeof *cache.source);
    cache.cast = awl_xmalloc((size_t)n * sizeof *cache.cast);
    int m = 0; /* the float32 ones, each once */
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < m && !seen; j++) seen = cache.source[j] == ts[i];
        if (ts[i] && ts[i]->dtype == AWL_F32 && !seen) cache.source[m++] = ts[i];
    }
    /* those with a current kept cast take it; the rest are cast together, after them */
    int k = 0, status = AWL_OK;
    for (int i = 0; i < m && status >= 0; i++) {
        awl_tensor *copy = kept_cast_of(cache.source[i], autocast_dtype);
        if (!copy) continue;
        awl_tensor *s = cache.source[i];
        cache.source[i] = cache.source[k];
        cache.source[k] = s;
        cache.cast[k] = awl_cast_kept(s, copy);
        awl_release(copy);
        if (!cache.cast[k++]) status = AWL_ERR_INVALID;
    }
    if (status >= 0)
        status = awl_cast_many(m - k, cache.source + k, autocast_dtype, cache.cast + k);
    if (status < 0) {
        awl_autocast_cache_clear();
        return status;
    }
    cache.n = m;
    return AWL_OK;
}
