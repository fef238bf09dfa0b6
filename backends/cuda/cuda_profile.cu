/*
 * backends/cuda/cuda_profile.cu - what the profiler (tensor/profiler.c)
 * asks of a GPU: device time, NVTX ranges, and the chip's peak rate.
 *
 * Device time. Kernels are queued, so the host's clock around a call
 * measures the launch, not the kernel. The profiler brackets each call
 * with two markers, CUDA events recorded on the stream the work goes to
 * (the legacy default stream, cuda_common.cuh), and reads the time between
 * them once the device has passed the second: cudaEventElapsedTime, about
 * half a microsecond of resolution.
 *
 * NVTX. range_push/range_pop are nvtxRangePushA/nvtxRangePop from the
 * header-only NVTX 3 that comes with the toolkit: nothing is linked, and
 * outside Nsight Systems each call returns at once (the tool, when it runs
 * the program, injects the library the calls go to).
 *
 * Peak rate. MFU's denominator is the dense matrix rate of the chip for the
 * precision, from NVIDIA's datasheets (dense, no 2:4 sparsity), looked up
 * by the device's name. A chip not in the table has no known peak (0): the
 * caller says so, or takes a figure from the user.
 */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_common.cuh"

/* ---- markers ------------------------------------------------------------------------ */

/* The markers fail silently (NULL, or a negative status), clearing CUDA's
 * error: the profiler then falls back to host time for that kernel, and
 * the op it brackets must not see an error it did not make. Hence this
 * awlc_set_device that records none. */
static bool quiet_set_device(int device)
{
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess &&
        (current == device || cudaSetDevice(device) == cudaSuccess))
        return true;
    (void)cudaGetLastError();
    return false;
}

void *awlc_marker_record(int device)
{
    if (!quiet_set_device(device)) return NULL;
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (cudaEventRecord(e, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaEventDestroy(e);
        return NULL;
    }
    return (void *)e;
}

int awlc_marker_seconds(int device, void *a, void *b, double *seconds)
{
    float ms = 0;
    if (!quiet_set_device(device) || cudaEventSynchronize((cudaEvent_t)b) != cudaSuccess ||
        cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b) != cudaSuccess) {
        (void)cudaGetLastError();
        return AWL_ERR_DEVICE;
    }
    *seconds = 1e-3 * (double)ms;
    return AWL_OK;
}

void awlc_marker_free(int device, void *marker)
{
    if (!marker || !quiet_set_device(device)) return;
    cudaEventDestroy((cudaEvent_t)marker);
}

/* ---- NVTX ----------------------------------------------------------------------------- */

void awlc_range_push(const char *name) { nvtxRangePushA(name); }

void awlc_range_pop(void) { nvtxRangePop(); }

/* ---- the peak rate ----------------------------------------------------------------------- */

/* TFLOP/s, dense, from each chip's datasheet; the first entry whose
 * `match` the device name contains is taken, so the more specific names
 * come first. float64 is the tensor-core rate where there is one. */
typedef struct chip_peak {
    const char *match;
    double fp32, tf32, bf16, fp64;
} chip_peak;

static const chip_peak chips[] = {
    {"H200 NVL", 60.0, 417.5, 835.5, 30.0},
    {"H200", 66.9, 494.7, 989.4, 66.9},     /* SXM */
    {"H100 PCIe", 51.2, 378.0, 756.0, 51.2},
    {"H100 NVL", 60.0, 417.5, 835.5, 60.0},
    {"H100", 66.9, 494.7, 989.4, 66.9},     /* SXM5 ("H100 80GB HBM3") */
    {"A100", 19.5, 156.0, 312.0, 19.5},
    {"L40S", 91.6, 183.0, 362.0, 0},
};

double awlc_peak_flops(int device, awl_dtype dtype, bool fast_fp32, char *source, size_t size)
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    for (size_t i = 0; i < sizeof chips / sizeof *chips; i++) {
        const chip_peak *c = &chips[i];
        if (!strstr(prop.name, c->match)) continue;
        const char *what = "float32";
        double tflops = c->fp32;
        if (dtype == AWL_BF16) {
            what = "bf16";
            tflops = c->bf16;
        } else if (dtype == AWL_F64) {
            what = "float64";
            tflops = c->fp64;
        } else if (dtype == AWL_F32 && fast_fp32) {
            what = "tf32";
            tflops = c->tf32;
        } else if (dtype != AWL_F32) {
            return 0;
        }
        if (source && size)
            snprintf(source, size, "%s: %.1f TFLOP/s %s dense (datasheet)", prop.name, tflops,
                     what);
        return tflops * 1e12;
    }
    if (source && size) snprintf(source, size, "%s: not in awl's table of chips", prop.name);
    return 0;
}
