# The placement API (what the coordinator drives): an explicit slot table by
# gang name, switches by command, timed switches (armed ahead on an absolute
# BPF timer), refusals that change nothing; then the
# housekeeping_cpus knob in standalone mode.
. /scenarios/lib.sh

ctl() { scx_gang ctl "$1"; }
start_scx_gang --slot-ms 50
# The burners outlive the scenario (killed at its end): under emulation on a
# busy host the steps below once took longer than 40 s, the gangs ended in
# the housekeeping trace and CPU 1 looked half idle (CI: 0.502 of CPU 1).
busy_gang a 150; A=$LAST_GANG_PID
busy_gang b 150; B=$LAST_GANG_PID
burn --seconds 150 --name other > /dev/null & O=$!
wait_gangs 2

log "space sharing: one slot, a on CPU 0, b on CPU 1"
ctl '{"op":"schedule","slots":[[{"gang":"a","cpus":"0"},{"gang":"b","cpus":"1"}]]}' > "$RESULTS/schedule.out" \
	|| fail "schedule refused"
cat $KNOBS/mode > "$RESULTS/mode_coordinated"
scx_gang trace --seconds 3 --json "$RESULTS/space.json" > /dev/null || fail "trace failed"

log "refusals"
for case in \
	'double {"op":"schedule","slots":[[{"gang":"a","cpus":"0-1"},{"gang":"b","cpus":"1"}]]}' \
	'nocpu {"op":"schedule","slots":[[{"gang":"a","cpus":"7"}]]}' \
	'nogang {"op":"schedule","slots":[[{"gang":"zzz","cpus":"0"}]]}' \
	'noslot {"op":"switch","slot":5,"gen":100}' \
	'garbage {"op":"reboot"}'; do
	name=${case%% *}
	ctl "${case#* }" > /dev/null 2> "$RESULTS/$name.err"; echo $? > "$RESULTS/$name.rc"
done
cat $KNOBS/nr_slots > "$RESULTS/nr_slots_after_refusals"

# Every CPU is owned now: give shells (the ctl clients below) a larger share.
echo 30 > $KNOBS/min_other_share_pct || fail "min_other_share_pct refused"
log "time sharing by command: two slots, switched every 100 ms"
ctl '{"op":"schedule","slots":[[{"gang":"a","cpus":"0-1"}],[{"gang":"b","cpus":"0-1"}]]}' > /dev/null || fail "schedule refused"
switches=""
for i in $(seq 1 40); do switches="$switches {\"op\":\"switch\",\"slot\":$((i % 2)),\"gen\":$((1000 + i))}"; done
scx_gang trace --seconds 3 --json "$RESULTS/command.json" > /dev/null & T=$!
# shellcheck disable=SC2086 # one request per word
scx_gang ctl --interval-ms 100 $switches > /dev/null || fail "a switch was refused"
wait $T || fail "trace failed"

log "timed switches: each armed 60 ms ahead on an absolute BPF timer, one every 100 ms"
timed=""
for i in $(seq 1 30); do timed="$timed {\"op\":\"switch\",\"slot\":$((i % 2)),\"gen\":$((2000 + i))}"; done
scx_gang trace --seconds 3 --json "$RESULTS/timed.json" > /dev/null & T=$!
# shellcheck disable=SC2086 # one request per word
scx_gang ctl --interval-ms 100 --ahead-ms 60 $timed > "$RESULTS/timed.out" || fail "a timed switch was refused"
wait $T || fail "trace failed"

log "back to standalone, CPU 0 for housekeeping"
ctl '{"op":"standalone"}' > /dev/null || fail "standalone refused"
# Back to the default share: at 30 % CPU 1 owed the waiting burner "other"
# up to 30 % of its time whenever it queued behind CPU 0's other tasks.
echo 5 > $KNOBS/min_other_share_pct || fail "min_other_share_pct refused"
cat $KNOBS/mode > "$RESULTS/mode_standalone"
echo 0 > $KNOBS/housekeeping_cpus || fail "housekeeping_cpus refused"
sleep 0.5
scx_gang trace --seconds 3 --json "$RESULTS/housekeeping.json" > /dev/null || fail "trace failed"
kill -0 $A $B $O || fail "a burner ended before the housekeeping trace did"

log "a gang task pinned off its gang's CPUs runs as a task of no gang"
in_gang c taskset -c 0 burn --seconds 3 --name pinned > "$RESULTS/pinned.json"
wait $!; echo $? > "$RESULTS/pinned.rc"

kill $A $B $O
wait $A $B $O
stop_scx_gang
exit 0
