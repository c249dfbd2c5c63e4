# The demo: one node, two gangs of two CPU-bound tasks, 50 ms slots, and a
# 2-second timeline of which gang ran where.
. /scenarios/lib.sh

start_scx_gang --slot-ms 50
in_gang jobA burn --seconds 8 --threads 2 --name jobA > /dev/null; A=$!
in_gang jobB burn --seconds 8 --threads 2 --name jobB > /dev/null; B=$!
wait_gangs 2
sleep 1
scx_gang trace --seconds 2 --json "$RESULTS/timeline.json" --svg "$RESULTS/timeline.svg" | tee "$RESULTS/summary.txt"
for k in $(ls $KNOBS); do echo "$k = $(head -1 $KNOBS/$k)"; done
wait $A $B
stop_scx_gang
exit 0
