"""scripts/profile_kernels.py - where one GPU training step of awl spends its time.

    python3 scripts/profile_kernels.py LIB DATA CONFIG PRECISION [DROPOUT [GRAD_CLIP]]
    python3 scripts/profile_kernels.py PEER.py DATA CONFIG PRECISION [DROPOUT]

LIB is bench/bench_gpt.c built as a shared library whose main() is renamed
awl_bench_main (the `profile` stage of scripts/gpu_run.sh builds it). The
machines lent for GPU work have neither Nsight Systems nor the permission
Nsight Compute needs, but they have PyTorch, whose profiler records every
kernel of the process through CUPTI, whoever launched it. So this runs
bench_gpt inside Python under torch.profiler, twice (2 and 7 timed steps,
each after 2 warm-up steps, after a first run that is not counted), and
prints the difference over 5: the kernel time of one step by kernel,
without what runs once (the matmul-ceiling measurement, warm-up). bench_gpt
runs with --extras off, so nothing follows its timed steps (its profiled
split and clipping measurement did, and did not always cancel out). It also
prints where the GPU stood idle inside the steps: the gaps between one
kernel's end and the next one's start, per step, summed by the kernel
that starts after the gap (gaps of 1 ms or more are left out: those are
the host's batch drawing between timed steps, which bench_gpt does not
time). A GRAD_CLIP argument (awl only) passes --grad-clip to bench_gpt,
as the bench stage does. Given the PyTorch peer script (a .py whose run()
trains one configuration, ../shared/peers/torch_gpt_gpu.py) instead, it
profiles the peer's eager step the same way, for a side-by-side view.
BENCH_ARGS in the environment adds arguments to bench_gpt's (e.g.
"--keep-casts off"). With NEIGHBOURS=TEXT in the environment it also prints to stderr, for
each run, the kernels just before and just after every kernel whose name
holds TEXT (NEIGHBOURS=Memset: which products the memsets come with).
Development tool only: nothing in awl's build or tests uses Python.
"""
import collections
import ctypes
import importlib
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile


GRAD_CLIP = 0.0
LONG_GAP_US = 1000.0


def run_awl(lib, data, config, precision, dropout, steps):
    args = ["bench_gpt", "--device", "cuda", "--configs", config, "--precisions", precision,
            "--dropout", str(dropout), "--steps", str(steps), "--warmup", "2", "--data", data,
            "--grad-clip", str(GRAD_CLIP), "--extras", "off"] + os.environ.get("BENCH_ARGS", "").split()
    argv = (ctypes.c_char_p * len(args))(*[a.encode() for a in args])
    lib.awl_bench_main(len(args), argv)


def run_peer(peer, data, config, precision, dropout, steps):
    peer.run(config, precision, "eager", steps, 2, 989.0, dropout)


def kernel_times(runner, target, data, config, precision, dropout, steps):
    """{kernel name: (total microseconds, launches)} of one run, and
    {kernel name: [idle microseconds before it, gaps]} for the gaps shorter
    than LONG_GAP_US."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        runner(target, data, config, precision, dropout, steps)
    out = collections.defaultdict(lambda: [0.0, 0])
    spans = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.name][0] += e.device_time
            out[e.name][1] += 1
            spans.append((e.time_range.start, e.time_range.end, e.name))
    spans.sort()
    idle = collections.defaultdict(lambda: [0.0, 0])
    busy_until = None
    for start, end, name in spans:
        if busy_until is not None and 0 < start - busy_until < LONG_GAP_US:
            idle[name][0] += start - busy_until
            idle[name][1] += 1
        busy_until = end if busy_until is None else max(busy_until, end)
    if os.environ.get("NEIGHBOURS"):
        # which kernels come before and after the ones whose names hold
        # NEIGHBOURS (e.g. Memset): counts of (before, after) pairs
        pairs = collections.Counter()
        for i, (_, _, name) in enumerate(spans):
            if os.environ["NEIGHBOURS"] in name and 0 < i < len(spans) - 1:
                pairs[(spans[i - 1][2][:70], spans[i + 1][2][:70])] += 1
        for (before, after), n in pairs.most_common(12):
            print(f"  {n:5d}  {before}  ->  {after}", file=sys.stderr)
    return out, idle


def per_step(long, short):
    """(microseconds, count, name) per step: the 7-step run less the 2-step one, over 5."""
    rows = []
    for name, (us, n) in long.items():
        s_us, s_n = short.get(name, (0.0, 0))
        rows.append(((us - s_us) / 5, (n - s_n) / 5, name))
    rows.sort(reverse=True)
    return rows


def main():
    global GRAD_CLIP
    lib_path, data, config, precision = sys.argv[1:5]
    dropout = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    GRAD_CLIP = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    torch.zeros(1, device="cuda")  # one CUDA context, shared with awl
    if lib_path.endswith(".py"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(lib_path)))
        runner, target = run_peer, importlib.import_module(os.path.basename(lib_path)[:-3])
        config_name = f"{config} (PyTorch eager)"
    else:
        runner, target, config_name = run_awl, ctypes.CDLL(lib_path), config
    # a run of one step first, not counted: the process's first run also
    # loads kernels and opens libraries, which leaves gaps the others lack
    kernel_times(runner, target, data, config, precision, dropout, 1)
    short, short_idle = kernel_times(runner, target, data, config, precision, dropout, 2)
    long, long_idle = kernel_times(runner, target, data, config, precision, dropout, 7)
    rows = per_step(long, short)
    total = sum(r[0] for r in rows)
    print(f"== {config_name} {precision} dropout {dropout:g}: {total / 1e3:.2f} ms of kernels per step, "
          f"{sum(r[1] for r in rows):.0f} launches")
    for us, n, name in rows[:40]:
        print(f"{us / 1e3:8.3f} ms {100 * us / total:5.1f}% {n:5.0f}  {name[:100]}")
    idle = per_step(long_idle, short_idle)
    print(f"-- idle between kernels: {sum(r[0] for r in idle) / 1e3:.2f} ms per step in "
          f"{sum(r[1] for r in idle):.0f} gaps under {LONG_GAP_US / 1e3:g} ms; by the kernel after the gap:")
    for us, n, name in idle[:15]:
        print(f"{us / 1e3:8.3f} ms {n:5.0f}  {name[:100]}")


if __name__ == "__main__":
    main()
