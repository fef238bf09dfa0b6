#!/bin/sh
# scripts/make_cudadev.sh - fills the git-ignored .cudadev/ that
# scripts/gpu_run.sh builds against on the lent GPU machine, whose image has
# nvcc, gcc and PyTorch but not OpenBLAS, Check or the zlib headers. Run it
# on a development machine (Debian 12) once per checkout; it installs what is
# missing first (scripts/setup.sh) and copies:
#     include/  cblas.h openblas_config.h check.h check_stdint.h zlib.h zconf.h, and
#               nccl.h (CUDA's, when there is one: for a GPU machine whose NCCL came
#               without its header)
#     lib/      libopenblas.so.0 (the OpenMP build) and the libgfortran,
#               libquadmath and libgomp it needs; libcheck.a libsubunit.a
#               libz.a; libz.so.1 (the profile stage links a shared library,
#               and Debian's libz.a is not position-independent)
#     data/tinyshakespeare.txt and the peers torch_gpt_gpu.py, torch_gpt_cpu.py and
#     torch_gloo_allreduce.py, from ../shared (scripts/cpu_device_run.sh runs the last two)
# Then: run(command="bash scripts/gpu_run.sh", carry=[".cudadev"]), or
# scripts/nccl_run.sh the same way.
set -eu
cd "$(dirname "$0")/.."
./scripts/setup.sh
D=.cudadev
SHARED=${SHARED:-../shared}
ARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
mkdir -p "$D/include" "$D/lib" "$D/data"
cp /usr/include/"$ARCH"/openblas-openmp/cblas.h /usr/include/"$ARCH"/openblas-openmp/openblas_config.h \
    /usr/include/check.h /usr/include/check_stdint.h /usr/include/zlib.h /usr/include/zconf.h \
    "$D/include/"
NCCL_H=$(ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h 2>/dev/null | head -1)
[ -n "$NCCL_H" ] && cp "$NCCL_H" "$D/include/"
for lib in "$ARCH"/openblas-openmp/libopenblas.so.0 "$ARCH"/libgfortran.so.5 \
           "$ARCH"/libquadmath.so.0 "$ARCH"/libgomp.so.1 "$ARCH"/libcheck.a "$ARCH"/libsubunit.a \
           "$ARCH"/libz.a; do
    cp -L "/usr/lib/$lib" "$D/lib/"
done
cp -L "/lib/$ARCH/libz.so.1" "$D/lib/"
cp "$SHARED/data/tinyshakespeare.txt" "$D/data/"
cp "$SHARED/peers/torch_gpt_gpu.py" "$SHARED/peers/torch_gpt_cpu.py" "$SHARED/peers/torch_gloo_allreduce.py" "$D/"
echo "make_cudadev: $(du -sh "$D" | cut -f1) in $D"
