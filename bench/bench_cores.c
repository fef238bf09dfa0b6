/*
 * bench/bench_cores.c - what each core still gets when k cores are busy:
 * the ceiling a data-parallel job meets before any communication. One JSON
 * line per (test, k); rank 0 of k forked processes prints.
 *
 *     ./build/bench_cores                 # k = 1, 2, 4, 8, ... up to the cores present
 *     ./build/bench_cores --cores 1,4,16 --seconds 1
 *
 * For each k, k processes, process i pinned to core i, start together and
 * each runs, alone on its core:
 *   clock   a chain of dependent float64 multiply-adds: a proxy for the
 *           core's clock (turbo falls as more cores are busy);
 *   triad   a[i] = b[i] + s * c[i] over 3 x 32 MiB: the memory bandwidth
 *           one core gets while k share the memory system;
 *   matmul  awl_matmul of float32 [2048, 192] x [192, 768], one thread: the
 *           shape of cpu-medium's MLP, the work a DDP rank does.
 * per_core is the median over the k processes of each one's rate, slowest
 * the lowest; vs_first is per_core over the same figure for the first k
 * (1 unless --cores says otherwise), measured in the same run. A
 * DDP job of k/t ranks of t threads cannot scale past k * vs_first of the
 * slowest of these that its step depends on.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "awl.h"
#include "bench/bench_util.h"

enum { TEST_CLOCK, TEST_TRIAD, TEST_MATMUL, N_TESTS };
static const char *const test_names[N_TESTS] = {"clock", "triad", "matmul"};
static const char *const test_units[N_TESTS] = {"Gflop/s", "GB/s", "Gflop/s"};

/* Shared with the forked processes: a start line and each one's rates. */
typedef struct shared {
    volatile int ready;
    double rate[CPU_SETSIZE][N_TESTS];
} shared;

/* Each test runs until `seconds` have passed and returns its rate. */
static double clock_rate(double seconds)
{
    double x = 1.0, y = 1.0 + 1e-12, t0 = bench_now(), t;
    long long n = 0;
    do {
        for (int i = 0; i < 1 << 20; i++) x = x * y + 1e-15; /* 2 flops, dependent */
        n += 1 << 20;
    } while ((t = bench_now() - t0) < seconds);
    return x > 0 ? 2.0 * (double)n / t / 1e9 : 0;
}

static double triad_rate(double seconds)
{
    size_t n = (32u << 20) / sizeof(double);
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double t0 = bench_now(), t;
    long long passes = 0;
    do {
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5 * c[i];
        passes++;
    } while ((t = bench_now() - t0) < seconds);
    double gbs = a[n / 2] > 0 ? 3.0 * (double)(n * sizeof *a) * (double)passes / t / 1e9 : 0;
    free(a);
    free(b);
    free(c);
    return gbs;
}

static double matmul_rate(double seconds)
{
    awl_scope_begin();
    awl_tensor *x = awl_randn(AWL_SHAPE(2048, 192), AWL_F32, "cpu");
    awl_tensor *w = awl_randn(AWL_SHAPE(192, 768), AWL_F32, "cpu");
    double t0 = bench_now(), t;
    long long n = 0;
    do {
        awl_scope_begin();
        awl_matmul(x, w);
        awl_scope_end();
        n++;
    } while ((t = bench_now() - t0) < seconds);
    awl_scope_end();
    return 2.0 * 2048 * 192 * 768 * (double)n / t / 1e9;
}

static void run_process(shared *sh, int i, int k, int core, double seconds)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    sched_setaffinity(0, sizeof set, &set);
    awl_set_num_threads(1);
    __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < k) {}
    sh->rate[i][TEST_CLOCK] = clock_rate(seconds);
    sh->rate[i][TEST_TRIAD] = triad_rate(seconds);
    sh->rate[i][TEST_MATMUL] = matmul_rate(seconds);
}

int main(int argc, char **argv)
{
    const char *list = NULL;
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cores") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_cores [--cores 1,4,16] [--seconds 1]\n");
            return 2;
        }
    }
    cpu_set_t all;
    sched_getaffinity(0, sizeof all, &all);
    int cores[CPU_SETSIZE], n_cores = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) cores[n_cores++] = c;
    int counts[64], n_counts = 0;
    if (list) {
        for (const char *p = list; *p && n_counts < 64;) {
            int k = atoi(p);
            if (k >= 1 && k <= n_cores) counts[n_counts++] = k;
            p = strchr(p, ',');
            if (!p) break;
            p++;
        }
    } else {
        for (int k = 1; k <= n_cores && n_counts < 64; k *= 2) counts[n_counts++] = k;
        if (counts[n_counts - 1] != n_cores) counts[n_counts++] = n_cores;
    }
    awl_set_num_threads(1);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 1;
    double one[N_TESTS] = {0};
    for (int c = 0; c < n_counts; c++) {
        int k = counts[c];
        memset(sh, 0, sizeof *sh);
        fflush(stdout);
        pid_t pids[CPU_SETSIZE];
        for (int i = 0; i < k; i++)
            if ((pids[i] = fork()) == 0) {
                run_process(sh, i, k, cores[i], seconds);
                _exit(0);
            }
        for (int i = 0; i < k; i++) waitpid(pids[i], NULL, 0);
        for (int t = 0; t < N_TESTS; t++) {
            double r[CPU_SETSIZE];
            for (int i = 0; i < k; i++) r[i] = sh->rate[i][t];
            double per_core = bench_median(r, k);
            if (c == 0) one[t] = per_core;
            bench_json_begin("cores");
            printf("\"test\":\"%s\",\"busy_cores\":%d,\"unit\":\"%s\",\"per_core\":%.3f,"
                   "\"slowest\":%.3f,"
                   "\"vs_first\":%.3f}\n",
                   test_names[t], k, test_units[t], per_core, r[0],
                   one[t] > 0 ? per_core / one[t] : 0);
        }
    }
    munmap(sh, sizeof *sh);
    return 0;
}
