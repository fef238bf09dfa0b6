#!/bin/bash
# scripts/cpu_device_run.sh - awl's CPU figures on the lent machine's 16
# cores (the `device` tool), with the CPU backend only.
#
#     STAGES=dist bash scripts/cpu_device_run.sh        # run(carry=[".cudadev"])
#
# The machine has gcc, python3 with PyTorch 2.11, and no Debian packages,
# so the build is gcc on every .c file against what .cudadev carries from
# a dev machine (scripts/make_cudadev.sh, which also copies the PyTorch
# peers there). OpenBLAS is found through
# LD_LIBRARY_PATH; awl picks its kernels (backends/cpu/cpu_blas.c).
#
# Stages (STAGES, comma-separated; JSON lines under $OUT):
#   dist  bench_dist: allreduce busbw beside a raw TCP ring and latency, 2
#         and 4 ranks; PyTorch's gloo allreduce for 2 and 4 ranks; a DDP step
#         of cpu-medium on 1, 2 and 4 ranks of 4 threads each (DDP_CONFIG,
#         DDP_RANKS, DDP_THREADS, DDP_STEPS, DDP_ROUNDS: the counts alternated
#         that many times), for each of DDP_SETTINGS;
#   ddp   only the DDP steps (TORCH_DDP=1: PyTorch's DDP beside them,
#         bench/torch_ddp.py, with the same settings);
#   cpu   bench_gpt against PyTorch (the device's python3: torch 2.11, MKL) on
#         cpu-medium at 1, 2, 4, 8 and 16 threads and shakespeare-char at 4 and
#         16 (CPU_STEPS timed steps, 6; CPU_LONG_STEPS for shakespeare-char, 3;
#         after CPU_WARMUP, 2; CPU_PAIRS="config:threads ..." for others), alternated:
#         awl, then PyTorch, CPU_ROUNDS times per count; CPU_PIN=1 runs both
#         sides of a count below the machine's cores on cores 0..threads-1
#         (taskset), the round's "pinned" field; CPU_AWL_ENVS="default
#         NAME=VALUE ..." runs awl once per setting in each round (before
#         the peer), each line's "awl_env"; each awl and peer line carries
#         "probe_gflops" and "probe_slowest_gflops": the float32 matmul rate a
#         core got on the run's cores just before it (bench_cores, the median
#         and slowest of t pinned processes; CPU_PROBE=0: none), so that a
#         host busy with other work shows in the lines; CPU_BENCH_ARGS adds
#         bench_gpt options (e.g. "--extras off": no step split, for the
#         long one-thread runs of a scaling curve);
#   parallel  bench_parallel: DDP, ZeRO-1, ZeRO-2, TP and DP x TP on 1, 2 and 4
#         ranks of 4 threads, cpu-medium and shakespeare-char (PARALLEL_STEPS);
#   cores  bench_cores: each core's clock proxy, memory bandwidth and matmul
#         rate with 1, 2, 4, 8 and 16 cores busy (the ceiling of DDP scaling);
#   kernels  bench_kernels (the CPU backend's kernels against BLAS sgemm and
#         memcpy in the same process) on the benches whose name contains
#         KERNELS (default matmul) at each of KERNEL_THREADS (4 16), and for
#         KERNELS=matmul or matmul_large bench/torch_matmul.py (PyTorch's
#         products at shakespeare-char's shapes) after each; with
#         KERNELS=attention also a bench_kernels built with the AVX2 tiles
#         (-DAWL_CPU_ATTENTION_AVX2_TILES), alternated with the default one
#         KERNEL_ROUNDS times (default 2); KERNELS=gemm_blocking: awl's
#         product under other blockings (AWL_BENCH_BLOCKINGS); CPU_PIN=1
#         pins as the cpu stage does;
#   check  awl-check on the CPU backend, --strict and --grad (the conformance
#         suite under this machine's -march=native code);
#   generate  bench_generate against bench/torch_generate.py (PyTorch's own
#         key/value cache): decode tokens/s with and without the cache
#         (GEN_MODES, default cache,recompute) for GEN_CONFIGS (default cpu-small
#         shakespeare-char gpt2-124m) at each of GEN_THREADS (16), one round.
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
D=$ROOT/.cudadev
OUT=${OUT:-$ROOT/cpu_out}
B=${AWL_CPU_BUILD:-/tmp/awl-cpu}
STAGES=${STAGES:-dist}
mkdir -p "$B/obj" "$B/bin" "$OUT"
export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH
lscpu | grep -E "Model name|^CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|Flags" | cut -c 1-200 | tee "$OUT/machine.txt"

CFLAGS="-std=c11 -O3 -DNDEBUG -march=native -fPIC -D_GNU_SOURCE -fopenmp -Wall -Wextra
        -Wno-unknown-pragmas -I$ROOT -I$ROOT/tests -I$D/include"
shopt -s nullglob
LIB_SRC=(common/*.c backends/*.c backends/cpu/*.c tensor/*.c autograd/*.c nn/*.c data/*.c dist/*.c)
CPU_KERNEL_FLAGS="-fno-trapping-math -fno-math-errno" # backends/cpu/*, as CMakeLists.txt
compile() {
    local src=$1 obj=$B/obj/${1//\//_}.o extra=""
    case $src in backends/cpu/*) extra=$CPU_KERNEL_FLAGS ;; esac
    gcc $CFLAGS $extra -c "$src" -o "$obj" 2>> "$B/build.log" || echo "compile failed: $src"
}
export -f compile
export CFLAGS B CPU_KERNEL_FLAGS
t0=$(date +%s)
: > "$B/build.log"
printf '%s\n' "${LIB_SRC[@]}" bench/bench_dist.c bench/bench_gpt.c bench/bench_parallel.c \
    bench/bench_generate.c bench/bench_kernels.c bench/bench_cores.c tests/dist/dist_worker.c |
    xargs -P "$(nproc)" -I{} bash -c 'compile {}'
LIB_OBJ=()
for src in "${LIB_SRC[@]}"; do LIB_OBJ+=("$B/obj/${src//\//_}.o"); done
LIBS="-L$D/lib -l:libz.a -lgomp -lm -ldl -lpthread"
for prog in bench/bench_dist.c bench/bench_gpt.c bench/bench_parallel.c bench/bench_generate.c \
            bench/bench_kernels.c bench/bench_cores.c tests/dist/dist_worker.c; do
    name=$(basename "$prog" .c)
    gcc -fopenmp -o "$B/bin/$name" "$B/obj/${prog//\//_}.o" "${LIB_OBJ[@]}" $LIBS >> "$B/build.log" 2>&1 ||
        echo "link failed: $name"
done
gcc $CFLAGS -o "$B/bin/awlrun" dist/launcher/awlrun.c >> "$B/build.log" 2>&1 || echo "link failed: awlrun"
if [[ ",$STAGES," == *",check,"* ]]; then
    gcc $CFLAGS -o "$B/bin/awl-check" tools/awl-check/*.c tests/helpers/gradcheck.c "${LIB_OBJ[@]}" \
        $LIBS -l:libcheck.a -l:libsubunit.a -lrt >> "$B/build.log" 2>&1 || echo "link failed: awl-check"
fi
if [[ ",$STAGES," == *",kernels,"* && ${KERNELS:-matmul} == attention ]]; then
    gcc $CFLAGS $CPU_KERNEL_FLAGS -DAWL_CPU_ATTENTION_AVX2_TILES -c \
        backends/cpu/cpu_attention.c -o "$B/obj/attention_avx2.o" >> "$B/build.log" 2>&1
    gcc -fopenmp -o "$B/bin/bench_kernels_avx2_tiles" "$B/obj/bench_bench_kernels.c.o" "$B/obj/attention_avx2.o" \
        $(printf '%s\n' "${LIB_OBJ[@]}" | grep -v cpu_attention) $LIBS >> "$B/build.log" 2>&1 ||
        echo "link failed: bench_kernels_avx2_tiles"
fi
echo "build: $(( $(date +%s) - t0 )) s"
grep -E "error|warning" "$B/build.log" | head

has_stage() { [[ ",$STAGES," == *",$1,"* ]]; }
# The matmul rate one core gets with cores 0..t-1 busy, now: bench_cores'
# median and slowest over t pinned processes, as JSON fields to put in the
# next run's line (nothing when CPU_PROBE=0).
probe() {
    [ "${CPU_PROBE:-1}" = 0 ] && return 0
    "$B/bin/bench_cores" --cores "$1" --seconds 0.3 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    if d.get("test") == "matmul":
        print("\"probe_gflops\":%.1f,\"probe_slowest_gflops\":%.1f," % (d["per_core"], d["slowest"]))'
}

# sets pin (a taskset prefix, or empty) and pinned for a run of $1 threads:
# with CPU_PIN, a count below the machine's cores runs on cores 0..$1-1
set_pin() {
    pin="" pinned=false
    [ -n "${CPU_PIN:-}" ] && [ "$1" -lt "$(nproc)" ] && pin="taskset -c 0-$(($1 - 1))" pinned=true
    return 0
}

if has_stage cores; then
    echo "== cores"
    "$B/bin/bench_cores" | tee "$OUT/cores.jsonl"
fi

if has_stage dist; then
    echo "== dist"
    "$B/bin/bench_dist" --ranks 2,4 | tee "$OUT/dist.jsonl"
    for n in 2 4; do
        timeout 200 python3 "$D/torch_gloo_allreduce.py" $n 2>&1 | grep '^{' | tee -a "$OUT/gloo.jsonl"
    done
fi
if has_stage dist || has_stage ddp; then
    # DDP steps, for each setting in DDP_SETTINGS ("default", "bucket=MB", "passive":
    # OMP_WAIT_POLICY=PASSIVE, "spin=N": GOMP_SPINCOUNT=N; joined with +)
    for setting in ${DDP_SETTINGS:-default}; do
        extra=() envs=()
        [[ $setting == *bucket=* ]] && extra=(--bucket-mb "$(sed 's/.*bucket=\([0-9.]*\).*/\1/' <<< "$setting")")
        [[ $setting == *passive* ]] && envs+=(OMP_WAIT_POLICY=PASSIVE)
        [[ $setting == *spin=* ]] && envs+=(GOMP_SPINCOUNT="$(sed 's/.*spin=\([0-9]*\).*/\1/' <<< "$setting")")
        echo "-- ddp: $setting"
        env "${envs[@]}" "$B/bin/bench_dist" --no-allreduce --no-latency --ddp "${DDP_CONFIG:-cpu-medium}" \
            --ddp-ranks "${DDP_RANKS:-1,2,4}" --threads "${DDP_THREADS:-4}" \
            --ddp-steps "${DDP_STEPS:-20}" --ddp-rounds "${DDP_ROUNDS:-1}" "${extra[@]}" |
            sed "s/^{/{\"setting\":\"$setting\",/" | tee -a "$OUT/ddp.jsonl"
    done
    # PyTorch's DDP (gloo) on the same GPT, ranks, threads and steps
    [ -n "${TORCH_DDP:-}" ] &&
        timeout 400 python3 bench/torch_ddp.py --config "${DDP_CONFIG:-cpu-medium}" \
            --ranks "${DDP_RANKS:-1,2,4}" --threads "${DDP_THREADS:-4}" --steps "${DDP_STEPS:-20}" \
            --rounds "${DDP_ROUNDS:-1}" --peer "$D/torch_gpt_cpu.py" 2>&1 | grep '^{' |
            tee -a "$OUT/ddp.jsonl"
fi

if has_stage parallel; then
    echo "== parallel"
    "$B/bin/bench_parallel" --configs cpu-medium,shakespeare-char --ranks 1,2,4 --threads 4 \
        --steps "${PARALLEL_STEPS:-6}" | tee "$OUT/parallel.jsonl"
fi

if has_stage cpu; then
    echo "== cpu"
    [ -f "$D/torch_gpt_cpu.py" ] || echo "cpu: no $D/torch_gpt_cpu.py (run scripts/make_cudadev.sh): awl's side only"
    DATA=$D/data/tinyshakespeare.txt
    peer() { # config threads steps; run under $pin (a taskset prefix, or empty)
        local c=$1 t=$2 n=$3 args
        case $c in
            cpu-medium) args="--n_layer 6 --n_head 6 --n_embd 192 --block_size 128 --batch_size 16" ;;
            shakespeare-char) args="--n_layer 6 --n_head 6 --n_embd 384 --block_size 256 --batch_size 64" ;;
        esac
        OMP_NUM_THREADS=$t timeout 300 $pin python3 "$D/torch_gpt_cpu.py" --name "$c" $args --steps "$n" \
            --warmup "${CPU_WARMUP:-2}" --threads "$t" --data "$DATA" 2>/dev/null | grep '^{'
    }
    for pair in ${CPU_PAIRS:-cpu-medium:1 cpu-medium:2 cpu-medium:4 cpu-medium:8 cpu-medium:16 \
                shakespeare-char:4 shakespeare-char:16}; do
        c=${pair%%:*} t=${pair##*:} n=${CPU_STEPS:-6}
        [ "$c" = shakespeare-char ] && n=${CPU_LONG_STEPS:-3}
        set_pin "$t"
        for round in $(seq "${CPU_ROUNDS:-1}"); do
            tag="s/^{/{\"round\":$round,\"pinned\":$pinned,/"
            for setting in ${CPU_AWL_ENVS:-default}; do
                envs=()
                [ "$setting" != default ] && envs=("$setting")
                host=$(probe "$t")
                env "${envs[@]}" $pin "$B/bin/bench_gpt" --configs "$c" --threads "$t" --steps "$n" \
                    --warmup "${CPU_WARMUP:-2}" --data "$DATA" ${CPU_BENCH_ARGS:-} |
                    sed "$tag" | sed "s/^{/{\"awl_env\":\"$setting\",$host/" | tee -a "$OUT/cpu.jsonl"
            done
            host=$(probe "$t")
            peer "$c" "$t" "$n" | sed "$tag" | sed "s/^{/{$host/" | tee -a "$OUT/cpu.jsonl"
        done
    done
fi

if has_stage kernels; then
    echo "== kernels"
    variants=(bench_kernels)
    [ -x "$B/bin/bench_kernels_avx2_tiles" ] && variants+=(bench_kernels_avx2_tiles)
    for round in $(seq "${KERNEL_ROUNDS:-$(( ${#variants[@]} > 1 ? 2 : 1 ))}"); do
        for t in ${KERNEL_THREADS:-4 16}; do
            set_pin "$t"
            for v in "${variants[@]}"; do
                OMP_NUM_THREADS=$t $pin "$B/bin/$v" full "${KERNELS:-matmul}" |
                    sed "s/^{/{\"round\":$round,\"program\":\"$v\",\"pinned\":$pinned,/" |
                    tee -a "$OUT/kernels.jsonl"
            done
            # PyTorch's products at the matmul_large shapes, after awl's of the same round
            [[ ${KERNELS:-matmul} == matmul* ]] &&
                OMP_NUM_THREADS=$t timeout 300 python3 bench/torch_matmul.py --threads "$t" 2>/dev/null |
                    grep '^{' | sed "s/^{/{\"round\":$round,/" | tee -a "$OUT/kernels.jsonl"
        done
    done
fi

if has_stage check; then
    echo "== check"
    OMP_NUM_THREADS=4 "$B/bin/awl-check" --device cpu --strict --quiet 2>&1 | tail -3 | tee "$OUT/check.txt"
    OMP_NUM_THREADS=4 "$B/bin/awl-check" --device cpu --grad --quiet 2>&1 | tail -3 | tee -a "$OUT/check.txt"
fi

if has_stage generate; then
    echo "== generate"
    modes=${GEN_MODES:-cache,recompute}
    for t in ${GEN_THREADS:-16}; do
        for c in ${GEN_CONFIGS:-cpu-small shakespeare-char gpt2-124m}; do
            OMP_NUM_THREADS=$t timeout 250 "$B/bin/bench_generate" --threads "$t" --configs "$c" \
                --modes "$modes" --rounds 1 | tee -a "$OUT/generate.jsonl"
            OMP_NUM_THREADS=$t timeout 250 python3 bench/torch_generate.py --threads "$t" --configs "$c" \
                --modes "$modes" --rounds 1 2>&1 | grep '^{' | tee -a "$OUT/generate.jsonl"
        done
    done
fi
