# Acceptance 1: scx_gang loads, passes the verifier, attaches, and detaches
# cleanly; a second instance and bad flags are refused with clear errors.
. /scenarios/lib.sh

cat $SCX_STATE > "$RESULTS/state_before"
start_scx_gang --stats 1
sleep 2
cat /sys/kernel/sched_ext/root/ops > "$RESULTS/ops"
ls $KNOBS > "$RESULTS/knobs"

scx_gang --knob-dir /run/second --socket /run/second.sock > "$RESULTS/second.out" 2>&1
echo $? > "$RESULTS/second.rc"
scx_gang --slot-ms 0 > "$RESULTS/badflag.out" 2>&1
echo $? > "$RESULTS/badflag.rc"

stop_scx_gang
scx_gang --cgroup-mount /tmp --gang-root /tmp/g > "$RESULTS/nocgroup.out" 2>&1
echo $? > "$RESULTS/nocgroup.rc"
cat $SCX_STATE > "$RESULTS/state_after"
exit 0
