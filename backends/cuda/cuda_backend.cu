/*
 * backends/cuda/cuda_backend.cu - the "cuda" backend table, devices, errors
 * and host copies.
 *
 * The table is filled once and returned by awl_cuda_backend(); every kernel
 * lives in the file of its concept (see cuda_common.cuh). This file answers
 * the questions about devices: how many there are (0, silently, when there is
 * no GPU or no driver, as on CI), which one is current, and how big the chip
 * is for sizing grids.
 *
 * Errors: a CUDA call that fails records AWL_ERR_DEVICE with CUDA's own error
 * string and clears CUDA's last error, so one failed launch does not poison
 * the message of the next unrelated call. (Faults inside a kernel, such as an
 * illegal address, leave the context unusable: every later call reports them.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "backends/cuda/cuda_common.cuh"

int awlc_fail(cudaError_t err, const char *what)
{
    (void)cudaGetLastError();
    return awl_error(AWL_ERR_DEVICE, "awl_cuda %s: %s (%s)", what, cudaGetErrorString(err),
                     cudaGetErrorName(err));
}

int awlc_check_launch(const char *what)
{
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? AWL_OK : awlc_fail(err, what);
}

/* ---- devices ------------------------------------------------------------------- */

static int device_count_cached = -1;
static int sm_count_cached[AWLC_MAX_DEVICES];

int awlc_device_count(void)
{
    if (device_count_cached < 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        (void)cudaGetLastError();
        device_count_cached = n < AWLC_MAX_DEVICES ? n : AWLC_MAX_DEVICES;
    }
    return device_count_cached;
}

int awlc_set_device(int device)
{
    if (device < 0 || device >= awlc_device_count())
        return awl_error(AWL_ERR_DEVICE, "awl_cuda: no device cuda:%d (%d present)", device,
                         awlc_device_count());
    int current = -1;
    AWLC_TRY(cudaGetDevice(&current), "cudaGetDevice");
    if (current != device) AWLC_TRY(cudaSetDevice(device), "cudaSetDevice");
    return AWL_OK;
}

int awlc_use_device(const void *ptr)
{
    if (awlc_device_count() <= 1) return 0;
    cudaPointerAttributes attr;
    AWLC_TRY(cudaPointerGetAttributes(&attr, ptr), "cudaPointerGetAttributes");
    if (attr.type != cudaMemoryTypeDevice)
        return awl_error(AWL_ERR_DEVICE, "awl_cuda: pointer %p is not device memory", ptr);
    AWLC_TRY_STATUS(awlc_set_device(attr.device));
    return attr.device;
}

int awlc_sm_count(void)
{
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= AWLC_MAX_DEVICES) {
        (void)cudaGetLastError();
        return 132;
    }
    if (sm_count_cached[device] == 0) {
        int n = 0;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
            n <= 0) {
            (void)cudaGetLastError();
            n = 132;
        }
        sm_count_cached[device] = n;
    }
    return sm_count_cached[device];
}

unsigned awlc_grid_for(int64_t n, int threads)
{
    int64_t blocks = (n + threads - 1) / threads;
    int64_t cap = (int64_t)awlc_sm_count() * (2048 / threads) * 4;
    if (blocks > cap) blocks = cap;
    return blocks < 1 ? 1u : (unsigned)blocks;
}

/* ---- the device's compute capability: dependent launch, wgmma ------------------------ */

static bool dependent_launch_on = true; /* the setting */
static int cc_cached[AWLC_MAX_DEVICES]; /* compute capability major 10 + minor; 0 not asked */

/* The current device's compute capability as major 10 + minor (90 for
 * Hopper), or -1 where it cannot be read. */
static int current_cc(void)
{
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= AWLC_MAX_DEVICES) {
        (void)cudaGetLastError();
        return -1;
    }
    if (cc_cached[device] == 0) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) !=
                cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) !=
                cudaSuccess) {
            (void)cudaGetLastError();
            major = minor = 0;
        }
        cc_cached[device] = major > 0 ? major * 10 + minor : -1;
    }
    return cc_cached[device];
}

bool awlc_dependent_launch(void) { return dependent_launch_on && current_cc() >= 90; }

bool awlc_wgmma(void)
{
#if defined(AWL_CUDA_WGMMA)
    return current_cc() == 90;
#else
    return false;
#endif
}

int awlc_set_dependent_launch(const char *value)
{
    if (value && (strcmp(value, "on") == 0 || strcmp(value, "off") == 0)) {
        dependent_launch_on = strcmp(value, "on") == 0;
        return AWL_OK;
    }
    return awl_error(AWL_ERR_INVALID, "awl_cuda: dependent_launch setting '%s' is not on or off",
                     value ? value : "(null)");
}

/* ---- host copies and synchronisation ------------------------------------------------ */

/* A copy from pageable memory (cudaMemcpy) first waits for everything queued
 * on the stream, so a training step's batch upload would hold the host until
 * the optimizer step has run, and the GPU would then idle while the host
 * queues the next forward. Copies of up to STAGE_BYTES go instead through a
 * few pinned buffers a device: memcpy into the next buffer, cudaMemcpyAsync
 * from it, an event recorded after the copy. The call returns as soon as the
 * bytes are in the buffer, so the caller may reuse src at once, and the copy
 * is ordered before every later op on the legacy stream. A buffer is written
 * again only after its event, i.e. after its last copy, has completed.
 * Larger copies, and every copy where pinned memory cannot be had, use
 * cudaMemcpy. */
enum { STAGE_SLOTS = 4, STAGE_BYTES = 1 << 20 };

struct staging {
    void *slot[STAGE_SLOTS];
    cudaEvent_t done[STAGE_SLOTS];
    int next;
    bool ready, unavailable;
};

static struct staging stagings[AWLC_MAX_DEVICES];
static std::mutex staging_lock;

/* Creates the device's buffers and events (the device is current); false,
 * with CUDA's error cleared, where it cannot. */
static bool staging_ready(struct staging *s)
{
    if (s->ready) return true;
    if (s->unavailable) return false;
    int made = 0;
    while (made < STAGE_SLOTS &&
           cudaHostAlloc(&s->slot[made], STAGE_BYTES, cudaHostAllocDefault) == cudaSuccess) {
        if (cudaEventCreateWithFlags(&s->done[made], cudaEventDisableTiming) != cudaSuccess) {
            cudaFreeHost(s->slot[made]);
            break;
        }
        made++;
    }
    if (made < STAGE_SLOTS) {
        (void)cudaGetLastError();
        for (int i = 0; i < made; i++) {
            cudaEventDestroy(s->done[i]);
            cudaFreeHost(s->slot[i]);
        }
        s->unavailable = true;
        return false;
    }
    s->ready = true;
    return true;
}

static int staged_copy(struct staging *s, void *dst, const void *src, size_t nbytes)
{
    int i = s->next;
    s->next = (i + 1) % STAGE_SLOTS;
    AWLC_TRY(cudaEventSynchronize(s->done[i]), "copy_from_host (staging buffer)");
    memcpy(s->slot[i], src, nbytes);
    AWLC_TRY(cudaMemcpyAsync(dst, s->slot[i], nbytes, cudaMemcpyHostToDevice, cudaStreamLegacy),
             "copy_from_host");
    AWLC_TRY(cudaEventRecord(s->done[i], cudaStreamLegacy), "copy_from_host (event)");
    return AWL_OK;
}

static int cuda_copy_from_host(int device, void *dst, const void *src, size_t nbytes)
{
    if (nbytes == 0) return AWL_OK;
    AWLC_TRY_STATUS(awlc_set_device(device));
    if (nbytes <= STAGE_BYTES) {
        std::lock_guard<std::mutex> hold(staging_lock);
        struct staging *s = &stagings[device];
        if (staging_ready(s)) return staged_copy(s, dst, src, nbytes);
    }
    AWLC_TRY(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice), "copy_from_host");
    return AWL_OK;
}

static int cuda_copy_to_host(int device, void *dst, const void *src, size_t nbytes)
{
    if (nbytes == 0) return AWL_OK;
    AWLC_TRY_STATUS(awlc_set_device(device));
    AWLC_TRY(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost), "copy_to_host");
    return awlc_index_faults(device);
}

/* Every kernel, copy and cuBLAS call goes to the device's legacy default
 * stream (cuda_common.cuh); cudaStreamLegacy names it whatever the
 * compiler's default-stream setting. */
static void *cuda_stream(int device)
{
    (void)device;
    return (void *)cudaStreamLegacy;
}

static int cuda_synchronize(int device)
{
    AWLC_TRY_STATUS(awlc_set_device(device));
    AWLC_TRY(cudaDeviceSynchronize(), "synchronize");
    return awlc_index_faults(device);
}

/* ---- what it computes ------------------------------------------------------------------ */

/* Every primitive in every dtype backends/ops.h defines (bfloat16
 * arithmetic included); the fused kernels in float32 and bfloat16, softmax
 * in float64 too (ops.h's float set); cast_many to bfloat16 only.
 * Cross-entropy saves a float32 log-sum-exp, too coarse for float64
 * logits, which take the composed path. */
static bool cuda_supports(awl_kernel kernel, int op, awl_dtype dtype)
{
    (void)op;
    switch (kernel) {
    case AWL_KERNEL_LAYERNORM_FORWARD:
    case AWL_KERNEL_LAYERNORM_BACKWARD:
    case AWL_KERNEL_DROPOUT_ADD_LAYERNORM:
    case AWL_KERNEL_ATTENTION_FORWARD:
    case AWL_KERNEL_ATTENTION_BACKWARD:
    case AWL_KERNEL_MATMUL_BIAS:
    case AWL_KERNEL_CROSS_ENTROPY_FORWARD:
    case AWL_KERNEL_CROSS_ENTROPY_BACKWARD:
    case AWL_KERNEL_CROSS_ENTROPY_FORWARD_BACKWARD: return dtype == AWL_F32 || dtype == AWL_BF16;
    case AWL_KERNEL_CAST_MANY:
    case AWL_KERNEL_MATMUL_WIDE: return dtype == AWL_BF16;
    /* cuBLASLt's GELU epilogues: bfloat16 only. In float32 its GELU
     * derivative is 2e-5 off AWL_GELU_GRAD (awl-check's matmul_gelu_backward
     * on the H200), more than float32's products may differ; in bfloat16 it
     * is far inside the rounding of the output. */
    case AWL_KERNEL_MATMUL_BIAS_GELU:
    case AWL_KERNEL_MATMUL_GELU_BACKWARD: return dtype == AWL_BF16;
    default: return true;
    }
}

/* ---- settings -------------------------------------------------------------------------- */

static int cuda_set_option(const char *name, const char *value)
{
    if (name && strcmp(name, "attention") == 0) return awlc_attention_set_rung(value);
    if (name && strcmp(name, "fp32_matmul") == 0) return awlc_matmul_set_fp32(value);
    if (name && strcmp(name, "dependent_launch") == 0) return awlc_set_dependent_launch(value);
    return awl_error(AWL_ERR_INVALID,
                     "awl_cuda: no setting named '%s' (there are: attention, fp32_matmul, "
                     "dependent_launch)",
                     name ? name : "(null)");
}

/* ---- the table ------------------------------------------------------------------------ */

static awl_backend make_table(void)
{
    /* the default rung, from the environment once (the tests and the
     * benchmark switch it with the setting instead) */
    const char *rung = getenv("AWL_CUDA_ATTENTION");
    if (rung && rung[0] && awlc_attention_set_rung(rung) < 0) awl_clear_error();
    const char *fp32 = getenv("AWL_CUDA_FP32_MATMUL");
    if (fp32 && fp32[0] && awlc_matmul_set_fp32(fp32) < 0) awl_clear_error();
    const char *chain = getenv("AWL_CUDA_DEPENDENT_LAUNCH");
    if (chain && chain[0] && awlc_set_dependent_launch(chain) < 0) awl_clear_error();
    awl_backend t = {};
    t.name = "cuda";
    t.device_count = awlc_device_count;
    t.alloc = awlc_alloc;
    t.free = awlc_free;
    t.copy_from_host = cuda_copy_from_host;
    t.copy_to_host = cuda_copy_to_host;
    t.synchronize = cuda_synchronize;
    t.fill = awlc_fill;
    t.copy = awlc_copy;
    t.unary = awlc_unary;
    t.binary = awlc_binary;
    t.where = awlc_where;
    t.reduce = awlc_reduce;
    t.matmul = awlc_matmul;
    t.matmul_wide = awlc_matmul_wide;
    t.matmul_bias = awlc_matmul_bias;
    t.matmul_bias_gelu = awlc_matmul_bias_gelu;
    t.matmul_gelu_backward = awlc_matmul_gelu_backward;
    t.index_select = awlc_index_select;
    t.index_add = awlc_index_add;
    t.gather = awlc_gather;
    t.scatter_add = awlc_scatter_add;
    t.random = awlc_random;
    t.supports = cuda_supports;
    t.memory_reserved = awlc_memory_reserved;
    t.empty_cache = awlc_empty_cache;
    t.set_num_threads = NULL;
    t.set_matmul_fast_fp32 = awlc_set_matmul_fast_fp32;
    t.stream = cuda_stream;
    t.set_option = cuda_set_option;
    t.peak_flops = awlc_peak_flops;
    t.marker_record = awlc_marker_record;
    t.marker_seconds = awlc_marker_seconds;
    t.marker_free = awlc_marker_free;
    t.range_push = awlc_range_push;
    t.range_pop = awlc_range_pop;
    t.softmax_forward = awlc_softmax_forward;
    t.softmax_backward = awlc_softmax_backward;
    t.layernorm_forward = awlc_layernorm_forward;
    t.layernorm_backward = awlc_layernorm_backward;
    t.dropout_add_layernorm = awlc_dropout_add_layernorm;
    t.cross_entropy_forward = awlc_cross_entropy_forward;
    t.cross_entropy_backward = awlc_cross_entropy_backward;
    t.cross_entropy_forward_backward = awlc_cross_entropy_forward_backward;
    t.attention_forward = awlc_attention_forward;
    t.attention_backward = awlc_attention_backward;
    t.dropout = awlc_dropout;
    t.gelu_backward = awlc_gelu_backward;
    t.dropout_add = awlc_dropout_add;
    t.add_dropout = awlc_add_dropout;
    t.check_indices = awlc_check_indices;
    t.adamw_step = awlc_adamw_step;
    t.sum_squares = awlc_sum_squares;
    t.scale = awlc_scale;
    t.cast_many = awlc_cast_many;
    return t;
}

extern "C" const awl_backend *awl_cuda_backend(void)
{
    static const awl_backend table = make_table();
    return &table;
}
