# Cluster acceptance 1: two jobs of 3 ranks on 3 compute nodes of 1 CPU,
# submitted by alice, take turns cluster-wide (slot 100 ms). While both run,
# the head (node 0) records `gang ps --json`, `gang matrix` and a merged
# trace of every node; every compute node records its ranks' uid and
# cgroup. Both `gang run` exit 0.
. /scenarios/cluster_lib.sh

cluster_init
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100
start_node_agent

two_burns() { [ "$(pidof burn | wc -w)" -ge 2 ]; }

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"
	submit A 3 -- /usr/bin/burn --seconds 40 --name A; A=$JOB_PID
	submit B 3 -- /usr/bin/burn --seconds 40 --name B; B=$JOB_PID
	wait_jobs running 2 60
	board_put phase running
	# gangd calls a job running once its nodes are prepared, before each
	# node has started its rank (seconds under emulation): the trace waits
	# for both ranks on every compute node, or its window opens with job A
	# alone and the shares measure the start, not the alternation.
	for n in $(seq 1 "$COMPUTE_NODES"); do
		wait_board "burns_$n" up 90 || fail "node $n never ran both ranks"
	done
	# The trace first, while surely both run (tracing is root's).
	gang trace --seconds 4 --json /tmp/cluster_trace.json --svg /tmp/cluster_trace.svg \
		> "$RESULTS/trace.out" 2>&1 &
	T=$!
	as_alice gang ps --json > "$RESULTS/ps.json" 2> "$RESULTS/ps.err"
	echo $? > "$RESULTS/ps.rc"
	as_alice gang matrix > "$RESULTS/matrix.txt" 2> "$RESULTS/matrix.err"
	echo $? > "$RESULTS/matrix.rc"
	wait $T
	echo $? > "$RESULTS/trace.rc"
	cp /tmp/cluster_trace.json /tmp/cluster_trace.svg "$RESULTS/" 2>/dev/null
	cat "$RESULTS/trace.out"
	log "trace done; jobs still running: $(jobs_in_state running)"
	finish_job A "$A"
	finish_job B "$B"
	cluster_done
else
	wait_board phase running 120 || fail "the jobs never ran"
	# gangd may call a job running before this node started its rank (a
	# job's first rank here waits for the job's PMIx server, a second or
	# two under emulation): wait for one rank of each.
	poll_for 60 two_burns
	board_put "burns_$NODE_ID" up
	record_ranks burn "$RESULTS/ranks.txt"
	wait_done
fi
exit 0
