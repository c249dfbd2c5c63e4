# Acceptance 5: a gang whose processes exit gives its slot back: the
# remaining gang gets the CPUs.
. /scenarios/lib.sh

start_scx_gang --slot-ms 50
busy_gang short 3; S=$LAST_GANG_PID
busy_gang long 14; L=$LAST_GANG_PID
wait_gangs 2
wait_for 20 sh -c "[ \"\$(cat $KNOBS/nr_gangs)\" = 1 ]" || fail "the short gang was never retired"
cat $KNOBS/nr_slots > "$RESULTS/nr_slots_after"
sleep 1
scx_gang trace --seconds 5 --json "$RESULTS/trace.json" > "$RESULTS/trace.out" 2>&1 || fail "trace failed"
wait $S $L
stop_scx_gang
exit 0
