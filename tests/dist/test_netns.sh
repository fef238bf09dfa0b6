#!/bin/bash
# tests/dist/test_netns.sh - the TCP transport across real interfaces: three
# ranks, each in a network namespace of its own with its own address
# (10.213.0.1-3), joined by veth pairs to a bridge in a fourth namespace.
#
#   1. the collectives over the interfaces;
#   2. a link limited by tc's token bucket (tbf) gives the same bits as a
#      clean run;
#   3. a rank whose packets are silently dropped (iptables -j DROP in its
#      namespace) is reported as silent by the others within the peer
#      timeout;
#   4. a rank whose link is taken down is reported the same way.
#
# Needs root, iproute2 and iptables (scripts/setup.sh installs them), and
# a machine where namespaces can be entered (not a chroot); exits 77
# (CTest's "skipped") without them. Everything it makes is removed on
# exit.
#
#     tests/dist/test_netns.sh BUILD_DIR
set -u
B=${1:?usage: test_netns.sh BUILD_DIR}
WORKER=$B/dist_worker
PEER_TIMEOUT=2
[ "$(id -u)" -eq 0 ] || { echo "skipped: network namespaces need root"; exit 77; }
for tool in ip tc iptables; do
    command -v $tool > /dev/null || { echo "skipped: no $tool (scripts/setup.sh installs it)"; exit 77; }
done

id=$(( $$ % 10000 ))
hub=awl${id}hub
out=$(mktemp -d)
ns() { echo awl${id}r$1; }
dev() { echo a${id}v$1; }
cleanup() {
    for i in 0 1 2; do ip netns del "$(ns $i)" 2> /dev/null; done
    ip netns del $hub 2> /dev/null
    rm -rf "$out"
}
trap cleanup EXIT

ip netns add $hub 2> /dev/null || { echo "skipped: cannot create network namespaces here"; exit 77; }
# Entering one (ip netns exec, ip -n) remounts / as a slave first, which a
# chroot whose / is no mount point refuses: no rank could start there.
entered=$(ip netns exec $hub true 2>&1) ||
    { echo "skipped: cannot enter a network namespace here (ip netns exec: $entered)"; exit 77; }
ip -n $hub link add br0 type bridge && ip -n $hub link set br0 up || exit 1
for i in 0 1 2; do
    ip netns add "$(ns $i)" &&
        ip link add "$(dev $i)" type veth peer name a${id}b$i &&
        ip link set "$(dev $i)" netns "$(ns $i)" &&
        ip link set a${id}b$i netns $hub &&
        ip -n $hub link set a${id}b$i master br0 up &&
        ip -n "$(ns $i)" addr add 10.213.0.$((i + 1))/24 dev "$(dev $i)" &&
        ip -n "$(ns $i)" link set "$(dev $i)" up &&
        ip -n "$(ns $i)" link set lo up || { echo "FAIL: setting up namespace $i"; exit 1; }
done

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
port=29700

# Starts the three ranks of `dist_worker ARGS...` in the background.
start_job() {
    port=$((port + 1))
    for i in 0 1 2; do
        RANK=$i WORLD_SIZE=3 LOCAL_RANK=0 MASTER_ADDR=10.213.0.1 MASTER_PORT=$port \
            AWL_JOB_TOKEN=netns-$$ AWL_DIST_PEER_TIMEOUT=$PEER_TIMEOUT AWL_DIST_TIMEOUT=30 \
            timeout 90 ip netns exec "$(ns $i)" "$WORKER" "$@" > "$out/r$i" 2>&1 &
        pids[$i]=$!
    done
}
# Waits for rank $1; its exit status in $rc.
wait_rank() { wait "${pids[$1]}"; rc=$?; }

# 1. the collectives
start_job check
ok=0
for i in 0 1 2; do wait_rank $i; [ $rc -eq 0 ] && grep -q "rank $i ok" "$out/r$i" && ok=$((ok + 1)); done
[ $ok -eq 3 ] && pass "collectives over veth" || { fail "collectives over veth"; cat "$out"/r*; }

# 2. the same bits through a slow link
wait_job() { for i in 0 1 2; do wait_rank $i; done; }
digests() { grep -h '^digest' "$out"/r0 "$out"/r1 "$out"/r2 | sort -u; }
start_job digest 1000003 3
wait_job
clean=$(digests)
ip netns exec "$(ns 1)" tc qdisc add dev "$(dev 1)" root tbf rate 200mbit burst 64kb latency 100ms
t0=$(date +%s%N)
start_job digest 1000003 3
wait_job
slow_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
slow=$(digests)
ip netns exec "$(ns 1)" tc qdisc del dev "$(dev 1)" root
if [ -n "$clean" ] && [ "$(echo "$clean" | wc -l)" -eq 1 ] && [ "$clean" = "$slow" ]; then
    pass "a rate-limited link gives the same bits ($clean; $slow_ms ms through it)"
else
    fail "rate-limited link: clean '$clean' slow '$slow'"; cat "$out"/r*
fi

# 3 and 4: rank 2 cut off in the middle of allreduces; ranks 0 and 1 must
# name it within the peer timeout (plus slack for a loaded machine)
cut_off() { # how to cut, undo
    local how=$1 undo=$2
    start_job loop 60
    sleep 2
    local t0=$(date +%s%N)
    eval "$how"
    local named=0 late=0
    for i in 0 1; do
        wait_rank $i
        local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        [ $ms -gt $(( (PEER_TIMEOUT + 4) * 1000 )) ] && late=1
        [ $rc -eq 3 ] && grep -q 'rank 2 (10\.213\.0\.3:[0-9]*)' "$out/r$i" && named=$((named + 1))
    done
    kill "${pids[2]}" 2> /dev/null
    wait "${pids[2]}" 2> /dev/null
    eval "$undo"
    if [ $named -eq 2 ] && [ $late -eq 0 ] && grep -q 'has not been heard from' "$out/r0" "$out/r1"; then
        pass "$3"
    else
        fail "$3 (named by $named of 2, late $late)"; cat "$out/r0" "$out/r1"
    fi
}
cut_off "ip netns exec $(ns 2) iptables -A INPUT -j DROP; ip netns exec $(ns 2) iptables -A OUTPUT -j DROP" \
        "ip netns exec $(ns 2) iptables -F" "a rank whose packets are dropped is reported silent"
cut_off "ip -n $(ns 2) link set $(dev 2) down" "ip -n $(ns 2) link set $(dev 2) up" \
        "a rank whose link is down is reported silent"

echo "$failures failure(s)"
[ $failures -eq 0 ]
