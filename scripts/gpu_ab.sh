#!/bin/bash
# scripts/gpu_ab.sh - a change measured on a GPU: a base commit's build and the
# working tree's, alternated in one device call.
#
#     bash scripts/gpu_ab.sh prepare [REV]    # here: REV (default HEAD) into .ab-base
#     bash scripts/gpu_ab.sh run              # on the device, carry [".cudadev", ".ab-base"]
#
# `prepare` writes REV's tree (git archive) to the git-ignored .ab-base, with
# a link to .cudadev. `run` then builds the base with scripts/gpu_run.sh
# (STAGES=none, into /tmp/awl-base) in the background while the working tree
# builds and runs every GPU suite (STAGES=tests, into /tmp/awl-gpu); no
# timing runs unless the suites pass. Then, for each regex of NCU_KERNELS,
# Nsight Compute's sections over that kernel's launches in one bench_gpt step
# of each build ($OUT/ncu-base.txt, $OUT/ncu-new.txt); then AB_ROUNDS rounds
# of bench_gpt on each run of AB_RUNS, the two builds one after the other in
# every round, so that the machine's drift falls on both: JSON lines in
# $OUT/ab.jsonl, each prefixed with {"build": "base" or "new", "round": r},
# and a table at the end.
#
# Knobs (environment), with their defaults: AB_RUNS="gpt2-124m:bf16:0
# shakespeare-char:bf16:0.2" (config:precision:dropout), AB_ROUNDS=2,
# AB_STEPS=20, AB_WARMUP=5, NCU_KERNELS="" (e.g. "ce_fwd_bwd ln_bwd_reg"),
# NCU_LAUNCHES="--launch-count 1" (e.g. "--launch-skip 1 --launch-count 2").
# Bench runs clip the gradients' norm to 1, as scripts/gpu_run.sh's do.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
BASE_DIR=.ab-base

case "${1:-}" in
prepare)
    rev=${2:-HEAD}
    git rev-parse --verify -q "$rev^{commit}" > /dev/null || {
        echo "gpu_ab.sh: '$rev' is not a commit" >&2
        exit 1
    }
    rm -rf "$BASE_DIR" && mkdir "$BASE_DIR" && git archive "$rev" | tar -x -C "$BASE_DIR" &&
        ln -sfn ../.cudadev "$BASE_DIR/.cudadev" || exit 1
    echo "gpu_ab.sh: $BASE_DIR holds $(git rev-parse --short "$rev"); run with carry [\".cudadev\", \"$BASE_DIR\"]"
    exit 0
    ;;
run) ;;
*)
    echo "usage: bash scripts/gpu_ab.sh prepare [REV] | run" >&2
    exit 2
    ;;
esac

[ -d "$BASE_DIR" ] || {
    echo "gpu_ab.sh: no $BASE_DIR: run 'bash scripts/gpu_ab.sh prepare REV' first and carry it" >&2
    exit 1
}
OUT=${OUT:-$PWD/gpu_out}
AB_RUNS=${AB_RUNS:-gpt2-124m:bf16:0 shakespeare-char:bf16:0.2}
AB_ROUNDS=${AB_ROUNDS:-2}
AB_STEPS=${AB_STEPS:-20}
AB_WARMUP=${AB_WARMUP:-5}
NCU_KERNELS=${NCU_KERNELS:-}
NCU_LAUNCHES=${NCU_LAUNCHES:---launch-count 1}
BASE_BUILD=/tmp/awl-base NEW_BUILD=/tmp/awl-gpu
mkdir -p "$OUT"

(cd "$BASE_DIR" && AWL_GPU_BUILD=$BASE_BUILD STAGES=none OUT=/tmp/ab-base-out \
    bash scripts/gpu_run.sh > /tmp/ab-base-build.log 2>&1) &
base_pid=$!
STAGES=tests OUT=$OUT AWL_GPU_BUILD=$NEW_BUILD bash scripts/gpu_run.sh > "$OUT/new.log" 2>&1
new_rc=$?
wait "$base_pid"
base_rc=$?
tail -3 /tmp/ab-base-build.log
rm -f "$OUT/build.log" "$OUT/tests.log" # their lines are in new.log and summary.txt
tail -c 2000 "$OUT/new.log"
if [ "$new_rc" -ne 0 ] || [ "$base_rc" -ne 0 ] || grep -qE 'FAIL|TIMEOUT' "$OUT/summary.txt"; then
    echo "gpu_ab.sh: a build failed or a suite did not pass (new $new_rc, base $base_rc): no timing" >&2
    exit 1
fi

data=.cudadev/data/tinyshakespeare.txt
bench() { # build config precision dropout steps warmup
    "$1/bin/bench_gpt" --device cuda --grad-clip 1 --extras off --data "$data" --configs "$2" \
        --precisions "$3" --dropout "$4" --steps "$5" --warmup "$6"
}

NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for k in $NCU_KERNELS; do
    for v in base new; do
        b=$BASE_BUILD
        [ "$v" = new ] && b=$NEW_BUILD
        # shellcheck disable=SC2086 # NCU_LAUNCHES is a list of options
        timeout 120 "$NCU" --clock-control none -k "regex:$k" $NCU_LAUNCHES \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            --section SchedulerStats --section WarpStateStats --section Occupancy \
            "$b/bin/bench_gpt" --device cuda --grad-clip 1 --extras off --data "$data" \
            --configs gpt2-124m --precisions bf16 --steps 1 --warmup 0 >> "$OUT/ncu-$v.txt" 2>&1
        echo "== $v: $k"
        grep -E "^  [^ ].*\(|Duration|DRAM Throughput|Issue Slots Busy|Achieved Occupancy" \
            "$OUT/ncu-$v.txt" | tail -8
    done
done

for r in $(seq 1 "$AB_ROUNDS"); do
    for run in $AB_RUNS; do
        IFS=: read -r config precision dropout <<< "$run"
        for v in base new; do
            b=$BASE_BUILD
            [ "$v" = new ] && b=$NEW_BUILD
            bench "$b" "$config" "$precision" "${dropout:-0}" "$AB_STEPS" "$AB_WARMUP" |
                sed "s/^/{\"build\":\"$v\",\"round\":$r}/" >> "$OUT/ab.jsonl"
        done
    done
done

python3 - "$OUT/ab.jsonl" << 'PY'
import json, sys
print(f"{'build':6} {'round':>5}  {'config':17} {'prec':5} {'drop':>5} {'ms/step':>8} {'tokens/s':>9} {'loss_last':>9}")
for line in open(sys.argv[1]):
    head, rest = line.split("}", 1)
    h, d = json.loads(head + "}"), json.loads(rest)
    print(f"{h['build']:6} {h['round']:>5}  {d.get('config', '?'):17} {d.get('precision', '?'):5} "
          f"{d.get('dropout', 0):>5} {d.get('ms_per_step', 0):>8} {d.get('tokens_per_s', 0):>9} "
          f"{d.get('loss_last', 0):>9}")
PY
