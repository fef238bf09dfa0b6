/*
 * tensor/random.c - the global random generator and random tensors.
 *
 * The generator is two integers, a seed and an offset into the Philox
 * stream that seed keys (common/philox.h): a fill of n elements reserves the
 * counter blocks [offset, offset + ceil(n / 4)) and advances the offset, and
 * the backend computes each element from (seed, block, word) alone. So any
 * device draws the same numbers, and saving the two integers saves the
 * generator (checkpoints do).
 *
 * One generator serves the process, guarded by a mutex: two threads drawing
 * at once each get their own blocks of the stream, in the order they took
 * the lock.
 */
#include "tensor/tensor_internal.h"

#include <pthread.h>

#include "common/philox.h"

static struct {
    pthread_mutex_t mu;
    uint64_t seed, offset;
} rng = {PTHREAD_MUTEX_INITIALIZER, 0x5eed, 0};

void awl_manual_seed(uint64_t seed) { awl_rng_set_state(seed, 0); }

void awl_rng_get_state(uint64_t *seed, uint64_t *offset)
{
    pthread_mutex_lock(&rng.mu);
    if (seed) *seed = rng.seed;
    if (offset) *offset = rng.offset;
    pthread_mutex_unlock(&rng.mu);
}

void awl_rng_set_state(uint64_t seed, uint64_t offset)
{
    pthread_mutex_lock(&rng.mu);
    rng.seed = seed;
    rng.offset = offset;
    pthread_mutex_unlock(&rng.mu);
}

/* Reserves the blocks of n elements: the seed and the offset they start at. */
static uint64_t reserve(uint64_t n, uint64_t *seed)
{
    pthread_mutex_lock(&rng.mu);
    uint64_t start = rng.offset;
    rng.offset += awl_philox_blocks(n);
    if (seed) *seed = rng.seed;
    pthread_mutex_unlock(&rng.mu);
    return start;
}

uint64_t awl_rng_reserve(uint64_t n) { return reserve(n, NULL); }

static int fill_random(const char *op, awl_tensor *dst, awl_random_kind kind, double a, double b)
{
    if (!dst) return AWL_ERR_INVALID;
    if (!awl_dtype_is_float(dst->dtype))
        return awl_error(AWL_ERR_INVALID, "%s: random fill needs a float tensor, not %s", op,
                         awl_dtype_name(dst->dtype));
    uint64_t seed, offset = reserve((uint64_t)awl_numel(dst), &seed);
    awl_view v = awl_tensor_view(dst);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "random", dst, AWL_WORK(NONE, 0), 1, 1, (const awl_view *[]){&v});
    awl_tensor_written(dst);
    return awl_backend_status(
        op, awl_trace_end(&k, awl_tensor_backend(dst)->random(&v, kind, seed, offset, a, b)));
}

int awl_tensor_uniform_(awl_tensor *dst, double low, double high)
{
    return fill_random("awl_tensor_uniform_", dst, AWL_RANDOM_UNIFORM, low, high);
}

int awl_tensor_normal_(awl_tensor *dst, double mean, double std)
{
    return fill_random("awl_tensor_normal_", dst, AWL_RANDOM_NORMAL, mean, std);
}

/* A new tensor drawn from the global generator: U[0, 1) or N(0, 1) (both
 * kinds take a = 0, b = 1 for these). */
static awl_tensor *create_random(const char *op, awl_random_kind kind, int ndim,
                                 const int64_t *shape, awl_dtype dtype, const char *device)
{
    awl_tensor *t = awl_tensor_create(op, ndim, shape, dtype, device);
    if (t && fill_random(op, t, kind, 0.0, 1.0) < 0) {
        awl_discard(t);
        return NULL;
    }
    return t;
}

awl_tensor *awl_rand(int ndim, const int64_t *shape, awl_dtype dtype, const char *device)
{
    return create_random("awl_rand", AWL_RANDOM_UNIFORM, ndim, shape, dtype, device);
}

awl_tensor *awl_randn(int ndim, const int64_t *shape, awl_dtype dtype, const char *device)
{
    return create_random("awl_randn", AWL_RANDOM_NORMAL, ndim, shape, dtype, device);
}
