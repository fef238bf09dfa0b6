/*
 * backends/cpu/cpu_peak.c - the CPU's peak float32 rate: what MFU is
 * measured against.
 *
 * MFU divides the model's FLOPs per second by a fixed ceiling of the
 * hardware, so that it can never read above 100%. On a CPU that ceiling is
 * the fused multiply-add peak of the cores in use: every FMA unit retiring
 * one vector FMA per cycle. Vendors do not publish it for a given machine
 * (the clock under load depends on the part, the cooling and the
 * hypervisor), so it is measured, once, by a loop that does nothing but
 * independent FMAs on the widest vectors the CPU has, and cached. The loop
 * keeps more chains in flight than an FMA's latency times the FMA units of
 * any current core (4 cycles x 2 units), but no more than the vector
 * registers hold beside the two constants: 12 of AVX2's 16, 24 of
 * AVX-512's 32. A chain spilled to memory would measure the loads and
 * stores instead of the FMAs.
 *
 * Per core, then multiplied: the rate is measured on one thread (the best
 * of several short runs, so a neighbour taking the core for a moment does
 * not lower it) and multiplied by the physical cores in use, the smaller
 * of the thread count and the cores (two hyperthreads share one core's FMA
 * units). A clock that drops when every core is busy makes this an
 * overestimate, which errs the safe way: MFU reads lower, never above 100%.
 *
 * The cache: one line per CPU model and vector width in
 * $XDG_CACHE_HOME/awl/cpu-peak (else ~/.cache/awl/cpu-peak), "<isa>
 * <FLOP/s per core> <model name>". Delete the file to measure again. This
 * file is always compiled with optimisation (CMakeLists.txt), so a debug or
 * sanitizer build measures, and caches, the same figure as a release one.
 */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_PEAK_X86 1
#endif

#define CHAINS_AVX512 24
#define CHAINS_AVX2 12
#define CHAINS_SCALAR 12

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Each loop runs `iters` rounds of its chains' independent FMAs (x = x * m + a)
 * and returns a sum of the chains, so the compiler must do them all. The
 * chains stay finite: m is just below 1. */
#ifdef CPU_PEAK_X86
__attribute__((target("avx512f"))) static float fma_loop_avx512(int64_t iters)
{
    __m512 x[CHAINS_AVX512];
    const __m512 m = _mm512_set1_ps(0.9999999f), a = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS_AVX512; c++) x[c] = _mm512_set1_ps((float)c);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 24
        for (int c = 0; c < CHAINS_AVX512; c++) x[c] = _mm512_fmadd_ps(x[c], m, a);
    }
    for (int c = 1; c < CHAINS_AVX512; c++) x[0] = _mm512_add_ps(x[0], x[c]);
    return _mm512_reduce_add_ps(x[0]);
}

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(int64_t iters)
{
    __m256 x[CHAINS_AVX2];
    const __m256 m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS_AVX2; c++) x[c] = _mm256_set1_ps((float)c);
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS_AVX2; c++) x[c] = _mm256_fmadd_ps(x[c], m, a);
    }
    for (int c = 1; c < CHAINS_AVX2; c++) x[0] = _mm256_add_ps(x[0], x[c]);
    float lanes[8];
    _mm256_storeu_ps(lanes, x[0]);
    return lanes[0] + lanes[7];
}
#endif

/* Without FMA: a multiply and an add, counted as two FLOPs. */
static float mul_add_loop(int64_t iters)
{
    float x[CHAINS_SCALAR];
    for (int c = 0; c < CHAINS_SCALAR; c++) x[c] = (float)c;
    for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS_SCALAR; c++) x[c] = x[c] * 0.9999999f + 1e-7f;
    }
    float s = 0;
    for (int c = 0; c < CHAINS_SCALAR; c++) s += x[c];
    return s;
}

typedef struct fma_kind {
    const char *isa;
    int lanes;  /* floats per vector */
    int chains; /* FMAs per round */
    float (*loop)(int64_t iters);
} fma_kind;

static fma_kind widest_fma(void)
{
#ifdef CPU_PEAK_X86
    if (__builtin_cpu_supports("avx512f"))
        return (fma_kind){"avx512", 16, CHAINS_AVX512, fma_loop_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return (fma_kind){"avx2-fma", 8, CHAINS_AVX2, fma_loop_avx2};
#endif
    return (fma_kind){"scalar", 1, CHAINS_SCALAR, mul_add_loop};
}

/* FLOP/s of one thread: the best of 250 runs of about 2 ms each, half a
 * second in all. Short runs, many of them: on a shared machine a run that
 * the scheduler interrupts reads low, and the best is one that had the
 * core to itself (runs of 20 ms, the best of 25, read 48 to 75 GFLOP/s
 * here while other builds ran). */
static double measure_per_core(fma_kind k)
{
    volatile float sink = 0;
    int64_t iters = 1 << 16;
    for (;;) { /* size a run to about 2 ms */
        double t0 = seconds_now();
        sink += k.loop(iters);
        if (seconds_now() - t0 > 0.002 || iters > ((int64_t)1 << 40)) break;
        iters *= 2;
    }
    double best = 0;
    for (int run = 0; run < 250; run++) {
        double t0 = seconds_now();
        sink += k.loop(iters);
        double t = seconds_now() - t0;
        double rate = 2.0 * (double)k.chains * k.lanes * (double)iters / t;
        if (rate > best) best = rate;
    }
    (void)sink;
    return best;
}

/* ---- the cores in use ---------------------------------------------------------- */

/* The number of CPUs in a sysfs list ("0-3,8"); 1 when unreadable. */
static int count_cpu_list(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    int count = 0, lo, hi;
    char sep;
    while (fscanf(f, "%d", &lo) == 1) {
        hi = lo;
        if (fscanf(f, "%c", &sep) == 1 && sep == '-') {
            if (fscanf(f, "%d", &hi) != 1) break;
            if (fscanf(f, "%c", &sep) != 1) sep = '\n';
        }
        count += hi - lo + 1;
        if (sep != ',') break;
    }
    fclose(f);
    return count > 0 ? count : 1;
}

/* Physical cores among the threads in use. */
static int cores_in_use(void)
{
    int threads = omp_get_max_threads();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int per_core = count_cpu_list("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list");
    int cores = cpus > 0 ? (int)(cpus / per_core) : threads;
    if (cores < 1) cores = 1;
    return threads < cores ? threads : cores;
}

/* ---- the cache ---------------------------------------------------------------------- */

static void cpu_model(char *buf, size_t size)
{
    snprintf(buf, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(buf, size, "%s", colon + 2);
            buf[strcspn(buf, "\n")] = '\0';
            break;
        }
    }
    fclose(f);
}

/* $XDG_CACHE_HOME/awl/cpu-peak or ~/.cache/awl/cpu-peak, the folders made
 * when `make` is set; false when there is no home. */
static bool cache_path(char *buf, size_t size, bool make)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[900];
    if (xdg && xdg[0])
        snprintf(dir, sizeof dir, "%s", xdg);
    else if (home && home[0])
        snprintf(dir, sizeof dir, "%s/.cache", home);
    else
        return false;
    if (make) mkdir(dir, 0755);
    size_t n = strlen(dir);
    snprintf(dir + n, sizeof dir - n, "/awl");
    if (make && mkdir(dir, 0755) != 0 && errno != EEXIST) return false;
    snprintf(buf, size, "%s/cpu-peak", dir);
    return true;
}

static double cache_read(const char *isa, const char *model)
{
    char path[1024], line[700];
    if (!cache_path(path, sizeof path, false)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    double found = 0;
    while (found == 0 && fgets(line, sizeof line, f)) {
        char their_isa[32];
        double rate;
        int used = 0;
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "%31s %lf %n", their_isa, &rate, &used) == 2 && used > 0 &&
            strcmp(their_isa, isa) == 0 && strcmp(line + used, model) == 0 && rate > 0)
            found = rate;
    }
    fclose(f);
    return found;
}

static void cache_write(const char *isa, const char *model, double rate)
{
    char path[1024];
    if (!cache_path(path, sizeof path, true)) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s %.6e %s\n", isa, rate, model);
    fclose(f);
}

/* ---- the table's entry ------------------------------------------------------------ */

double awl_cpu_peak_flops(int device, awl_dtype dtype, bool fast_fp32, char *source, size_t size)
{
    (void)device;
    (void)fast_fp32; /* no faster float32 mode on the CPU */
    /* float64 vectors hold half as many lanes; bfloat16 is not computed in */
    if (dtype != AWL_F32 && dtype != AWL_F64) return 0;
    static double per_core; /* measured or read once per process */
    static char how[64];
    fma_kind k = widest_fma();
#pragma omp critical(awl_cpu_peak)
    if (per_core == 0) {
        char model[256];
        cpu_model(model, sizeof model);
        per_core = cache_read(k.isa, model);
        snprintf(how, sizeof how, "cached");
        if (per_core == 0) {
            per_core = measure_per_core(k);
            cache_write(k.isa, model, per_core);
            snprintf(how, sizeof how, "measured now");
        }
    }
    int cores = cores_in_use();
    double peak = per_core * cores * (dtype == AWL_F64 ? 0.5 : 1.0);
    if (source && size)
        snprintf(source, size, "%d core%s x %.1f GFLOP/s %s FMA peak (%s)", cores,
                 cores == 1 ? "" : "s", per_core * (dtype == AWL_F64 ? 0.5 : 1.0) * 1e-9, k.isa,
                 how);
    return peak;
}
