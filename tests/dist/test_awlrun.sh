#!/bin/bash
# tests/dist/test_awlrun.sh - the launcher: ranks get their variables and
# prefixed output; a failing rank stops the job with a report naming it; no
# rank outlives the job (even when awlrun itself is killed); the port can be
# used again at once; signals are passed on.
#
#     tests/dist/test_awlrun.sh BUILD_DIR
set -u
B=${1:?usage: test_awlrun.sh BUILD_DIR}
AWLRUN=$B/awlrun
WORKER=$B/dist_worker
TAG=awlrun-test-$$          # every worker of this test carries it in its environment
export AWL_TEST_TAG=$TAG
export AWL_DIST_PEER_TIMEOUT=3 AWL_DIST_TIMEOUT=20 OMP_NUM_THREADS=1
failures=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# workers of this test still alive (found by the tag in their environment)
orphans() {
    local n=0 pid
    for pid in $(pgrep -f "$WORKER" 2>/dev/null); do
        grep -qz "AWL_TEST_TAG=$TAG" /proc/$pid/environ 2>/dev/null && n=$((n + 1))
    done
    echo $n
}

# 1. variables and prefixes
timeout 30 "$AWLRUN" -n 3 "$WORKER" env > "$out/env" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '^\[rank 2\] RANK=2$' "$out/env" && grep -q '^\[rank 0\] WORLD_SIZE=3$' "$out/env" &&
   grep -q '^\[rank 1\] LOCAL_RANK=1$' "$out/env" && grep -q '^\[rank 1\] AWL_JOB_TOKEN=[0-9a-f]\{32\}$' "$out/env" &&
   grep -q '^\[rank 0\] MASTER_PORT=[0-9]' "$out/env"; then
    pass "variables and prefixes"
else
    fail "variables and prefixes (rc $rc)"; cat "$out/env"
fi

# 2. a real job
timeout 60 "$AWLRUN" -n 3 "$WORKER" check > "$out/check" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c 'ok$' "$out/check")" -eq 3 ] && pass "a 3-rank job" || { fail "a 3-rank job (rc $rc)"; cat "$out/check"; }

# 3. a rank that exits with 7: the others are stopped, the report names rank 1,
#    awlrun exits 7, nobody is left, and the port is free at once
port=$("$WORKER" free-port)
start=$(date +%s%N)
timeout 60 "$AWLRUN" -n 3 --master-port "$port" --grace 2 "$WORKER" fail 1 7 > "$out/fail" 2>&1
rc=$?
took=$(( ($(date +%s%N) - start) / 1000000 ))
if [ $rc -eq 7 ] && grep -q 'awlrun: rank 1 (pid [0-9]*) failed first: exit status 7' "$out/fail" &&
   grep -q 'rank 1: failing on purpose' "$out/fail" && grep -q 'stopped the other 2 ranks' "$out/fail" &&
   [ "$(orphans)" -eq 0 ] && [ $took -lt 20000 ]; then
    pass "a failing rank stops the job (${took} ms)"
else
    fail "a failing rank (rc $rc, ${took} ms, $(orphans) left)"; cat "$out/fail"
fi
timeout 60 "$AWLRUN" -n 2 --master-port "$port" "$WORKER" check > "$out/again" 2>&1 &&
    pass "the same port again at once" || { fail "the same port again"; cat "$out/again"; }

# 3b. the same when the others exit before the failing rank does: awlrun
#     follows their blame to rank 1 (exit 5), and says who ended first
timeout 60 "$AWLRUN" -n 3 --grace 4 "$WORKER" fail-slowly 1 5 > "$out/slow" 2>&1
rc=$?
if [ $rc -eq 5 ] && grep -q 'awlrun: rank 1 (pid [0-9]*) failed first: exit status 5' "$out/slow" &&
   grep -q 'awlrun: (rank [02] ended before it, failing because of it)' "$out/slow" &&
   [ "$(orphans)" -eq 0 ]; then
    pass "the rank that failed first, not the first to end"
else
    fail "the rank that failed first (rc $rc, $(orphans) left)"; cat "$out/slow"
fi

# 4. a rank that dies of a signal
timeout 60 "$AWLRUN" -n 2 --grace 2 "$WORKER" crash 0 > "$out/crash" 2>&1
rc=$?
if [ $rc -eq 134 ] && grep -q 'rank 0 (pid [0-9]*) failed first: killed by signal 6' "$out/crash" &&
   [ "$(orphans)" -eq 0 ]; then
    pass "a rank killed by a signal"
else
    fail "a rank killed by a signal (rc $rc)"; cat "$out/crash"
fi

# 5. SIGTERM to awlrun reaches every rank; awlrun reports it and exits 143
"$AWLRUN" -n 3 "$WORKER" hang > "$out/term" 2>&1 &
launcher=$!
for _ in $(seq 100); do [ "$(grep -c waiting "$out/term")" -eq 3 ] && break; sleep 0.1; done
kill -TERM $launcher
timeout 20 tail --pid=$launcher -f /dev/null
wait $launcher
rc=$?
if [ $rc -eq 143 ] && grep -q 'passing it on to the ranks' "$out/term" && [ "$(orphans)" -eq 0 ]; then
    pass "SIGTERM is passed on"
else
    fail "SIGTERM (rc $rc, $(orphans) left)"; cat "$out/term"
fi

# 6. awlrun killed outright: the kernel takes its ranks with it
"$AWLRUN" -n 3 "$WORKER" hang > "$out/kill" 2>&1 &
launcher=$!
for _ in $(seq 100); do [ "$(grep -c waiting "$out/kill")" -eq 3 ] && break; sleep 0.1; done
kill -KILL $launcher
wait $launcher 2>/dev/null
for _ in $(seq 50); do [ "$(orphans)" -eq 0 ] && break; sleep 0.1; done
[ "$(orphans)" -eq 0 ] && pass "no orphans when awlrun is killed" || fail "$(orphans) ranks outlived a killed awlrun"

# 7. bad usage is refused with a message
"$AWLRUN" "$WORKER" check > "$out/usage" 2>&1
[ $? -eq 2 ] && grep -q 'say how many ranks with -n N' "$out/usage" && pass "usage errors" || { fail "usage"; cat "$out/usage"; }

echo "$failures failure(s)"
[ $failures -eq 0 ]
