/*
 * bench/bench_util.h - the clock and the median every benchmark uses.
 *
 * Benchmarks report medians: on a shared machine the distribution of run
 * times has a long right tail (another process took the core), and the
 * median ignores it where the mean would not.
 */
#ifndef AWL_BENCH_UTIL_H
#define AWL_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "awl.h"

/* Seconds on a monotonic clock. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of t[0..n) (sorts t in place). */
static inline double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, bench_compare_doubles);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Opens a JSON line with the fields every benchmark line carries: its name,
 * the BLAS library, the kernels it runs and who chose them, what runs the
 * float32 products (awl's own code on AVX-512, cpu_gemm.h), and the thread
 * count. The caller prints the rest of the object: bench_json_begin("matmul");
 * printf("\"M\":%d}\n", m); */
static inline void bench_json_begin(const char *bench)
{
    awl_blas_info b;
    awl_blas_get_info(&b);
    printf("{\"bench\":\"%s\",\"blas\":\"%s\",\"blas_kernels\":\"%s\",\"kernels_chosen_by\":\"%s\","
           "\"gemm_f32\":\"%s\",\"threads\":%d,",
           bench, b.library, b.kernels, b.chosen_by, b.gemm_f32, awl_get_num_threads());
}

#endif
