# Acceptance 2: two gangs of two CPU-bound tasks each, slot_ms=50, 10 s: each
# gang gets half, they never overlap, and a task of no gang still progresses.
. /scenarios/lib.sh

start_scx_gang --slot-ms 50
busy_gang a 16; A=$LAST_GANG_PID
busy_gang b 16; B=$LAST_GANG_PID
burn --seconds 14 --name other > "$RESULTS/other.json" &
OTHER=$!
wait_gangs 2
sleep 1
scx_gang trace --seconds 10 --json "$RESULTS/trace.json" --svg "$RESULTS/trace.svg" > "$RESULTS/trace.out" 2>&1 \
	|| fail "trace failed: $(cat $RESULTS/trace.out)"
wait $OTHER $A $B
stop_scx_gang
exit 0
