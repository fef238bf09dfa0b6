# scripts/gpu_build.sh - how awl is built on the lent GPU machine, for the
# scripts that run there (gpu_run.sh, nccl_run.sh), which source it:
#
#     ROOT=... D=$ROOT/.cudadev B=/tmp/awl-gpu JOBS=$(nproc)
#     . scripts/gpu_build.sh
#     gpu_build_check || exit 1
#     gpu_compile "${LIB_SRC[@]}" tests/test_nccl.c         # in parallel; $B/FAILED on failure
#     gpu_link test_nccl "$(gpu_obj tests/test_nccl.c)" "${HELPERS[@]}"
#
# The machine's image has nvcc, gcc and PyTorch but no pkg-config,
# OpenBLAS, Check or zlib headers, so there is no CMake: every .c is
# compiled with gcc and every .cu with nvcc for sm_90a, all in parallel,
# against what the git-ignored folder .cudadev carries from a dev machine
# (scripts/make_cudadev.sh fills it):
#     .cudadev/include   cblas.h openblas_config.h check.h check_stdint.h zlib.h zconf.h,
#                        nccl.h (used only where the machine's NCCL has no header)
#     .cudadev/lib       libopenblas.so.0 (+ libgfortran, libquadmath, libgomp),
#                        libz.so.1 (the profile stage: the Debian libz.a is not PIC),
#                        libcheck.a libsubunit.a libz.a
# NCCL is the machine's own (libnccl.so.2 of NCCL_HOME, the CUDA toolkit, the
# system, or PyTorch's nvidia-nccl package, in that order): when one is
# found the NCCL transport is built (AWL_WITH_NCCL) and NCCL_LIB names it.

CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
CUBLAS_DIR=$(dirname "$(ls "$CUDA_HOME"/lib64/libcublas.so* /usr/local/cuda*/lib*/libcublas.so* 2>/dev/null | head -1)")

# The NCCL library and a header for it (the one beside it, else .cudadev's;
# NCCL_FLAGS puts its folder ahead of .cudadev's on the include path).
NCCL_LIB=
NCCL_INC=
# PyTorch's NCCL: the nvidia-nccl-cu1x wheel's lib folder, under the nvidia
# namespace package (nvidia/nccl/lib, or nvidia/cu13/lib)
PIP_NCCL_DIRS=$(python3 -c 'import glob, nvidia
print(" ".join(d[:-len("/libnccl.so.2")] for p in nvidia.__path__ for d in glob.glob(p + "/*/lib/libnccl.so.2")))' 2>/dev/null)
for dir in ${NCCL_HOME:+$NCCL_HOME/lib} "$CUDA_HOME"/lib "$CUDA_HOME"/lib64 /usr/local/cuda*/lib \
           /usr/lib/x86_64-linux-gnu $PIP_NCCL_DIRS; do
    if [ -e "$dir/libnccl.so.2" ]; then
        NCCL_LIB=$(readlink -f "$dir/libnccl.so.2")
        for inc in "$dir/../include" "$CUDA_HOME/include" /usr/include "$D/include"; do
            [ -e "$inc/nccl.h" ] && { NCCL_INC=$(readlink -f "$inc"); break; }
        done
        break
    fi
done
export LD_LIBRARY_PATH=$D/lib:$CUBLAS_DIR:$CUDA_HOME/lib64${NCCL_LIB:+:$(dirname "$NCCL_LIB")}:$LD_LIBRARY_PATH

NCCL_FLAGS=
[ -n "$NCCL_LIB" ] && [ -n "$NCCL_INC" ] && NCCL_FLAGS="-DAWL_WITH_NCCL=1 -I$NCCL_INC"
CFLAGS="-std=c11 -O3 -DNDEBUG -march=native -fPIC -D_GNU_SOURCE -DAWL_WITH_CUDA=1 -DAWL_WITH_STUDENT=1
        -fopenmp -Wall -Wextra -Wno-unknown-pragmas -I$ROOT -I$ROOT/tests $NCCL_FLAGS -I$D/include
        -I$CUDA_HOME/include"
# GPU_ARCHS: the architectures to build code for, comma-separated (default
# 90a, Hopper; e.g. GPU_ARCHS=80,90a builds what CMake's
# -DAWL_CUDA_ARCH="80;90a" does, to check that such a build picks the
# Hopper code and its wgmma kernels on this machine). As in CMakeLists.txt,
# AWL_CUDA_WGMMA is defined where the list holds 90a.
GPU_ARCHS=${GPU_ARCHS:-90a}
GENCODE=
for arch in ${GPU_ARCHS//,/ }; do GENCODE="$GENCODE -gencode=arch=compute_$arch,code=sm_$arch"; done
WGMMA=
case ",$GPU_ARCHS," in *,90a,*) WGMMA=-DAWL_CUDA_WGMMA=1 ;; esac
# --split-compile: the attention kernels' instances (dropout in and out) are
# the longest compile; their optimisation runs on 4 threads
NVFLAGS="$GENCODE $WGMMA -std=c++17 -O3 -I$ROOT -DAWL_WITH_CUDA=1 -lineinfo -Xcompiler -fPIC
         --split-compile=4"
# OpenBLAS, cuBLAS and NCCL are not linked: awl opens them on first use
# (dlopen, found through LD_LIBRARY_PATH; backends/cpu/cpu_blas.c, the CUDA
# backend, dist/nccl.c)
LIBS="-L$D/lib -l:libcheck.a -l:libsubunit.a -l:libz.a -lgomp -ldl -lm -lrt
      -lpthread"

shopt -s nullglob
LIB_SRC=(common/*.c backends/*.c backends/cpu/*.c backends/student/*.c tensor/*.c autograd/*.c
         nn/*.c data/*.c dist/*.c backends/cuda/*.cu)
mkdir -p "$B/obj" "$B/bin" "$B/log"
BIN=$B/bin

# What the build needs from .cudadev; says what is missing.
gpu_build_check() {
    local f
    for f in include/check.h include/zlib.h lib/libcheck.a lib/libz.a "$@"; do
        [ -e "$D/$f" ] || { echo "missing .cudadev/$f (run scripts/make_cudadev.sh on a dev machine)"; return 1; }
    done
}

# The object file of a source.
gpu_obj() { echo "$B/obj/${1//\//_}.o"; }

# Compiles $1 to its object; a failure leaves $B/FAILED.
gpu_compile_one() {
    local src=$1 obj log=$B/log/${1//\//_}.log
    obj=$(gpu_obj "$src")
    case $src in
        *.cu) nvcc $NVFLAGS -c "$src" -o "$obj" ;;
        # as CMake: the CPU kernels promise no FP exceptions nor errno
        backends/cpu/*) gcc $CFLAGS -fno-trapping-math -fno-math-errno -c "$src" -o "$obj" ;;
        dist/nccl.c) gcc $CFLAGS -DAWL_NCCL_PATH="\"$NCCL_LIB\"" -c "$src" -o "$obj" ;;
        *) gcc $CFLAGS -c "$src" -o "$obj" ;;
    esac > "$log" 2>&1 || { echo "compile failed: $src"; touch "$B/FAILED"; }
}

# Runs "$@" in the background, at most JOBS at once.
gpu_spawn() {
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    "$@" &
}

# Compiles every source given, JOBS at once, and waits.
gpu_compile() {
    local src
    for src in "$@"; do gpu_spawn gpu_compile_one "$src"; done
    wait
}

LIB_OBJ=()
for src in "${LIB_SRC[@]}"; do LIB_OBJ+=("$(gpu_obj "$src")"); done
HELPERS=()
for src in tests/helpers/*.c; do HELPERS+=("$(gpu_obj "$src")"); done

# Links program $1 from the objects after it and the library's.
gpu_link() {
    local name=$1; shift
    nvcc $GENCODE -o "$B/bin/$name" "$@" "${LIB_OBJ[@]}" $LIBS > "$B/log/link_$name.log" 2>&1 ||
        { echo "link failed: $name"; cat "$B/log/link_$name.log"; touch "$B/FAILED"; }
}
