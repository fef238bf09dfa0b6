"""PyTorch's torch.distributed NCCL allreduce, the peer of bench_dist --backend nccl.

Each of N ranks (one process per GPU, rank r on cuda:r) allreduces (sum) a
float32 tensor of each size 1 MiB .. 1 GiB (x4), timed as bench_dist times
awl's: a barrier, then `reps` blocking allreduces, their mean; the median of
`rounds`. busbw = algbw * 2(N-1)/N (NCCL's tests' definition). One JSON line
per size, then the 4-byte and 4 KiB latencies.

    python3 scripts/torch_nccl_allreduce.py --ranks 2 [--min-bytes 1048576]
        [--max-bytes 1073741824] [--rounds 3]
"""
import argparse, json, os, statistics, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def timed(x, reps):
    dist.barrier(device_ids=[x.device.index])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        dist.all_reduce(x)
    torch.cuda.synchronize()  # awl's allreduce returns once the GPU is done
    return (time.perf_counter() - t0) / reps


def rank_main(rank, n, port, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", rank))
    common = dict(peer="torch-nccl", torch=torch.__version__,
                  nccl=".".join(map(str, torch.cuda.nccl.version())), ranks=n)
    for nbytes in (4, 4096):
        x = torch.ones(nbytes // 4, device="cuda")
        timed(x, 20)
        t = statistics.median(timed(x, 1) for _ in range(200))
        if rank == 0:
            print(json.dumps(dict(bench="allreduce_latency", **common, bytes=nbytes,
                                  median_us=round(t * 1e6, 1))), flush=True)
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        x = torch.ones(nbytes // 4, device="cuda")
        reps = max(5, min(200, int(4 * 2**30 / nbytes)))
        timed(x, 2)
        t = statistics.median(timed(x, reps) for _ in range(args.rounds))
        if rank == 0:
            algbw = nbytes / t
            print(json.dumps(dict(bench="allreduce", **common, bytes=nbytes, us=round(t * 1e6, 1),
                                  algbw_GBs=round(algbw / 1e9, 3),
                                  busbw_GBs=round(algbw * 2 * (n - 1) / n / 1e9, 3))), flush=True)
        del x
        nbytes *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    mp.spawn(rank_main, args=(a.ranks, 29500 + os.getpid() % 400, a), nprocs=a.ranks)
