# The demo: one node, two gangs of two CPU-bound tasks, 50 ms slots, and a
# 2-second timeline of which gang ran where.
. /scenarios/lib.sh

start_scx_gang --slot-ms 50
busy_gang jobA 8; A=$LAST_GANG_PID
busy_gang jobB 8; B=$LAST_GANG_PID
wait_gangs 2
sleep 1
scx_gang trace --seconds 2 --json "$RESULTS/timeline.json" --svg "$RESULTS/timeline.svg" | tee "$RESULTS/summary.txt"
for k in $(ls $KNOBS); do echo "$k = $(head -1 $KNOBS/$k)"; done
wait $A $B
stop_scx_gang
exit 0
