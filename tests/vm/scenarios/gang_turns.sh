# Tasks of one gang take turns on its CPUs (GANG_SLICE_NS, 5 ms, ended at
# a tick). One gang alone on two CPUs: two processes spin, a third wakes
# every 20 ms and reports how late it ran; then three spin on the clock and
# report each time they did not run.
. /scenarios/lib.sh

start_scx_gang
in_gang a burn --seconds 8 --name spin1 > "$RESULTS/spin1.json"; S1=$!
in_gang a burn --seconds 8 --name spin2 > "$RESULTS/spin2.json"; S2=$!
in_gang a burn --seconds 8 --name napper --naps 20 > "$RESULTS/napper.json"; N=$!
wait_gangs 1
wait $S1 $S2 $N || fail "a burn failed"

PIDS=""
for i in 1 2 3; do
	in_gang a burn --seconds 8 --name turn$i --waits > "$RESULTS/turn$i.json"
	PIDS="$PIDS $!"
done
# shellcheck disable=SC2086 # one PID per word
wait $PIDS || fail "a burn failed"
stop_scx_gang
exit 0
