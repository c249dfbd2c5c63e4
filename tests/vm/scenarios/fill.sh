# The fill knob: an idle CPU may run another gang's task, never delaying
# the slot owner. Gang a has one thread (it leaves a CPU idle in its slot),
# gang b two.
. /scenarios/lib.sh

start_scx_gang --slot-ms 50
busy_gang a 30 1; A=$LAST_GANG_PID
busy_gang b 30; B=$LAST_GANG_PID
wait_gangs 2
sleep 0.5
scx_gang trace --seconds 4 --json "$RESULTS/nofill.json" > /dev/null || fail "trace failed"
echo 1 > $KNOBS/fill || fail "fill refused"
sleep 0.5
scx_gang trace --seconds 4 --json "$RESULTS/fill.json" > /dev/null || fail "trace failed"
kill $A $B
wait $A $B
stop_scx_gang
exit 0
