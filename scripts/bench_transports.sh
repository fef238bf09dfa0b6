#!/bin/bash
# scripts/bench_transports.sh - dist/'s two transports side by side on this
# host: for 2 and 4 ranks, bench_dist --backend mpi under mpirun (awl over
# MPI, awl over TCP and Open MPI's MPI_Allreduce called directly, in the
# same processes and alternated rounds), then PyTorch's gloo
# (../shared/peers/torch_gloo_allreduce.py, when /usr/bin/python3 has torch:
# Debian's python3-torch), then a
# DDP step of a GPT over each transport. JSON lines on stdout.
#
#     scripts/bench_transports.sh [BUILD_DIR] [CONFIG] [THREADS] > transports.jsonl
set -u
B=${1:-build}
CONFIG=${2:-cpu-medium}
THREADS=${3:-1}
PEERS=$(dirname "$0")/../../shared/peers
command -v mpirun > /dev/null || { echo "bench_transports: no mpirun (scripts/setup.sh installs openmpi-bin)" >&2; exit 2; }
# as root too; more ranks than cores on a small machine
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --oversubscribe --bind-to none"
for n in 2 4; do
    $MPIRUN -np $n "$B/bench_dist" --backend mpi --max-bytes 67108864 --threads 1
    if [ -f "$PEERS/torch_gloo_allreduce.py" ] && /usr/bin/python3 -c "import torch" 2> /dev/null; then
        /usr/bin/python3 "$PEERS/torch_gloo_allreduce.py" $n
    fi
done
$MPIRUN -np 2 "$B/bench_dist" --backend mpi --no-allreduce --no-latency --ddp "$CONFIG" \
    --threads "$THREADS" --ddp-steps 10
