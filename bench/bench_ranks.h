/*
 * bench/bench_ranks.h - a distributed benchmark's ranks, forked on this
 * host: each a process of its own, pinned to `threads` cores of its own
 * when the machine has enough, joined to one group on loopback.
 */
#ifndef AWL_BENCH_RANKS_H
#define AWL_BENCH_RANKS_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "awl.h"
#include "dist/net.h"

/* Runs body(options, arg) in n forked ranks and waits for them all. */
static inline void bench_run_ranks(int n, int threads,
                                   void (*body)(const awl_dist_options *options, void *arg),
                                   void *arg)
{
    char err[128];
    int fd = awl_net_listen("127.0.0.1", 0, err, sizeof err);
    int port = awl_net_local_port(fd);
    close(fd);
    cpu_set_t all;
    sched_getaffinity(0, sizeof all, &all);
    int cores[CPU_SETSIZE], n_cores = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) cores[n_cores++] = c;
    if (threads < 1) threads = 1;
    fflush(stdout);
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            if (n * threads <= n_cores) {
                cpu_set_t set;
                CPU_ZERO(&set);
                for (int c = 0; c < threads; c++) CPU_SET(cores[r * threads + c], &set);
                sched_setaffinity(0, sizeof set, &set);
            }
            awl_set_num_threads(threads);
            awl_dist_options d = awl_dist_default_options();
            d.rank = r;
            d.world_size = n;
            d.master_addr = "127.0.0.1";
            d.master_port = port;
            d.token = "awl-bench";
            body(&d, arg);
            fflush(stdout);
            _exit(0);
        }
    }
    for (int r = 0; r < n; r++) waitpid(pids[r], NULL, 0);
    free(pids);
}

#endif
