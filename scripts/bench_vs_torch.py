#!/usr/bin/python3
"""awl's training step against PyTorch's on the CPU, in alternated rounds.

    scripts/bench_vs_torch.py --config cpu-small --threads 2 --rounds 5 --steps 20

Each round runs, one after the other, every awl binary given (--awl, by
default build-cpu's then build's bench_gpt), PyTorch 2.11 (the venv that
../shared/peers/setup_torch2.sh makes, /tmp/torch2 by default) and PyTorch
1.13 (Debian's /usr/bin/python3) with ../shared/peers/torch_gpt_cpu.py on the
same configuration and thread count. On a shared machine the load changes
from minute to minute, so each ratio is taken inside one round, and the
summary gives the median of the per-round ratios.

Prints JSON lines on stdout:
  {"kind":"kernels", ...}   once: the BLAS of each side (awl: library,
                            version, kernels, threads from its bench line;
                            PyTorch: MKL and oneDNN versions, CPU capability,
                            OpenBLAS for 1.13, from torch.__config__.show())
  {"kind":"round", ...}     per round: tokens/s and peak RSS of each side,
                            and awl / each peer; each side's probe_gflops
                            and probe_slowest_gflops, the float32 matmul
                            rate a core got with --threads cores busy just
                            before its run (bench_cores beside the first awl
                            binary, the median and the slowest of that many
                            pinned processes; --no-probe: none), so that a
                            run slowed by other work on the machine shows
  {"kind":"summary", ...}   medians over the rounds, each side's best round,
                            and the ratio of the best rounds
Only the standard library is used, so any python3 runs it. TORCH_GPT_CPU
names the peer script where ../shared/peers is not beside the repository.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.environ.get("TORCH_GPT_CPU", os.path.join(ROOT, "..", "shared", "peers", "torch_gpt_cpu.py"))
DATA = os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt")

# the peer's flags for each reference configuration (docs/DESIGN.md's table)
PEER_ARGS = {
    "cpu-small": "--n_layer 4 --n_head 4 --n_embd 128 --block_size 64 --batch_size 16",
    "cpu-medium": "--n_layer 6 --n_head 6 --n_embd 192 --block_size 128 --batch_size 16",
    "shakespeare-char": "--n_layer 6 --n_head 6 --n_embd 384 --block_size 256 --batch_size 64",
}

# what each PyTorch computes with, printed once: torch.__config__.show()
# names MKL, oneDNN (MKL-DNN) and the vector ISA it dispatches to
TORCH_INFO = r"""
import json, re, torch
show = torch.__config__.show()
def line(key):
    m = re.search(r"^\s*- (.*%s.*)$" % key, show, re.M)
    return m.group(1).strip() if m else None
print(json.dumps({"torch": torch.__version__, "mkl": line("Math Kernel Library"),
                  "onednn": line("MKL-DNN"), "cpu_capability": line("CPU capability"),
                  "blas_info": (re.search(r"BLAS_INFO=(\w+)", show) or [None, None])[1]}))
"""


def torch_envs(venv, torch2_python):
    """The two peers: (label, python, environment)."""
    env2 = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    if not torch2_python:
        # the venv's torch links CUDA libraries it finds through LD_LIBRARY_PATH
        libs = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "*", "lib")))
        env2["LD_LIBRARY_PATH"] = ":".join(libs + ["/usr/local/cuda/lib64"])
        torch2_python = os.path.join(venv, "bin", "python")
    # Debian's torch calls BLAS through libblas.so.3; the OpenMP build of
    # OpenBLAS shares one thread pool with torch's own OpenMP
    env1 = dict(os.environ, LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu/openblas-openmp")
    return [("torch2.11", torch2_python, env2),
            ("torch1.13", "/usr/bin/python3", env1)]


def last_json(text):
    for ln in reversed(text.splitlines()):
        if ln.startswith("{"):
            return json.loads(ln)
    return None


def probe(bench_cores, threads):
    """The matmul rate a core gets now with `threads` cores busy, as the
    fields of a side's round (empty without bench_cores)."""
    if not bench_cores:
        return {}
    r = subprocess.run([bench_cores, "--cores", str(threads), "--seconds", "0.3"],
                       capture_output=True, text=True)
    for ln in r.stdout.splitlines():
        d = json.loads(ln) if ln.startswith("{") else {}
        if d.get("test") == "matmul":
            return {"probe_gflops": round(d["per_core"], 1), "probe_slowest_gflops": round(d["slowest"], 1)}
    return {}


def run_awl(binary, config, threads, steps, warmup, data):
    cmd = [binary, "--configs", config, "--threads", str(threads), "--steps", str(steps),
           "--warmup", str(warmup), "--data", data]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return last_json(r.stdout)


def run_peer(python, env, config, threads, steps, warmup, data):
    cmd = [python, PEER, "--name", config] + PEER_ARGS[config].split() + [
        "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads), "--data", data]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return last_json(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="cpu-small", choices=sorted(PEER_ARGS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--awl", action="append", metavar="LABEL=BENCH_GPT",
                    help="an awl binary to time (repeatable; the first is the one "
                         "the ratios are of); default: awl=build-cpu/bench_gpt, or build/")
    ap.add_argument("--wait-policy", choices=["default", "passive", "active"], default="default",
                    help="OMP_WAIT_POLICY for every side alike (default: left unset, "
                         "libgomp's spinning waits)")
    ap.add_argument("--venv", default="/tmp/torch2", help="PyTorch 2.11's virtualenv")
    ap.add_argument("--torch2-python", default=None,
                    help="a python whose torch is 2.11, instead of the venv's (the lent "
                         "machine's python3)")
    ap.add_argument("--data", default=DATA, help="the corpus both sides read")
    ap.add_argument("--peers", default="torch2.11,torch1.13",
                    help="which PyTorch peers to run, comma-separated (empty: none, to "
                         "compare awl binaries only)")
    ap.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True,
                    help="measure the cores' matmul rate before each side's run (bench_cores)")
    args = ap.parse_args()
    # set before any child starts, so awl and both peers wait alike
    os.environ.pop("OMP_WAIT_POLICY", None)
    if args.wait_policy != "default":
        os.environ["OMP_WAIT_POLICY"] = args.wait_policy.upper()

    awls = []
    for spec in args.awl or []:
        label, _, path = spec.partition("=")
        awls.append((label, path) if path else ("awl", label))
    if not awls:
        for b in ("build-cpu", "build"):
            path = os.path.join(ROOT, b, "bench_gpt")
            if os.path.exists(path):
                awls.append(("awl", path))
                break
    bench_cores = os.path.join(os.path.dirname(awls[0][1]), "bench_cores") if awls else ""
    if args.probe and bench_cores and not os.path.exists(bench_cores):
        print(f"bench_vs_torch: no {bench_cores} (build the bench_cores target beside "
              "bench_gpt): the rounds carry no probe_gflops", file=sys.stderr)
        bench_cores = ""
    bench_cores = bench_cores if args.probe else ""
    wanted = [p for p in args.peers.split(",") if p]
    peers = [p for p in torch_envs(args.venv, args.torch2_python) if p[0] in wanted]

    kernels = {"kind": "kernels", "config": args.config, "threads": args.threads,
               "wait_policy": args.wait_policy}
    for label, python, env in peers:
        r = subprocess.run([python, "-c", TORCH_INFO], capture_output=True, text=True, env=env)
        kernels[label] = last_json(r.stdout)

    rounds = []
    for rnd in range(1, args.rounds + 1):
        row = {"kind": "round", "round": rnd, "config": args.config, "threads": args.threads,
               "wait_policy": args.wait_policy}
        for label, path in awls:
            host = probe(bench_cores, args.threads)
            out = run_awl(path, args.config, args.threads, args.steps, args.warmup, args.data)
            row[label] = None if out is None else {
                "tokens_per_s": out["tokens_per_s"], "ms_per_step": out["ms_per_step"],
                "peak_rss_mb": out["rss_mb"], "loss_last": out["loss_last"], **host}
            if rnd == 1 and out is not None:
                kernels[label] = {k: out.get(k) for k in ("blas", "blas_kernels", "kernels_chosen_by", "gemm_f32", "threads")}
        for label, python, env in peers:
            host = probe(bench_cores, args.threads)
            out = run_peer(python, env, args.config, args.threads, args.steps, args.warmup, args.data)
            row[label] = None if out is None else {
                "tokens_per_s": round(out["tokens_per_s"]), "ms_per_step": round(1000 * out["median_step_s"], 2),
                "peak_rss_mb": round(out["peak_rss_mb"], 1), "loss_last": round(out["final_loss"], 4), **host}
            if rnd == 1 and out is not None and out["env"].get("openblas"):
                kernels[label]["openblas"] = out["env"]["openblas"].get("config")
        if rnd == 1:
            print(json.dumps(kernels), flush=True)
        first = awls[0][0]
        for label in [lb for lb, _ in awls[1:]] + [lb for lb, _, _ in peers]:
            if row.get(first) and row.get(label):
                row[f"{first}/{label}"] = round(row[first]["tokens_per_s"] / row[label]["tokens_per_s"], 3)
        print(json.dumps(row), flush=True)
        rounds.append(row)

    summary = {"kind": "summary", "config": args.config, "threads": args.threads,
               "wait_policy": args.wait_policy, "rounds": args.rounds}
    labels = [lb for lb, _ in awls] + [lb for lb, _, _ in peers]
    for key in labels + [k for k in rounds[0] if "/" in k]:
        vals = [r[key] for r in rounds if r.get(key) is not None]
        if not vals:
            continue
        if "/" in key:
            summary[key] = {"median": round(statistics.median(vals), 3),
                            "min": min(vals), "max": max(vals)}
        else:
            summary[key] = {"tokens_per_s": statistics.median(v["tokens_per_s"] for v in vals),
                            "best_tokens_per_s": max(v["tokens_per_s"] for v in vals),
                            "peak_rss_mb": max(v["peak_rss_mb"] for v in vals)}
    # the best round of each side: the nearest a loaded machine comes to a quiet one
    first = awls[0][0]
    for key in labels[1:]:
        if first in summary and key in summary:
            summary[f"best {first}/{key}"] = round(
                summary[first]["best_tokens_per_s"] / summary[key]["best_tokens_per_s"], 3)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
