#!/bin/bash
# scripts/gpu_run.sh - build awl on a GPU machine and run its GPU stages.
#
#     STAGES=tests,kernels,bench,train bash scripts/gpu_run.sh   # STAGES=all is the same
#
# Made for the lent H200 machine (the `device` tool: one `run` with carry
# [".cudadev"]), whose image has nvcc, gcc and PyTorch but no pkg-config,
# OpenBLAS, Check or zlib headers. So the build is no CMake but
# scripts/gpu_build.sh's: gcc and nvcc for sm_90a, all in parallel,
# against what the git-ignored folder .cudadev carries from a dev machine
# (scripts/make_cudadev.sh fills it; gpu_build.sh lists it), and also
#     .cudadev/data/tinyshakespeare.txt      (from ../shared/data)
#     .cudadev/torch_gpt_gpu.py              (from ../shared/peers: the PyTorch peer)
# Only the checkout travels to the device, not ../shared: hence the copies.
#
# Stages (each writes its logs under $OUT and adds rows to the summary,
# printed at the end and kept in $OUT/summary.txt; at most 8 files come
# back from $OUT, so logs are concatenated):
#   tests  the CUDA backend through awl-check (tools/awl-check): the
#          conformance run (`awl-check --device cuda --strict`) and the float64
#          gradient checks (`--grad`); test_cuda (the same harness on every
#          attention rung and in TF32 mode, and the device's memory, refusals
#          and TF32 products); test_backend on cuda, test_autocast, the
#          op/nn/gradcheck suites with AWL_TEST_DEVICE=cuda:0 and the CPU-only
#          suites (test_student: the student skeleton), all at once (one
#          process each, CK_FORK=no), each under TEST_TIMEOUT;
#   profile  kernel time of one training step by kernel, for the pairs in
#          PROFILE (scripts/profile_kernels.py: torch.profiler over bench_gpt
#          built as a shared library); $OUT/profile.txt; not part of all;
#   profiler  awl's own op profiler (docs/profiling.md) on the GPU:
#          test_profiler (its CUDA case: device time from events, the device
#          track, the chip's peak), train_gpt --profile on shakespeare-char
#          in bf16 (the summary and the memory ledger in
#          $OUT/profiler.log, the trace checked as JSON with python3 and
#          kept as $OUT/profiler-trace.json.gz), and bench_gpt's step split
#          and MFU; not part of all;
#   kernels  bench_cuda: every fused kernel (and each attention rung) against
#          the copy and GEMM ceilings measured in the same process, and
#          `awl-check --device cuda --perf` (each primitive against the CPU
#          backend); JSON lines in $OUT/kernels.jsonl;
#   cublas  bench/bench_cublas.cu: cuBLAS's float32 modes (sgemm, BF16x9
#          emulation, TF32, 3xTF32 as one TF32 product) with their errors
#          against float64, cuBLASLt's GELU epilogues against a GEMM and
#          a GELU kernel, and every algorithm cuBLASLt's heuristic offers for
#          the MLP's products, timed; $OUT/cublas.jsonl; not part of all;
#   bench  bench_gpt --device cuda and the PyTorch peer (eager; torch.compile
#          for the triples in TORCH_COMPILE) on shakespeare-char and gpt2-124m
#          in fp32, tf32 and bf16, at each dropout of BENCH_DROPOUT (both
#          sides get the same --dropout, and both clip the gradients' norm to
#          1.0 every step, the peer's clip_grad_norm_ and bench_gpt's
#          --grad-clip 1); JSON lines in $OUT/bench.jsonl;
#   generate  test_generate on cuda:0 (cached attention against uncached,
#          cached generation against the full recompute), then bench_generate
#          and its PyTorch peer (bench/torch_generate.py, eager with its own
#          key/value cache) on GEN_CONFIGS in GEN_PRECISIONS: decode tokens/s
#          with and without the cache, GEN_NEW new tokens after a prompt of
#          16 for each batch of GEN_BATCHES (prompts decoded together),
#          GEN_ROUNDS rounds; JSON lines in $OUT/generate.jsonl (awl's
#          messages, and with GEN_PROFILE=1 its op profile of each mode, in
#          generate-profile.txt, the traces beside it); not part of all;
#   train  two 100-step runs per DET_SETTINGS pair (same seed, same losses?),
#          then train_gpt on tinyshakespeare, shakespeare-char with nanoGPT's
#          settings (lr 1e-3 warmup 100 cosine to 1e-4, dropout 0.2, batch
#          64, block 256, clip 1, wd 0.1) in TRAIN_PRECISION; prints the final
#          validation loss, the wall time, and when the val loss first
#          reached TARGET_LOSS.
#
# Knobs (environment), with their defaults: STAGES=all, BENCH_STEPS=10,
# BENCH_WARMUP=3, BENCH_CONFIGS="shakespeare-char gpt2-124m",
# BENCH_PRECISIONS="fp32 tf32 bf16", BENCH_DROPOUT="shakespeare-char:0,0.2
# gpt2-124m:0,0.1" (config:dropouts; a config not named runs at 0),
# TORCH_COMPILE="shakespeare-char:bf16:0.2 gpt2-124m:bf16:0.1
# gpt2-124m:bf16:0" (config:precision:dropout; "" for none),
# DET_SETTINGS="bf16:0.2 bf16:0 fp32:0.2 fp32:0" (precision:dropout),
# TRAIN_STEPS=5000, TRAIN_PRECISION=bf16, EVAL_INTERVAL=250, EVAL_ITERS=50,
# TARGET_LOSS=1.50, TEST_TIMEOUT=150, TIME_BUDGET=560, SUITES (the suites
# the tests stage runs, awl-check_cuda and awl-check_cuda_grad among them;
# default all), CHECK_OP (awl-check's --op in the tests stage, e.g.
# attention or dropout; default all), CUDA_CASE (test_cuda's group, e.g.
# fused; default all).
#
# Time (H200, the last full call on 2026-11-30, before the CUDA suites ran
# through awl-check, whose stage is not timed there yet): build 26-37 s,
# tests 43-60 s, kernels 2 s, bench_gpt all six runs about
# 10 s, the peer eager about 35 s, train 30 ms a step in bf16 (dropout 0.2
# sends attention down the composed path): 155 s for 5000 steps; the lent
# machine's start adds about a minute of held time. torch.compile
# takes the rest: each compile run gets what is left of TIME_BUDGET after
# the train stage's reserve (at most 150 s) and is skipped, with a line in
# the summary, when less than 60 s is left. STAGES=all then ends within
# TIME_BUDGET seconds of starting: run it with timeout_s 600.
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
D=$ROOT/.cudadev
OUT=${OUT:-$ROOT/gpu_out}
B=${AWL_GPU_BUILD:-/tmp/awl-gpu}
STAGES=${STAGES:-all}
[ "$STAGES" = all ] && STAGES=tests,kernels,bench,train
BENCH_STEPS=${BENCH_STEPS:-10}
BENCH_WARMUP=${BENCH_WARMUP:-3}
BENCH_CONFIGS=${BENCH_CONFIGS:-shakespeare-char gpt2-124m}
BENCH_PRECISIONS=${BENCH_PRECISIONS:-fp32 tf32 bf16}
BENCH_DROPOUT=${BENCH_DROPOUT-shakespeare-char:0,0.2 gpt2-124m:0,0.1}
TORCH_COMPILE=${TORCH_COMPILE-shakespeare-char:bf16:0.2 gpt2-124m:bf16:0.1 gpt2-124m:bf16:0}
DET_SETTINGS=${DET_SETTINGS:-bf16:0.2 bf16:0 fp32:0.2 fp32:0}
TRAIN_STEPS=${TRAIN_STEPS:-5000}
TRAIN_PRECISION=${TRAIN_PRECISION:-bf16}
EVAL_INTERVAL=${EVAL_INTERVAL:-250}
TARGET_LOSS=${TARGET_LOSS:-1.50}
EVAL_ITERS=${EVAL_ITERS:-50}
TEST_TIMEOUT=${TEST_TIMEOUT:-150}
SUITES=${SUITES:-}
CHECK_OP=${CHECK_OP:-}
CUDA_CASE=${CUDA_CASE:-}
TIME_BUDGET=${TIME_BUDGET:-560}
GEN_CONFIGS=${GEN_CONFIGS:-cpu-small,shakespeare-char,gpt2-124m}
GEN_PRECISIONS=${GEN_PRECISIONS:-fp32 bf16}
GEN_NEW=${GEN_NEW:-256}
GEN_ROUNDS=${GEN_ROUNDS:-3}
GEN_BATCHES=${GEN_BATCHES:-1}
JOBS=$(nproc)
DATA=$D/data/tinyshakespeare.txt
SUMMARY=$OUT/summary.txt
T_START=$(date +%s)

mkdir -p "$OUT" "$B/obj" "$B/bin" "$B/log"
: > "$SUMMARY"
elapsed() { echo $(( $(date +%s) - T_START )); }
row() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
has_stage() { [[ ",$STAGES," == *",$1,"* ]]; }
# Seconds to keep for the train stage while it is still to run (15 ms a
# step with dropout in the fused kernels, start and evaluations, and the
# determinism runs).
train_reserve() { if has_stage train; then echo $(( TRAIN_STEPS * 15 / 1000 + 90 )); else echo 0; fi; }

. scripts/gpu_build.sh
gpu_build_check include/cblas.h lib/libopenblas.so.0 data/tinyshakespeare.txt torch_gpt_gpu.py || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$SUMMARY"

# ---- build (scripts/gpu_build.sh) --------------------------------------------------------
TEST_SRC=(tests/test_*.c)
CHECK_SRC=(tools/awl-check/*.c) # awl-check: main.c and the harness the suites share
TRAIN_GPT_SRC=(examples/train_gpt/*.c)
OPTIONS_SRC=examples/common/options.c # train_gpt's and generate's command lines
PROG_SRC=(tests/helpers/*.c "${TRAIN_GPT_SRC[@]}" "$OPTIONS_SRC" bench/bench_gpt.c bench/bench_cuda.c
          bench/bench_generate.c examples/generate/main.c
          "${CHECK_SRC[@]}" "${TEST_SRC[@]}")
echo "== build: ${#LIB_SRC[@]} library and ${#PROG_SRC[@]} program sources on $JOBS cores"
rm -f "$B/FAILED"
t0=$(date +%s)
gpu_compile "${LIB_SRC[@]}" "${PROG_SRC[@]}"
HARNESS=() # awl-check's harness, without its main
for src in "${CHECK_SRC[@]}"; do
    [ "$src" = tools/awl-check/main.c ] || HARNESS+=("$(gpu_obj "$src")")
done
if [ ! -e "$B/FAILED" ]; then
    TRAIN_GPT_OBJ=()
    for src in "${TRAIN_GPT_SRC[@]}"; do TRAIN_GPT_OBJ+=("$(gpu_obj "$src")"); done
    gpu_spawn gpu_link train_gpt "${TRAIN_GPT_OBJ[@]}" "$(gpu_obj "$OPTIONS_SRC")"
    gpu_spawn gpu_link bench_gpt "$(gpu_obj bench/bench_gpt.c)"
    gpu_spawn gpu_link bench_cuda "$(gpu_obj bench/bench_cuda.c)"
    gpu_spawn gpu_link bench_generate "$(gpu_obj bench/bench_generate.c)"
    gpu_spawn gpu_link generate "$(gpu_obj examples/generate/main.c)" "$(gpu_obj "$OPTIONS_SRC")"
    gpu_spawn gpu_link awl-check "$(gpu_obj tools/awl-check/main.c)" "${HARNESS[@]}" "${HELPERS[@]}"
    for src in "${TEST_SRC[@]}"; do
        gpu_spawn gpu_link "$(basename "$src" .c)" "$(gpu_obj "$src")" "${HELPERS[@]}" "${HARNESS[@]}"
    done
    wait
fi
cat "$B"/log/*.log > "$OUT/build.log"
grep -h -E "warning|error" "$B"/log/*.log | head -20
if [ -e "$B/FAILED" ]; then
    row "build: FAILED after $(( $(date +%s) - t0 )) s (see build.log)"
    exit 1
fi
row "build: $(( $(date +%s) - t0 )) s"

# ---- tests ------------------------------------------------------------------------------
# Runs one suite (unless SUITES names others): name, then env assignments;
# output to $B/log/run_<name>.log.
run_suite() {
    local name=$1 t0=$(date +%s); shift
    [ -n "$SUITES" ] && [[ " $SUITES " != *" $name "* ]] && return
    env OMP_NUM_THREADS=2 CK_FORK=no "$@" timeout "$TEST_TIMEOUT" "$BIN/$name" \
        > "$B/log/run_$name.log" 2>&1
    local rc=$? result=pass
    [ $rc = 124 ] && result=TIMEOUT
    [ $rc != 0 ] && [ $rc != 124 ] && result="FAIL(rc=$rc)"
    echo "$name|$result|$(( $(date +%s) - t0 ))" > "$B/log/result_$name"
}

# Runs awl-check under a name for the summary: name, then its arguments.
run_check() {
    local name=$1 t0=$(date +%s); shift
    [ -n "$SUITES" ] && [[ " $SUITES " != *" $name "* ]] && return
    env OMP_NUM_THREADS=2 timeout "$TEST_TIMEOUT" "$BIN/awl-check" "$@" > "$B/log/run_$name.log" 2>&1
    local rc=$? result=pass
    [ $rc = 124 ] && result=TIMEOUT
    [ $rc != 0 ] && [ $rc != 124 ] && result="FAIL(rc=$rc)"
    echo "$name|$result|$(( $(date +%s) - t0 ))" > "$B/log/result_$name"
}

stage_tests() {
    echo "== tests (each under ${TEST_TIMEOUT} s, all at once)"
    local t0=$(date +%s) gpu_suites=(test_ops_convert test_ops_elementwise test_ops_index
        test_ops_matmul test_ops_reduce test_ops_shape test_nn test_gpt test_checkpoint
        test_higher_order test_errors test_generate test_profiler test_optim)
    local cpu_suites=(test_tensor test_autograd test_data test_resume test_safetensors
        test_student)
    rm -f "$B"/log/result_* "$B"/log/run_*
    run_check awl-check_cuda --device cuda --strict --quiet ${CHECK_OP:+--op $CHECK_OP} &
    run_check awl-check_cuda_grad --device cuda --grad --quiet ${CHECK_OP:+--op $CHECK_OP} &
    run_suite test_cuda ${CUDA_CASE:+CK_RUN_CASE=$CUDA_CASE} &
    run_suite test_backend AWL_TEST_BACKEND=cuda &
    run_suite test_autocast &
    for s in "${gpu_suites[@]}"; do run_suite "$s" AWL_TEST_DEVICE=cuda:0 & done
    for s in "${cpu_suites[@]}"; do run_suite "$s" & done
    wait
    : > "$OUT/tests.log"
    for f in "$B"/log/run_*.log; do
        { echo "######## $(basename "$f" .log | sed 's/^run_//')"; cat "$f"; } >> "$OUT/tests.log"
    done
    row ""
    row "suite                  device   result       s   checks"
    for f in "$B"/log/result_*; do
        IFS='|' read -r name result secs < "$f"
        local dev=cpu checks
        case " awl-check_cuda awl-check_cuda_grad test_cuda test_backend test_autocast ${gpu_suites[*]} " in *" $name "*) dev=cuda;; esac
        checks=$(grep -h -E "^[0-9]+%: Checks|^[0-9]+ passed, [0-9]+ failed" "$B/log/run_$name.log" | tr '\n' ' ')
        [ -z "$checks" ] && checks=$(grep -h "skipped" "$B/log/run_$name.log" | head -1)
        row "$(printf '%-22s %-8s %-12s %3s  %s' "$name" "$dev" "$result" "$secs" "$checks")"
    done
    grep -h "bf16 vs fp32\|checkpointed blocks\|AdamW steps on one batch\|kept casts" "$B/log/run_test_autocast.log" |
        sed 's/^/autocast: /' | tee -a "$SUMMARY"
    row "tests: $(( $(date +%s) - t0 )) s"
}

# ---- kernels ----------------------------------------------------------------------------
stage_kernels() {
    echo "== kernels: bench_cuda against the copy and GEMM ceilings"
    local t0=$(date +%s)
    timeout 240 "$BIN/bench_cuda" > "$OUT/kernels.jsonl" 2>&1
    timeout 120 "$BIN/awl-check" --device cuda --perf --json >> "$OUT/kernels.jsonl" 2>&1
    grep -E "ceiling|attention|PERF" "$OUT/kernels.jsonl"
    row "kernels: $(( $(date +%s) - t0 )) s (all lines in kernels.jsonl)"
}

# ---- cublas -----------------------------------------------------------------------------
# cuBLAS's own float32 modes and GELU epilogues at gpt2-124m's shapes, and
# cuBLASLt's candidates for those products, apart from awl
# (bench/bench_cublas.cu); JSON lines in $OUT/cublas.jsonl.
stage_cublas() {
    echo "== cublas: float32 modes, GELU epilogues and their candidates (bench/bench_cublas.cu)"
    local t0=$(date +%s)
    nvcc -std=c++17 -O2 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror -I. bench/bench_cublas.cu \
        backends/cuda/cuda_gemm_tf32x3.cu -L"$CUBLAS_DIR" -lcublas -lcublasLt -o "$B/bench_cublas" &&
        timeout 200 "$B/bench_cublas" > "$OUT/cublas.jsonl" 2>&1
    cat "$OUT/cublas.jsonl"
    row "cublas: $(( $(date +%s) - t0 )) s (cublas.jsonl)"
}

# ---- profile ----------------------------------------------------------------------------
# PROFILE="config:precision[:dropout] ..." (default gpt2-124m:bf16
# shakespeare-char:fp32; dropout 0 where none is given);
# PROFILE_PEER=1 profiles the PyTorch peer's eager step on each pair too.
# awl's steps clip the gradients' norm to 1, as in the bench stage. A kernel
# that starts early (programmatic dependent launch, docs/cuda.md) counts its
# wait for the kernel before it in its own time; AWL_CUDA_DEPENDENT_LAUNCH=off
# in the environment gives each kernel's time alone.
stage_profile() {
    echo "== profile: kernel time per step (scripts/profile_kernels.py)"
    local t0=$(date +%s) pair fields
    { gcc $CFLAGS -Dmain=awl_bench_main -c bench/bench_gpt.c -o "$B/obj/bench_gpt_lib.o" &&
        nvcc $GENCODE -shared -o "$B/bin/libawl_bench.so" "$B/obj/bench_gpt_lib.o" \
            "${LIB_OBJ[@]}" -L$D/lib -l:libz.so.1 -lgomp -ldl -lm -lrt \
            -lpthread; } > "$B/log/profile_build.log" 2>&1 ||
        { row "profile: build failed"; tail -20 "$B/log/profile_build.log"; return; }
    : > "$OUT/profile.txt"
    for pair in ${PROFILE:-gpt2-124m:bf16 shakespeare-char:fp32}; do
        for target in "$B/bin/libawl_bench.so" ${PROFILE_PEER:+$D/torch_gpt_gpu.py}; do
            IFS=: read -r -a fields <<< "$pair"
            timeout 120 python3 scripts/profile_kernels.py "$target" "$DATA" "${fields[0]}" \
                "${fields[1]}" "${fields[2]:-0}" 1 2>&1 | grep -v -E '^\{|_warn_once|UserWarning' |
                tee -a "$OUT/profile.txt"
        done
    done
    row "profile: $(( $(date +%s) - t0 )) s (profile.txt)"
}

# ---- bench ------------------------------------------------------------------------------
# The dropouts BENCH_DROPOUT lists for config $1 (spaces between), 0 if none.
dropouts_of() {
    local pair
    for pair in $BENCH_DROPOUT; do
        [ "${pair%%:*}" = "$1" ] && { echo "${pair#*:}" | tr ',' ' '; return; }
    done
    echo 0
}

stage_bench() {
    echo "== bench: $BENCH_STEPS steps after $BENCH_WARMUP warm-up"
    local t0=$(date +%s) cfg p drop
    : > "$OUT/bench.jsonl"
    : > "$OUT/bench.log"
    for cfg in $BENCH_CONFIGS; do
        for drop in $(dropouts_of "$cfg"); do
            for p in $BENCH_PRECISIONS; do
                timeout 120 "$BIN/bench_gpt" --device cuda --configs "$cfg" --precisions "$p" \
                    --dropout "$drop" --grad-clip 1 --steps "$BENCH_STEPS" --warmup "$BENCH_WARMUP" \
                    --data "$DATA" 2>> "$OUT/bench.log" | tee -a "$OUT/bench.jsonl" ||
                    echo "{\"bench\":\"gpt_train\",\"config\":\"$cfg\",\"precision\":\"$p\",\"dropout\":$drop,\"error\":\"rc $?\"}" >> "$OUT/bench.jsonl"
            done
        done
        echo "awl $cfg done at $(elapsed) s"
    done
    local precs=${BENCH_PRECISIONS// /,}
    for cfg in $BENCH_CONFIGS; do
        for drop in $(dropouts_of "$cfg"); do
            PYTHONUNBUFFERED=1 timeout 240 python3 "$D/torch_gpt_gpu.py" --configs "$cfg" \
                --precisions "$precs" --modes eager --dropout "$drop" --steps "$BENCH_STEPS" \
                --warmup "$BENCH_WARMUP" 2>> "$OUT/bench.log" | tee -a "$OUT/bench.jsonl"
        done
        echo "torch eager $cfg done at $(elapsed) s"
    done
    local triple left
    for triple in $TORCH_COMPILE; do
        left=$(( TIME_BUDGET - $(elapsed) - $(train_reserve) ))
        [ $left -gt 150 ] && left=150
        if [ $left -lt 60 ]; then
            row "torch compile $triple: skipped, $left s left of TIME_BUDGET"
            continue
        fi
        IFS=: read -r cfg p drop <<< "$triple"
        PYTHONUNBUFFERED=1 timeout $left python3 "$D/torch_gpt_gpu.py" --configs "$cfg" \
            --precisions "$p" --modes compile --dropout "${drop:-0}" --steps "$BENCH_STEPS" \
            --warmup "$BENCH_WARMUP" 2>> "$OUT/bench.log" | tee -a "$OUT/bench.jsonl"
        echo "torch compile $triple done at $(elapsed) s (limit $left s)"
    done
    row ""
    python3 - "$OUT/bench.jsonl" <<'EOF' | tee -a "$SUMMARY"
import json, sys
awl, torch = {}, {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    key = (r.get("config"), r.get("precision"), float(r.get("dropout") or 0))
    if r.get("peer") == "pytorch":
        torch[key + (r["mode"],)] = r
    elif "tokens_per_s" in r:
        awl[key] = r
    elif "error" in r and "mode" not in r:
        awl[key] = {"tokens_per_s": 0, "ms_per_step": 0, "mfu": 0, "peak_mb": 0}
def tok(r): return r.get("tokens_s") or r.get("tokens_per_s") or 0
print(f"{'config':17} {'prec':5} {'drop':>4} {'awl tok/s':>10} {'ms/step':>8} {'MFU':>6} "
      f"{'peak MB':>8} {'torch eager':>11} {'ms':>7} {'compile':>9} {'awl/eager':>9} "
      f"{'awl/compile':>11}")
for key in sorted(set(awl) | {k[:3] for k in torch}):
    a = awl.get(key, {})
    e, c = torch.get(key + ("eager",), {}), torch.get(key + ("compile",), {})
    ratio = lambda t: f"{tok(a) / tok(t):.2f}" if tok(a) and tok(t) else "-"
    print(f"{key[0]:17} {key[1]:5} {key[2]:>4g} {tok(a):>10.0f} {a.get('ms_per_step', 0):>8.2f} "
          f"{a.get('mfu', 0):>6.3f} {a.get('peak_mb', 0):>8.0f} {tok(e):>11.0f} "
          f"{e.get('ms_step', 0):>7.2f} {tok(c):>9.0f} {ratio(e):>9} {ratio(c):>11}")
print("(awl MFU: against the matmul rate of its precision measured in-process; "
      "torch's MFU in bench.jsonl is against 989 TFLOP/s)")
EOF
    row "bench: $(( $(date +%s) - t0 )) s"
}

# ---- generate ---------------------------------------------------------------------------
stage_generate() {
    echo "== generate: test_generate on cuda:0, decode tokens/s with and without the cache"
    local t0=$(date +%s) p
    env OMP_NUM_THREADS=2 CK_FORK=no AWL_TEST_DEVICE=cuda:0 timeout "$TEST_TIMEOUT" \
        "$BIN/test_generate" > "$B/log/run_generate.log" 2>&1
    row "test_generate (cuda:0): rc $? $(grep -h -E '^[0-9]+%: Checks' "$B/log/run_generate.log")"
    grep -h -E ':[FE]:' "$B/log/run_generate.log" | head -5 | tee -a "$SUMMARY"
    : > "$OUT/generate.jsonl"
    for batch in $GEN_BATCHES; do
        for p in $GEN_PRECISIONS; do
            timeout 200 "$BIN/bench_generate" --device cuda --precision "$p" --configs "$GEN_CONFIGS" \
                --new "$GEN_NEW" --rounds "$GEN_ROUNDS" --batch "$batch" \
                ${GEN_PROFILE:+--profile "$OUT/generate-profile-$p-b$batch"} \
                2>> "$OUT/generate-profile.txt" | tee -a "$OUT/generate.jsonl"
            PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_generate.py --device cuda \
                --precision "$p" --configs "$GEN_CONFIGS" --new "$GEN_NEW" --rounds "$GEN_ROUNDS" \
                --batch "$batch" | tee -a "$OUT/generate.jsonl"
        done
    done
    row ""
    python3 - "$OUT/generate.jsonl" <<'EOF' | tee -a "$SUMMARY"
import json, sys
rows = {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    who = "awl" if r["impl"] == "awl" else "torch"
    rows[(r["config"], r["precision"], r["batch"], r["mode"], who)] = r
print(f"{'config':17} {'prec':5} {'batch':>5} {'new':>4} {'awl cache':>10} {'recompute':>10} "
      f"{'speedup':>8} {'torch cache':>11} {'recompute':>10} {'speedup':>8} {'awl/torch':>9}"
      "  (decode tokens/s)")
for cfg, prec, batch in sorted({k[:3] for k in rows}):
    g = lambda mode, who: rows.get((cfg, prec, batch, mode, who), {}).get("decode_tokens_per_s", 0)
    ac, ar = g("cache", "awl"), g("recompute", "awl")
    tc, tr = g("cache", "torch"), g("recompute", "torch")
    new = rows.get((cfg, prec, batch, "cache", "awl"), {}).get("new", 0)
    q = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    print(f"{cfg:17} {prec:5} {batch:>5} {new:>4} {ac:>10.1f} {ar:>10.1f} {q(ac, ar):>8} "
          f"{tc:>11.1f} {tr:>10.1f} {q(tc, tr):>8} {q(ac, tc):>9}")
EOF
    row "generate: $(( $(date +%s) - t0 )) s"
}

# ---- train ------------------------------------------------------------------------------
stage_train() {
    # determinism (issue 4 point 8, issue 13 point 6): two short runs with
    # one seed give the same losses, step by step, for each precision:dropout
    # of DET_SETTINGS (dropout runs draw their masks inside the fused kernels)
    local setting prec drop
    for setting in $DET_SETTINGS; do
        prec=${setting%:*} drop=${setting#*:}
        for run in 1 2; do
            "$BIN/train_gpt" --device cuda --config shakespeare-char --data "$DATA" \
                --precision "$prec" --steps 100 --dropout "$drop" --eval-interval 0 \
                --eval-iters 2 --sample-tokens 0 --seed 7 --log "/tmp/det$run.csv" > /dev/null 2>&1
            cut -d, -f1,2 "/tmp/det$run.csv" > "/tmp/det$run.loss"
        done
        if [ -s /tmp/det1.loss ] && cmp -s /tmp/det1.loss /tmp/det2.loss; then
            row "determinism ($prec, dropout $drop): two 100-step runs, identical losses ($(tail -1 /tmp/det1.loss))"
        else
            row "determinism ($prec, dropout $drop): runs DIFFER or failed: $(diff /tmp/det1.loss /tmp/det2.loss | head -3 | tr '\n' ' ')"
        fi
    done
    echo "== train: shakespeare-char, $TRAIN_STEPS steps, $TRAIN_PRECISION"
    local t0=$(date +%s)
    "$BIN/train_gpt" --device cuda --config shakespeare-char --data "$DATA" \
        --precision "$TRAIN_PRECISION" --steps "$TRAIN_STEPS" --lr 1e-3 --min-lr 1e-4 \
        --warmup 100 --dropout 0.2 --batch 64 --block 256 --grad-clip 1.0 --weight-decay 0.1 \
        --beta2 0.99 --target-loss "$TARGET_LOSS" \
        --eval-interval "$EVAL_INTERVAL" --eval-iters "$EVAL_ITERS" --log-interval 250 \
        --log "$OUT/train_log.csv" --sample-tokens 200 --seed 1337 2>&1 | tee "$OUT/train.log"
    local rc=$? wall=$(( $(date +%s) - t0 ))
    row ""
    row "train: rc $rc, wall $wall s; $(grep -h '^done:' "$OUT/train.log")"
    row "train: $(grep -h '^target:' "$OUT/train.log")"
    row "train: final $(grep -h -E "step $TRAIN_STEPS: train loss" "$OUT/train.log" | tail -1)"
    row "train: $(grep -h -E '^step [0-9]+/' "$OUT/train.log" | tail -1)"
}

stage_profiler() {
    echo "== profiler: awl's op profiler and memory ledger on cuda"
    local t0=$(date +%s) log=$OUT/profiler.log
    env OMP_NUM_THREADS=2 CK_FORK=no timeout "$TEST_TIMEOUT" "$BIN/test_profiler" > "$log" 2>&1
    row "profiler: test_profiler rc $? ($(grep -h -E '^[0-9]+%: Checks|bf16 peak' "$log" | tr '\n' ' '))"
    "$BIN/train_gpt" --device cuda --config shakespeare-char --data "$DATA" --precision bf16 \
        --steps 8 --profile /tmp/awl-profile.json --profile-steps 4:6 --memory-ledger \
        --log-interval 8 --eval-iters 2 --sample-tokens 0 --log /tmp/awl-profile.csv >> "$log" 2>&1
    row "profiler: train_gpt --profile rc $?; $(grep -h '^profile: [0-9]' "$log")"
    grep -h -A 14 '^ceilings on' "$log" | sed 's/^/profiler: /' | tee -a "$SUMMARY"
    grep -h '^memory step 8' "$log" | sed 's/^/profiler: /' | tee -a "$SUMMARY"
    python3 -c "import json,sys,collections; d=json.load(open(sys.argv[1])); ev=d['traceEvents']; c=collections.Counter((e.get('pid'),e.get('cat')) for e in ev if e.get('ph')=='X'); print('profiler: trace valid JSON,', len(ev), 'events; complete events by (pid, cat):', dict(c))" \
        /tmp/awl-profile.json 2>&1 | tee -a "$SUMMARY"
    gzip -c /tmp/awl-profile.json > "$OUT/profiler-trace.json.gz"
    "$BIN/bench_gpt" --device cuda --configs shakespeare-char --precisions fp32,bf16 \
        --steps "$BENCH_STEPS" --warmup "$BENCH_WARMUP" --data "$DATA" 2>&1 | tee -a "$log" |
        grep -o '"config".*' | sed 's/^/profiler: bench_gpt /' | tee -a "$SUMMARY"
    row "profiler: $(( $(date +%s) - t0 )) s"
}

has_stage tests && stage_tests
has_stage kernels && stage_kernels
has_stage cublas && stage_cublas
has_stage profile && stage_profile
has_stage profiler && stage_profiler
has_stage bench && stage_bench
has_stage generate && stage_generate
has_stage train && stage_train
row ""
row "total: $(elapsed) s (stages: $STAGES)"
echo "==================== summary"
cat "$SUMMARY"
