# Cluster acceptance 2: the strict switch barrier under TCP traffic. Two jobs
# of `ring` (3 ranks, one per compute node) pass 64 KiB tokens around all the time
# while gangd switches between them with Freeze → Frozen (drained or timed
# out) → Switch → Running; every switch goes to switches.jsonl. Both rings
# must finish with every byte checked.
. /scenarios/cluster_lib.sh

cluster_init
if [ "$NODE_ID" = 0 ]; then
	start_gangd --nodes "$COMPUTE_NODES" --slot-ms 200 --barrier strict --drain-timeout-ms 100 \
		--switch-log "$RESULTS/switches.jsonl"
fi
start_node_agent

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"
	submit R1 3 -- /usr/bin/ring --seconds 12 --bytes 65536; R1=$JOB_PID
	submit R2 3 -- /usr/bin/ring --seconds 12 --bytes 65536; R2=$JOB_PID
	wait_jobs running 2 60
	board_put phase running
	cat "$GANGD_KNOBS/barrier" > "$RESULTS/barrier_knob" 2>&1
	finish_job R1 "$R1"
	finish_job R2 "$R2"
	cat "$GANGD_KNOBS/switches" > "$RESULTS/switches_knob" 2>&1
	cat "$GANGD_KNOBS/drain_timeouts" > "$RESULTS/drain_timeouts_knob" 2>&1
	cat "$GANGD_KNOBS/last_switch" > "$RESULTS/last_switch_knob" 2>&1
	cluster_done
else
	wait_board phase running 120 || fail "the jobs never ran"
	record_ranks ring "$RESULTS/ranks.txt"
	wait_done
fi
exit 0
