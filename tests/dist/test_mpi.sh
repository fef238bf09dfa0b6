#!/bin/bash
# tests/dist/test_mpi.sh - the MPI transport under mpirun (Open MPI), and the
# launchers' variables: the collectives and DDP on 2 to 4 ranks; ranks that
# disagree all fail naming it; a killed rank ends the job with a message
# naming it; Open MPI's, PMI's and Slurm's variables (set here: no Slurm
# controller runs) give the right rank layout. Skipped (77) when this build
# has no MPI transport or mpirun is missing.
#
#     tests/dist/test_mpi.sh BUILD_DIR
set -u
B=${1:?usage: test_mpi.sh BUILD_DIR}
WORKER=$B/dist_worker
grep -q '^AWL_WITH_MPI:BOOL=ON' "$B/CMakeCache.txt" 2> /dev/null ||
    { echo "skipped: built without the MPI transport"; exit 77; }
command -v mpirun > /dev/null || { echo "skipped: no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 77; }
# CI runs as root; Open MPI refuses root without these, and oversubscription
# lets 4 ranks share 2 cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 AWL_DIST_TIMEOUT=30
MPIRUN="timeout 120 mpirun --oversubscribe"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

for n in 2 3 4; do
    $MPIRUN -np $n "$WORKER" check > "$out/check" 2>&1
    [ $? -eq 0 ] && [ "$(grep -c ' ok$' "$out/check")" -eq $n ] && pass "collectives on $n ranks" ||
        { fail "collectives on $n ranks"; cat "$out/check"; }
done
$MPIRUN -np 2 "$WORKER" ddp > "$out/ddp" 2>&1
[ $? -eq 0 ] && [ "$(grep -c 'ddp ok' "$out/ddp")" -eq 2 ] && pass "DDP on 2 ranks" || { fail "DDP"; cat "$out/ddp"; }
AWL_DIST_BACKEND=tcp MASTER_PORT=$("$WORKER" free-port) $MPIRUN -np 2 "$WORKER" check > "$out/tcp" 2>&1
[ $? -eq 0 ] && pass "the TCP transport under mpirun" || { fail "tcp under mpirun"; cat "$out/tcp"; }

$MPIRUN -np 3 "$WORKER" disagree > "$out/disagree" 2>&1
if [ "$(grep -c 'ranks disagree' "$out/disagree")" -ge 1 ] && grep -q 'allreduce #1 (sum, float32, 11 elements)' "$out/disagree"; then
    pass "disagreeing ranks fail, naming both collectives"
else
    fail "disagreement"; cat "$out/disagree"
fi

$MPIRUN -np 3 "$WORKER" crash 1 > "$out/crash" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'mpirun noticed that process rank 1' "$out/crash"; then
    pass "a killed rank ends the job, named (mpirun exit $rc)"
else
    fail "killed rank (rc $rc)"; cat "$out/crash"
fi

# train_gpt, unchanged, under mpirun: the same run as under awlrun; over the
# TCP transport bit for bit, over MPI (another summation order) within 1e-4
for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog, said she."; done > "$out/corpus.txt"
TRAIN="$B/train_gpt --data $out/corpus.txt --steps 6 --eval-interval 3 --threads 1 --sample-tokens 0"
losses() { cut -d, -f1-3 "$1"; }
"$B/awlrun" -n 2 $TRAIN --log "$out/awlrun.csv" > "$out/train_awlrun" 2>&1 || { fail "train_gpt under awlrun"; cat "$out/train_awlrun"; }
MASTER_PORT=$("$WORKER" free-port) $MPIRUN -np 2 $TRAIN --dist-backend tcp --log "$out/tcp.csv" > "$out/train_tcp" 2>&1
[ $? -eq 0 ] && grep -q 'data-parallel: 2 ranks over tcp' "$out/train_tcp" &&
    [ "$(losses "$out/tcp.csv")" = "$(losses "$out/awlrun.csv")" ] &&
    pass "train_gpt under mpirun over TCP: the losses of awlrun, bit for bit" ||
    { fail "train_gpt under mpirun --dist-backend tcp"; cat "$out/train_tcp"; }
$MPIRUN -np 2 $TRAIN --log "$out/mpi.csv" > "$out/train_mpi" 2>&1
if [ $? -eq 0 ] && grep -q 'data-parallel: 2 ranks over mpi' "$out/train_mpi" &&
    paste -d, "$out/mpi.csv" "$out/awlrun.csv" | awk -F, 'NR == 1 { n = NF / 2 } NR > 1 { d = $2 - $(n + 2); if (d > 1e-4 || d < -1e-4) bad = 1 } END { exit bad }'; then
    pass "train_gpt under mpirun over MPI (the default): the losses of awlrun within 1e-4"
else
    fail "train_gpt under mpirun over MPI"; cat "$out/train_mpi"
fi

# and as srun starts it: Slurm's variables alone (rank 0's host from
# SLURM_NODELIST), over TCP, bit for bit again
port=$("$WORKER" free-port)
for r in 0 1; do
    env SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_NODELIST=localhost SLURM_JOB_ID=99 \
        MASTER_PORT=$port timeout 120 $TRAIN --log "$out/slurm$r.csv" > "$out/train_slurm$r" 2>&1 &
done
wait
[ -s "$out/slurm0.csv" ] && [ "$(losses "$out/slurm0.csv")" = "$(losses "$out/awlrun.csv")" ] &&
    grep -q 'data-parallel: 2 ranks over tcp' "$out/train_slurm0" &&
    pass "train_gpt under Slurm's variables: the losses of awlrun, bit for bit" ||
    { fail "train_gpt under Slurm's variables"; cat "$out/train_slurm0" "$out/train_slurm1"; }

# the launchers' variables, each set alone
launch() { env -i PATH="$PATH" "$@" "$WORKER" launch; }
expect() { # description, expected output, command...
    local what=$1 want=$2; shift 2
    local got
    got=$(launch "$@")
    [ "$got" = "$want" ] && pass "$what" || fail "$what: '$got', want '$want'"
}
expect "Slurm's variables" "launcher=slurm rank=2 world=4 local=0 master=node07:20123 backend=tcp" \
    SLURM_PROCID=2 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_NODELIST='node[07-09,12],gpu1' SLURM_JOB_ID=123
expect "Open MPI's variables" "launcher=openmpi rank=1 world=3 local=1 master=127.0.0.1:29500 backend=mpi" \
    OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=1
expect "PMI's variables" "launcher=pmi rank=5 world=8 local=1 master=10.0.0.1:29500 backend=mpi" \
    PMI_RANK=5 PMI_SIZE=8 MPI_LOCALRANKID=1 MASTER_ADDR=10.0.0.1
expect "torchrun's variables win" "launcher=torchrun rank=0 world=2 local=0 master=127.0.0.1:29555 backend=tcp" \
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_PORT=29555 SLURM_PROCID=3 SLURM_NTASKS=4
expect "a transport asked for" "launcher=slurm rank=0 world=2 local=0 master=n1:20007 backend=mpi" \
    SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODELIST=n1 SLURM_JOB_ID=7 AWL_DIST_BACKEND=mpi

echo "$failures failure(s)"
[ $failures -eq 0 ]
