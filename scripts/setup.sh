#!/bin/sh
# Installs the Debian packages awl needs, when some are missing. Fast and
# silent when all are present, so every make target can call it; on a bare
# Debian 12 (debootstrap --variant=minbase: no make, no compiler) it is the
# first of the README's commands and brings make itself.
#
#   build-essential         gcc and make
#   cmake, pkg-config       the build
#   libopenblas-openmp-dev  BLAS, the OpenMP build: one thread pool shared
#                           with awl's own OpenMP loops (the pthreads build
#                           makes two pools fight over the cores)
#   check                   the unit-test framework
#   zlib1g-dev              gzip corpora, CRC32 of checkpoints
#   fortunes                the default training corpus (/usr/share/games/fortunes)
#   gnuplot-nox             scripts/plot_loss.sh
#   clang, libclang-rt-dev, the libFuzzer targets of tests/fuzz (make fuzz):
#   libomp-dev              clang, its fuzzer runtime, its OpenMP
#   iproute2 iptables       the distributed tests across network namespaces
#   procps                  pgrep, for the launcher's no-orphan test
#   openmpi-bin,            dist/'s MPI transport (dist/mpi.c) and its test
#   libopenmpi-dev          under mpirun
set -e
packages="build-essential cmake pkg-config libopenblas-openmp-dev check zlib1g-dev fortunes \
gnuplot-nox clang libclang-rt-dev libomp-dev iproute2 iptables procps openmpi-bin libopenmpi-dev"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "setup: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
