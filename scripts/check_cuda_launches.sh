#!/bin/sh
# scripts/check_cuda_launches.sh - fails when a kernel of the CUDA backend
# could run before its inputs are written: CTest runs it as the test
# `cuda_launches`.
#
#   sh scripts/check_cuda_launches.sh        # from the repository root
#
# The backend launches its kernels with programmatic dependent launch
# (backends/cuda/cuda_common.cuh, "launches"), so that a kernel may be
# scheduled while the one before it drains. That is only safe when
#   1. every launch goes through awlc_launch (no <<<...>>> in code), and
#   2. every __global__ function begins with awlc_await_previous_kernel();
# each failure is printed as "file:line: what". The 3xTF32 product
# (cuda_gemm_tf32x3.cu) takes its stream from its caller and launches with
# <<<...>>>, so ordinary stream order covers it: it is left out.
set -u
cd "$(dirname "$0")/.." || exit 1
status=0
for f in backends/cuda/*.cu backends/cuda/*.cuh; do
    case $f in *cuda_gemm_tf32x3*) continue ;; esac
    awk -v file="$f" '
        function code(s) { gsub(/\/\*.*\*\//, "", s); sub(/\/\/.*/, "", s); return s }
        /^[ \t]*(\*|\/\*|\/\/)/ { next }   # comment lines
        index(code($0), "<<<") { print file ":" FNR ": a <<<...>>> launch (use awlc_launch)"; bad = 1 }
        want_brace && index($0, "{") { want_brace = 0; want_wait = 1; wait_line = FNR; next }
        want_wait && $0 !~ /^[ \t]*$/ {
            if ($0 !~ /^[ \t]*awlc_await_previous_kernel\(\);/) {
                print file ":" wait_line ": a kernel that does not begin with awlc_await_previous_kernel()"
                bad = 1
            }
            want_wait = 0
        }
        /__global__/ { want_brace = 1 }
        END { exit bad }
    ' "$f" || status=1
done
[ "$status" -eq 0 ] && echo "check_cuda_launches: every kernel waits for the one before it"
exit "$status"
