/*
 * backends/cpu/cpu_memory.c - host memory for tensors: a cache of large
 * freed blocks.
 *
 * A training step allocates and frees the same multi-megabyte activations
 * and gradients every step. glibc serves blocks that large with mmap, or
 * gives them back to the system when it trims the top of its heap, so each
 * step's buffers arrive as fresh pages that the kernel must zero and map on
 * first touch: about a thousand page faults per cpu-small training step.
 * So freed blocks of at least CACHE_MIN bytes are kept in bins keyed by a
 * size class and handed out again, already mapped:
 *
 *   - a request is rounded up to a multiple of an eighth of its power of two
 *     (at most 12.5% waste, and eight classes per octave, so blocks are
 *     shared between nearby sizes);
 *   - a block goes back to its bin only by exact class; bins never split or
 *     merge blocks.
 *
 * This is the CUDA backend's scheme (backends/cuda/cuda_memory.cu) without
 * its small classes: glibc already reuses small blocks well. When
 * posix_memalign fails, the cached blocks are released and the request is
 * tried once more. memory_reserved counts every byte held from the system,
 * live or cached; empty_cache releases the cached ones. Blocks are 64-byte
 * aligned, so every buffer starts on a cache line.
 *
 * Under AddressSanitizer a cached block is poisoned, so a use after free is
 * still reported (as a use-after-poison). The caller passes the size back to
 * free (the backend interface gives it), so no pointer-to-size table is
 * needed; a mutex makes the cache safe for several host threads.
 */
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <stdlib.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"

#define CACHE_MIN ((size_t)1 << 16)
#define MIN_OCTAVE 16 /* CACHE_MIN = 2^16 */
/* Classes of sizes from 2^16 up to 2^64, eight per octave. */
#define N_BINS ((64 - MIN_OCTAVE) * 8 + 1)

typedef struct bin {
    void **blocks;
    size_t count, cap;
} bin;

static struct {
    pthread_mutex_t mu;
    bin bins[N_BINS];
    size_t held;   /* bytes held from the system, live or cached */
    size_t cached; /* of which sitting in bins */
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The bytes to allocate for a request of n, and its bin (-1: not cached).
 * Returns a size below n when rounding up overflows. */
static size_t size_class(size_t n, int *bin_index)
{
    *bin_index = -1;
    if (n < CACHE_MIN) return n ? (n + 63) & ~(size_t)63 : 64;
    int octave = MIN_OCTAVE;
    while (((size_t)1 << octave) <= n / 2) octave++; /* 2^octave <= n < 2^(octave+1) */
    const size_t step = (size_t)1 << (octave - 3);
    const size_t size = (n + step - 1) / step * step;
    if (size < n) return size;
    /* size / step is 8..16; 16 is the next octave's first class */
    *bin_index = (octave - MIN_OCTAVE) * 8 + (int)(size / step - 8);
    return size;
}

/* Bytes of physical memory still free, for the out-of-memory message. */
static double available_mib(void)
{
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page / (1024.0 * 1024.0) : -1.0;
}

/* The size of bin b's blocks: size_class's rounding, inverted. */
static size_t bin_size(int b) { return (size_t)(8 + b % 8) << (MIN_OCTAVE + b / 8 - 3); }

/* Frees every cached block; the caller holds cache.mu. */
static void release_cached(void)
{
    for (int b = 0; b < N_BINS; b++) {
        for (size_t i = 0; i < cache.bins[b].count; i++) {
            ASAN_UNPOISON_MEMORY_REGION(cache.bins[b].blocks[i], bin_size(b));
            free(cache.bins[b].blocks[i]);
        }
        free(cache.bins[b].blocks);
        cache.bins[b] = (bin){0};
    }
    cache.held -= cache.cached;
    cache.cached = 0;
}

/* A cached block of the class, or NULL. */
static void *take_cached(int bin_index, size_t size)
{
    void *ptr = NULL;
    pthread_mutex_lock(&cache.mu);
    bin *b = &cache.bins[bin_index];
    if (b->count) {
        ptr = b->blocks[--b->count];
        cache.cached -= size;
    }
    pthread_mutex_unlock(&cache.mu);
    return ptr;
}

void *awl_cpu_alloc(int device, size_t nbytes)
{
    int bin_index;
    size_t size = size_class(nbytes, &bin_index);
    void *ptr = bin_index >= 0 ? take_cached(bin_index, size) : NULL;
    if (ptr) {
        ASAN_UNPOISON_MEMORY_REGION(ptr, size);
        return ptr;
    }
    bool ok = size >= nbytes && posix_memalign(&ptr, 64, size) == 0;
    if (!ok && size >= nbytes) {
        awl_cpu_empty_cache(device);
        ok = posix_memalign(&ptr, 64, size) == 0;
    }
    if (!ok) {
        awl_error(AWL_ERR_OOM, "awl_cpu alloc: out of memory allocating %zu bytes (%.0f MiB free)",
                  nbytes, available_mib());
        return NULL;
    }
    pthread_mutex_lock(&cache.mu);
    cache.held += size;
    pthread_mutex_unlock(&cache.mu);
    return ptr;
}

/* Appends ptr to the bin; false when the bin cannot grow. */
static bool bin_push(bin *b, void *ptr)
{
    if (b->count == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 8;
        void **blocks = realloc(b->blocks, cap * sizeof *blocks);
        if (!blocks) return false;
        b->blocks = blocks;
        b->cap = cap;
    }
    b->blocks[b->count++] = ptr;
    return true;
}

void awl_cpu_free(int device, void *ptr, size_t nbytes)
{
    (void)device;
    if (!ptr) return;
    int bin_index;
    size_t size = size_class(nbytes, &bin_index);
    pthread_mutex_lock(&cache.mu);
    bool kept = bin_index >= 0 && bin_push(&cache.bins[bin_index], ptr);
    if (kept) {
        ASAN_POISON_MEMORY_REGION(ptr, size);
        cache.cached += size;
    } else {
        cache.held -= size;
    }
    pthread_mutex_unlock(&cache.mu);
    if (!kept) free(ptr);
}

size_t awl_cpu_memory_reserved(int device)
{
    (void)device;
    pthread_mutex_lock(&cache.mu);
    size_t held = cache.held;
    pthread_mutex_unlock(&cache.mu);
    return held;
}

void awl_cpu_empty_cache(int device)
{
    (void)device;
    pthread_mutex_lock(&cache.mu);
    release_cached();
    pthread_mutex_unlock(&cache.mu);
}
