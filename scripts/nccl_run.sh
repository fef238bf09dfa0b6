#!/bin/bash
# scripts/nccl_run.sh - awl's NCCL transport (dist/nccl.c) on a machine with
# one GPU or more, in one call:
#
#     run(command="bash scripts/nccl_run.sh", carry=[".cudadev"])    # the lent machine
#
# (.cudadev: scripts/make_cudadev.sh on a dev machine). Stages, each on
# what the machine has:
#   build  scripts/gpu_build.sh's build of the library with the NCCL
#          transport (against the machine's own libnccl), test_nccl, and
#          with two GPUs bench_dist: nothing else, on all the cores;
#   tests  test_nccl: a group of one on cuda:0 (every collective in each
#          dtype, a collective behind the kernels that produce its input,
#          DDP and ZeRO-2, errors); with two GPUs or more also every
#          collective on 2-4 ranks, DDP against one process, disagreeing,
#          late and killed ranks;
#   bench  (2+ GPUs) allreduce on NCCL_RANKS ranks (default 2): latency,
#          then busbw from 1 MiB to 1 GiB, awl (bench_dist --backend nccl)
#          and PyTorch's torch.distributed NCCL allreduce
#          (scripts/torch_nccl_allreduce.py) one after the other, and the
#          two side by side;
#   ddp    (2+ GPUs) gpt2-124m in bf16 (autocast) under DDP over NCCL, 1
#          and 2 GPUs (bench_dist --ddp gpt2-124m --ddp-ranks 1,2): tokens/s,
#          the communication backward hid, the speedup.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and PyTorch's and
# NVSHMEM's switches, as the lent machines require), and
# NCCL's version is recorded (NCCL_DEBUG=VERSION for awl's, torch's own).
#
# Knobs (environment): NCCL_RANKS=2, TEST_TIMEOUT=400 (test_nccl's bound in
# seconds), JOBS=$(nproc), AWL_GPU_BUILD=/tmp/awl-nccl (the build folder).
#
# Output under $OUT: summary.txt (also printed at the end), nccl.log (every
# line of every stage), bench.jsonl. Time: not measured yet (the script has
# not run on a GPU). For scale, gpu_run.sh's build of everything took
# 26-37 s on the lent H200 (its header), and this one compiles the same
# library with fewer programs; the bench and ddp stages are bounded by
# their timeouts below (240 + 240 + 300 s).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
D=$ROOT/.cudadev
OUT=${OUT:-$ROOT/nccl_out}
B=${AWL_GPU_BUILD:-/tmp/awl-nccl}
JOBS=${JOBS:-$(nproc)}
NCCL_RANKS=${NCCL_RANKS:-2}
TEST_TIMEOUT=${TEST_TIMEOUT:-400}
SUMMARY=$OUT/summary.txt
LOG=$OUT/nccl.log
T_START=$(date +%s)
# NVLink multicast off (the lent machines' rule: it can take the host's
# GPUs out of service), for NCCL and for PyTorch
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

mkdir -p "$OUT"
: > "$SUMMARY"
: > "$LOG"
row() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - T_START )); }

. scripts/gpu_build.sh
gpu_build_check || exit 1
GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 |
    sed 's/^/gpu: /' | tee -a "$SUMMARY"
if [ -z "$NCCL_LIB" ] || [ -z "$NCCL_INC" ]; then
    row "nccl: no libnccl.so.2 with a header found (NCCL_HOME, $CUDA_HOME/lib*, the system, PyTorch's nvidia-nccl): nothing to test"
    exit 1
fi
row "nccl: $NCCL_LIB, header $NCCL_INC/nccl.h ($(grep -h -m1 -E '^#define NCCL_VERSION_CODE' "$NCCL_INC/nccl.h" | awk '{print $3}'))"

# ---- build ---------------------------------------------------------------------------
PROG_SRC=(tests/helpers/*.c tests/test_nccl.c)
[ "$GPUS" -ge 2 ] && PROG_SRC+=(bench/bench_dist.c)
echo "== build: ${#LIB_SRC[@]} library and ${#PROG_SRC[@]} program sources on $JOBS cores"
rm -f "$B/FAILED"
t0=$(date +%s)
gpu_compile "${LIB_SRC[@]}" "${PROG_SRC[@]}"
if [ ! -e "$B/FAILED" ]; then
    gpu_spawn gpu_link test_nccl "$(gpu_obj tests/test_nccl.c)" "${HELPERS[@]}"
    [ "$GPUS" -ge 2 ] && gpu_spawn gpu_link bench_dist "$(gpu_obj bench/bench_dist.c)"
    wait
fi
cat "$B"/log/*.log >> "$LOG"
grep -h -E "warning|error" "$B"/log/*.log | head -20
if [ -e "$B/FAILED" ]; then
    row "build: FAILED after $(( $(date +%s) - t0 )) s (see nccl.log)"
    exit 1
fi
row "build: $(( $(date +%s) - t0 )) s"

# ---- tests ---------------------------------------------------------------------------
echo "== tests: test_nccl on $GPUS GPU(s)"
t0=$(date +%s)
NCCL_DEBUG=VERSION OMP_NUM_THREADS=2 timeout "$TEST_TIMEOUT" "$BIN/test_nccl" > "$B/test_nccl.log" 2>&1
rc=$?
cat "$B/test_nccl.log" >> "$LOG"
grep -v -E "^NCCL version" "$B/test_nccl.log" | tail -40
row "nccl version (awl's ranks): $(grep -h -m1 -o -E 'NCCL version [^ ]+' "$B/test_nccl.log")"
grep -h -E "^test_nccl:|Checks" "$B/test_nccl.log" | sed 's/^/tests: /' | tee -a "$SUMMARY"
verdict=FAIL
[ $rc = 0 ] && verdict=pass
[ $rc = 77 ] && verdict="SKIPPED: no GPU seen"
[ $rc = 124 ] && verdict="TIMEOUT after $TEST_TIMEOUT s"
row "tests: test_nccl rc $rc ($verdict), $(( $(date +%s) - t0 )) s"

if [ "$GPUS" -lt 2 ]; then
    row "bench, ddp: skipped: $GPUS GPU (they need 2)"
    row "total: $(elapsed) s"
    exit $rc
fi

# ---- bench ---------------------------------------------------------------------------
echo "== bench: allreduce on $NCCL_RANKS GPUs, awl then PyTorch"
t0=$(date +%s)
: > "$OUT/bench.jsonl"
timeout 240 "$BIN/bench_dist" --backend nccl --ranks "$NCCL_RANKS" --min-bytes 1048576 \
    --max-bytes 1073741824 --rounds 3 2>> "$LOG" | tee -a "$OUT/bench.jsonl"
PYTHONUNBUFFERED=1 timeout 240 python3 scripts/torch_nccl_allreduce.py --ranks "$NCCL_RANKS" \
    --min-bytes 1048576 --max-bytes 1073741824 --rounds 3 2>> "$LOG" | tee -a "$OUT/bench.jsonl"
row ""
python3 - "$OUT/bench.jsonl" <<'EOF' | tee -a "$SUMMARY"
import json, sys
awl, torch, version = {}, {}, ""
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    side = torch if r.get("peer") == "torch-nccl" else awl
    version = r.get("nccl", version) if side is torch else version
    if r.get("bench") == "allreduce_latency":
        side[("lat", r["bytes"])] = r["median_us"]
    elif r.get("bench") == "allreduce":
        side[("bw", r["bytes"])] = (r["us"], r["busbw_GBs"])
print(f"allreduce (sum, float32), torch's NCCL {version}")
print(f"{'bytes':>11} {'awl us':>10} {'awl busbw':>10} {'torch us':>10} {'torch busbw':>12} {'awl/torch':>9}")
for key in sorted(set(awl) | set(torch)):
    a, t = awl.get(key), torch.get(key)
    if key[0] == "lat":
        print(f"{key[1]:>11} {a or 0:>10.1f} {'':>10} {t or 0:>10.1f} {'':>12} "
              f"{(t / a if a and t else 0):>9.2f}   (latency, median)")
    else:
        (au, ab), (tu, tb) = a or (0, 0), t or (0, 0)
        print(f"{key[1]:>11} {au:>10.1f} {ab:>10.2f} {tu:>10.1f} {tb:>12.2f} {(ab / tb if tb else 0):>9.2f}")
print("(GB/s; awl/torch: busbw ratio, or torch's latency / awl's)")
EOF
row "bench: $(( $(date +%s) - t0 )) s"

# ---- ddp -----------------------------------------------------------------------------
echo "== ddp: gpt2-124m bf16, 1 and 2 GPUs over NCCL"
t0=$(date +%s)
timeout 300 "$BIN/bench_dist" --backend nccl --no-allreduce --no-latency --ddp gpt2-124m \
    --ddp-ranks 1,2 --ddp-steps 10 --device cuda --precision bf16 2>> "$LOG" |
    tee -a "$OUT/bench.jsonl" > "$B/ddp.jsonl"
python3 - "$B/ddp.jsonl" <<'EOF' | tee -a "$SUMMARY"
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("bench") == "ddp_step":
        print(f"ddp: {r['ranks']} GPU {r['communication']:8} {r['ms_per_step']:8.1f} ms/step "
              f"{r['tokens_per_s']:9.0f} tok/s  comm {r['comm_ms']:6.1f} ms  wait {r['wait_ms']:6.1f} ms  "
              f"hidden {r['hidden']:.2f}  ({r['buckets']} buckets)")
    elif r.get("bench") == "ddp_scaling":
        speedup = next(v for k, v in r.items() if k.startswith("speedup"))
        print(f"ddp scaling: {r['ranks']} GPU {r['communication']:8} "
              f"{r['median_tokens_per_s']:9.0f} tok/s  speedup {speedup:.3f}")
EOF
row "ddp: $(( $(date +%s) - t0 )) s"
row "total: $(elapsed) s"
exit $rc
