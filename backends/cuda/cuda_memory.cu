/*
 * backends/cuda/cuda_memory.cu - the caching allocator.
 *
 * cudaMalloc and cudaFree are slow (cudaFree also waits for the whole device),
 * and a training step allocates and frees the same few hundred sizes again
 * and again. So freed blocks are kept, per device, in bins keyed by a size
 * class, and handed out again without touching the driver:
 *
 *   - below 1 MiB a request is rounded up to a multiple of 512 B;
 *   - from 1 MiB up, to a multiple of an eighth of its power of two (at most
 *     12.5% waste, and eight classes per octave, so blocks are shared
 *     between nearby sizes).
 *
 * A block goes back to its bin only by exact class; bins never split or
 * merge blocks. That is simpler than a best-fit allocator with splitting and
 * enough for training loops, whose sizes repeat. When cudaMalloc fails, every
 * cached block of the device is released and the request is tried once more;
 * if it still fails, AWL_ERR_OOM names the request and the device's figures.
 *
 * Freeing needs no synchronisation: all work runs on one stream per device
 * (cuda_common.cuh), so any kernel that receives a reused block is queued
 * after every kernel that used it before.
 *
 * The caller passes the size back to free (the backend interface gives it),
 * so no pointer-to-size table is needed. A mutex per device makes the
 * allocator safe for several host threads.
 */
#include <map>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_common.cuh"

namespace
{

struct device_cache {
    std::mutex mu;
    std::map<size_t, std::vector<void *>> bins; /* class size -> free blocks */
    size_t reserved = 0;                        /* bytes held from cudaMalloc */
    size_t cached = 0;                          /* of which sitting in bins */
};

device_cache caches[AWLC_MAX_DEVICES];

size_t size_class(size_t n)
{
    const size_t mib = (size_t)1 << 20;
    if (n == 0) return 512;
    if (n < mib) return (n + 511) & ~(size_t)511;
    size_t p = mib;
    while (p <= n / 2) p *= 2; /* largest power of two <= n */
    size_t step = p / 8;
    return (n + step - 1) / step * step;
}

/* Frees every cached block of the device; the caller holds c.mu and has made
 * the device current. */
void release_cached(device_cache &c)
{
    for (auto &bin : c.bins) {
        for (void *p : bin.second) {
            (void)cudaFree(p);
            c.reserved -= bin.first;
        }
        bin.second.clear();
    }
    c.cached = 0;
    (void)cudaGetLastError();
}

} // namespace

void *awlc_alloc(int device, size_t nbytes)
{
    if (awlc_set_device(device) != AWL_OK) return NULL;
    device_cache &c = caches[device];
    size_t size = size_class(nbytes);
    std::lock_guard<std::mutex> lock(c.mu);
    auto bin = c.bins.find(size);
    if (bin != c.bins.end() && !bin->second.empty()) {
        void *p = bin->second.back();
        bin->second.pop_back();
        c.cached -= size;
        return p;
    }
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, size);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        release_cached(c);
        err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
        awl_error(AWL_ERR_OOM,
                  "awl_cuda alloc: out of memory on cuda:%d: asked for %zu bytes (class %zu); "
                  "in use %zu, reserved %zu, device free %zu of %zu (%s)",
                  device, nbytes, size, c.reserved - c.cached, c.reserved, free_b, total_b,
                  cudaGetErrorString(err));
        return NULL;
    }
    c.reserved += size;
    return p;
}

void awlc_free(int device, void *ptr, size_t nbytes)
{
    if (!ptr || device < 0 || device >= AWLC_MAX_DEVICES) return;
    device_cache &c = caches[device];
    size_t size = size_class(nbytes);
    std::lock_guard<std::mutex> lock(c.mu);
    c.bins[size].push_back(ptr);
    c.cached += size;
}

size_t awlc_memory_reserved(int device)
{
    if (device < 0 || device >= AWLC_MAX_DEVICES) return 0;
    device_cache &c = caches[device];
    std::lock_guard<std::mutex> lock(c.mu);
    return c.reserved;
}

void awlc_empty_cache(int device)
{
    if (awlc_set_device(device) != AWL_OK) return;
    device_cache &c = caches[device];
    std::lock_guard<std::mutex> lock(c.mu);
    release_cached(c);
}

void *awlc_scratch_alloc(size_t nbytes)
{
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) {
        awlc_fail(err, "cudaGetDevice");
        return NULL;
    }
    return awlc_alloc(device, nbytes);
}

void awlc_scratch_free(void *ptr, size_t nbytes)
{
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    awlc_free(device, ptr, nbytes);
}
