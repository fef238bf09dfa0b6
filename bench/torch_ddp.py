#!/usr/bin/env python3
"""PyTorch's DistributedDataParallel (gloo, CPU) on the GPT of the CPU peer, the
peer of bench_dist's ddp_step lines: tokens/s of all ranks together for each rank
count, the counts alternated within each round, and the speedup over the first
count from the medians.

    python3 bench/torch_ddp.py --config cpu-medium --ranks 1,4 --threads 4 \
        --steps 10 --rounds 3 --peer ../shared/peers/torch_gpt_cpu.py

As bench_dist does for awl: each rank is a process pinned to `threads` cores of
its own (rank r to cores r*threads ...), draws its own random batches (the
global batch is the sum of the ranks'), and trains with AdamW; one rank trains
without DDP (no process group), more ranks under DDP with its default buckets
(25 MB). A timed step is zero_grad + forward + backward (DDP's allreduce
overlapping it) + optimizer step; the step time is the slowest rank's median
over --steps steps after --warmup. The model and optimizer are the CPU peer's
(torch_gpt_cpu.py's GPT and make_optimizer, imported from --peer).
"""
import argparse
import importlib.util
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CONFIGS = {  # n_layer, n_head, n_embd, block, batch (DESIGN.md's reference configurations)
    "cpu-small": (4, 4, 128, 64, 16),
    "cpu-medium": (6, 6, 192, 128, 16),
}


def load_peer(path):
    spec = importlib.util.spec_from_file_location("torch_gpt_cpu", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rank_main(rank, n, args, port, results):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= n * args.threads:
        os.sched_setaffinity(0, cores[rank * args.threads:(rank + 1) * args.threads])
    torch.set_num_threads(args.threads)
    torch.manual_seed(1337 + rank)
    peer = load_peer(args.peer)
    n_layer, n_head, n_embd, block, batch = CONFIGS[args.config]
    model = peer.GPT(65, block, n_layer, n_head, n_embd)
    if n > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=n)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = peer.make_optimizer(model, 1e-3, (0.9, 0.95), 0.1, False)
    times = []
    for step in range(args.warmup + args.steps):
        idx = torch.randint(0, 65, (batch, block))
        tgt = torch.randint(0, 65, (batch, block))
        if n > 1:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        _, loss = model(idx, tgt)
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    results[rank] = statistics.median(times)
    if n > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="cpu-medium", choices=sorted(CONFIGS))
    ap.add_argument("--ranks", default="1,4", help="comma-separated rank counts")
    ap.add_argument("--threads", type=int, default=4, help="threads (and cores) per rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                                                   "peers", "torch_gpt_cpu.py"))
    args = ap.parse_args()
    counts = [int(c) for c in args.ranks.split(",")]
    _, _, _, block, batch = CONFIGS[args.config]
    rates = {n: [] for n in counts}
    manager = mp.Manager()  # each run's ranks report their step times through it
    for rnd in range(args.rounds):
        for n in counts:
            results = manager.dict()
            port = 29500 + (os.getpid() + 7 * rnd + n) % 1000
            mp.spawn(rank_main, args=(n, args, port, results), nprocs=n)
            step_s = max(results.values())
            rate = n * batch * block / step_s
            rates[n].append(rate)
            print(json.dumps({"bench": "torch_ddp_step", "torch": torch.__version__,
                              "backend": "gloo" if n > 1 else "none", "config": args.config,
                              "threads": args.threads, "ranks": n, "round": rnd + 1,
                              "ms_per_step": round(step_s * 1e3, 2),
                              "tokens_per_s": round(rate)}), flush=True)
    base = statistics.median(rates[counts[0]])
    for n in counts:
        med = statistics.median(rates[n])
        print(json.dumps({"bench": "torch_ddp_scaling", "torch": torch.__version__,
                          "config": args.config, "threads": args.threads, "ranks": n,
                          "rounds": args.rounds, "median_tokens_per_s": round(med),
                          "speedup_vs_1_rank": round(med / base, 3)}), flush=True)


if __name__ == "__main__":
    main()
