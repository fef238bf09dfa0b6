#!/usr/bin/env python3
"""PyTorch's float32 matrix products at the shapes of bench_kernels's
"matmul_large" lines (shakespeare-char's linear layers), the peer of those
lines: the same m, k, n and the same transposed operands, timed the same way
(median of 7 timed calls after a warm-up).

    OMP_NUM_THREADS=4 python3 bench/torch_matmul.py --threads 4

Prints one JSON line per product: {"bench":"torch_matmul","case":...,
"m":...,"k":...,"n":...,"a":"N"|"T","b":"N"|"T","gflops":...}.
"""
import argparse
import json
import statistics
import time

import torch

LARGE = [(16384, 384, 1152), (16384, 384, 384), (16384, 384, 1536), (16384, 1536, 384)]


def product(m, k, n, ta, tb):
    """a (m, k), stored (k, m) when ta; b (k, n), stored (n, k) when tb."""
    a = torch.randn(k, m).t() if ta else torch.randn(m, k)
    b = torch.randn(n, k).t() if tb else torch.randn(k, n)
    return a, b, torch.empty(m, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for m, k, n in LARGE:
        # a layer's forward, dX = dY W^T and dW = dY^T X, as bench_kernels's bench_block
        for case, (mm, kk, nn, ta, tb) in (("transformer", (m, k, n, False, False)),
                                          ("transformer_dx", (m, n, k, False, True)),
                                          ("transformer_dw", (n, m, k, True, False))):
            a, b, c = product(mm, kk, nn, ta, tb)
            torch.mm(a, b, out=c)
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                torch.mm(a, b, out=c)
                times.append(time.perf_counter() - t0)
            flops = 2.0 * mm * nn * kk
            print(json.dumps({"bench": "torch_matmul", "torch": torch.__version__,
                              "threads": args.threads, "case": case, "m": mm, "k": kk, "n": nn,
                              "a": "T" if ta else "N", "b": "T" if tb else "N",
                              "gflops": round(flops / statistics.median(times) * 1e-9, 2)}),
                  flush=True)


if __name__ == "__main__":
    main()
