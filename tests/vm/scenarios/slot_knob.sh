# Acceptance 3: `echo 20 > slot_ms` changes the observed slot length; 0 and
# abc fail with EINVAL and change nothing.
. /scenarios/lib.sh

start_scx_gang --slot-ms 50
busy_gang a 12; A=$LAST_GANG_PID
busy_gang b 12; B=$LAST_GANG_PID
wait_gangs 2

echo 20 > $KNOBS/slot_ms; echo $? > "$RESULTS/write20.rc"
cat $KNOBS/slot_ms > "$RESULTS/after20"
sh -c "echo 0 > $KNOBS/slot_ms" 2> "$RESULTS/write0.err"; echo $? > "$RESULTS/write0.rc"
sh -c "echo abc > $KNOBS/slot_ms" 2> "$RESULTS/writeabc.err"; echo $? > "$RESULTS/writeabc.rc"
sh -c "echo 5 > $KNOBS/current_slot" 2> "$RESULTS/writero.err"; echo $? > "$RESULTS/writero.rc"
cat $KNOBS/slot_ms > "$RESULTS/after_bad"
for k in $(ls $KNOBS); do echo "$k=$(cat $KNOBS/$k | head -1)"; done > "$RESULTS/knob_values"

sleep 0.5
scx_gang trace --seconds 3 --json "$RESULTS/trace.json" > "$RESULTS/trace.out" 2>&1 || fail "trace failed"
wait $A $B
stop_scx_gang
exit 0
