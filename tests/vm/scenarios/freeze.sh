# Freeze (first half of a coordinated switch): the slot's gangs are parked,
# and the node reports when their TCP traffic is in steady state, or that
# the drain timeout fired; the next switch thaws them. The drain check
# reads the sockets from the socket watch (the default) and, once, from a
# sock_diag dump (knob drain_check), on the same stuck socket.
. /scenarios/lib.sh

start_scx_gang
# A sink of no gang that always reads, and gang a streaming TCP into it.
printf '#!/bin/sh\nexec cat > /dev/null\n' > /tmp/sink.sh && chmod +x /tmp/sink.sh
# The sink lives in a cgroup of its own (no gang), so it can be stopped whole.
mkdir -p /sys/fs/cgroup/sink
sh -c 'echo $$ > /sys/fs/cgroup/sink/cgroup.procs && exec nc -ll -p 5000 -e /tmp/sink.sh' & SINK=$!
wait_for 10 sh -c 'netstat -ltn | grep -q ":5000 "' || fail "the sink does not listen"
in_gang a sh -c 'while :; do dd if=/dev/zero bs=65536 2>/dev/null | nc 127.0.0.1 5000; usleep 100000; done'; A=$!
busy_gang b 60; B=$LAST_GANG_PID
wait_gangs 2
scx_gang ctl '{"op":"schedule","slots":[[{"gang":"a","cpus":"0-1"}],[{"gang":"b","cpus":"0-1"}]]}' > /dev/null \
	|| fail "schedule refused"

# Ten switches, each preceded by a freeze of the outgoing slot.
requests=""
for i in $(seq 1 10); do
	requests="$requests {\"op\":\"freeze\",\"gen\":$((2 * i)),\"drain_timeout_ms\":500}"
	requests="$requests {\"op\":\"switch\",\"slot\":$((i % 2)),\"gen\":$((2 * i + 1))}"
done
scx_gang ctl '{"op":"switch","slot":0,"gen":1}' > /dev/null
scx_gang trace --seconds 4 --json "$RESULTS/trace.json" > /dev/null & T=$!
# shellcheck disable=SC2086 # one request per word
scx_gang ctl --interval-ms 100 $requests > "$RESULTS/freezes.jsonl" || fail "a freeze or switch was refused"
wait $T || fail "trace failed"

# The sink stops reading: gang a's data cannot drain, the timeout fires.
scx_gang ctl '{"op":"switch","slot":0,"gen":100}' > /dev/null
sleep 1
echo 1 > /sys/fs/cgroup/sink/cgroup.freeze
sleep 1
scx_gang ctl '{"op":"freeze","gen":101,"drain_timeout_ms":300}' > "$RESULTS/timeout.json" || fail "freeze refused"
# The stuck socket as both sources see it, from a watch loaded now (its
# seed finds the socket made before it), and what one check costs.
scx_gang sockets $GANG_ROOT/a --rounds 50 > "$RESULTS/sockets.txt" 2>&1; echo $? > "$RESULTS/sockets.rc"
scx_gang sockets /sys/fs/cgroup/sink > "$RESULTS/sockets_sink.txt" 2>&1; echo $? > "$RESULTS/sockets_sink.rc"
# The same freeze with the drain check's sock_diag dump instead of the
# socket watch (knob drain_check): the two must see the same sockets.
scx_gang ctl '{"op":"switch","slot":0,"gen":102}' > /dev/null
echo sock_diag > $KNOBS/drain_check || fail "drain_check = sock_diag refused"
echo watch2 > $KNOBS/drain_check 2> "$RESULTS/drain_check.err" && fail "drain_check = watch2 accepted"
cat $KNOBS/drain_check > "$RESULTS/drain_check"
scx_gang ctl '{"op":"freeze","gen":103,"drain_timeout_ms":300}' > "$RESULTS/timeout_sock_diag.json" || fail "freeze refused"
echo watch > $KNOBS/drain_check || fail "drain_check = watch refused"
echo 0 > /sys/fs/cgroup/sink/cgroup.freeze
scx_gang ctl '{"op":"switch","slot":1,"gen":104}' > /dev/null
grep frozen $GANG_ROOT/a/cgroup.events > "$RESULTS/thawed"

# Standalone nodes refuse a freeze.
scx_gang ctl '{"op":"standalone"}' > /dev/null
scx_gang ctl '{"op":"freeze","gen":200,"drain_timeout_ms":10}' 2> "$RESULTS/standalone.err"; echo $? > "$RESULTS/standalone.rc"

kill $A $B $SINK
wait $A $B $SINK
stop_scx_gang
exit 0
