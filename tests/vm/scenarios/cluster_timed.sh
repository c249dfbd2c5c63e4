# Timed switching (issue 12): gangd sends plans ahead (switching = timed,
# strict barrier, 100 ms slots), and every compute node switches on its own
# clock at the planned instants: no Freeze or Switch per slot. Two jobs of
# 3 ranks take turns. The head records the nodes file (each node's cluster
# clock), a merged trace, the switch log (one line per generation with each
# node's switch instant on the cluster clock) and gangd's counters.
. /scenarios/cluster_lib.sh

cluster_init
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100 \
	--switching timed --switch-log "$RESULTS/switches.jsonl"
start_node_agent

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"
	submit A 3 -- /usr/bin/burn --seconds 40 --name A; A=$JOB_PID
	submit B 3 -- /usr/bin/burn --seconds 40 --name B; B=$JOB_PID
	wait_jobs running 2 60
	board_put phase running
	# Clocks have had their first samples by now; give the plans time.
	sleep 3
	cat "$GANGD_KNOBS/nodes" > "$RESULTS/nodes.txt"
	gang trace --seconds 4 --json /tmp/cluster_trace.json > "$RESULTS/trace.out" 2>&1
	echo $? > "$RESULTS/trace.rc"
	cp /tmp/cluster_trace.json "$RESULTS/" 2>/dev/null
	for k in switches late_switches late_plans missed_switches drain_timeouts switching; do
		echo "$k $(cat "$GANGD_KNOBS/$k")"
	done > "$RESULTS/counters.txt"
	log "counters: $(tr '\n' ' ' < "$RESULTS/counters.txt")"
	finish_job A "$A"
	finish_job B "$B"
	cluster_done
else
	wait_board phase running 120 || fail "the jobs never ran"
	wait_done
fi
exit 0
