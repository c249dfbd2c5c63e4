# Acceptance 4: kill -9 of scx_gang puts the node back on the default
# scheduler within 1 s and the workloads keep running.
. /scenarios/lib.sh

start_scx_gang --slot-ms 50
busy_gang a 8; A=$LAST_GANG_PID
busy_gang b 8; B=$LAST_GANG_PID
wait_gangs 2
sleep 2

t0=$(now_ms)
kill -9 "$SCX_PID"
wait_for 5 state_is disabled
t1=$(now_ms)
echo $(( t1 - t0 )) > "$RESULTS/detach_ms"
cat $SCX_STATE > "$RESULTS/state_after"
kill -0 $A && kill -0 $B && echo alive > "$RESULTS/workloads_after_kill"
wait $A; echo $? > "$RESULTS/a.rc"
wait $B; echo $? > "$RESULTS/b.rc"

# A new instance starts cleanly over the stale knob mount and socket.
start_scx_gang
stop_scx_gang
exit 0
