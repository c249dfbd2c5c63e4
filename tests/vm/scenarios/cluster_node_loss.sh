# Cluster acceptance 4: a node dies under a running job. Job B (2 ranks, one
# per node) is placed first, on node1 and node2 (the compute nodes join in
# order); job A (3 ranks) has one rank on every compute node. The head then
# asks the host to kill node 3 (cluster.sh --kill-node 3@mark:@@kill-node-3@@):
# A fails cleanly, its `gang run` exits non-zero naming the node, its other
# ranks are gone; B runs on and finishes with 0.
. /scenarios/cluster_lib.sh

cluster_init
LOST=node$((NNODES - 1))
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100
start_node_agent

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"
	submit B 2 --per-node 1 -- /usr/bin/burn --seconds 60 --name B; B=$JOB_PID
	wait_jobs running 1 60
	submit A 3 -- /usr/bin/burn --seconds 120 --name A; A=$JOB_PID
	wait_jobs running 2 60
	as_alice gang ps --json > "$RESULTS/ps_before.json" 2>&1
	job_nodes A > "$RESULTS/A.nodes"
	job_nodes B > "$RESULTS/B.nodes"
	case " $(cat "$RESULTS/B.nodes") " in
	*" $LOST "*) fail "precondition: job B was placed on $LOST ($(cat "$RESULTS/B.nodes")), the test needs it elsewhere" ;;
	esac
	case " $(cat "$RESULTS/A.nodes") " in
	*" $LOST "*) ;;
	*) fail "precondition: job A has no rank on $LOST ($(cat "$RESULTS/A.nodes"))" ;;
	esac
	board_put phase running
	sleep 2
	echo "@@kill-$LOST@@"
	t0=$(now_ms)
	finish_job A "$A"
	echo $(( $(now_ms) - t0 )) > "$RESULTS/A.fail_ms"
	cat "$GANGD_KNOBS/nodes" > "$RESULTS/nodes_after" 2>&1
	as_alice gang ps --json > "$RESULTS/ps_after.json" 2>&1
	board_put phase a_failed
	finish_job B "$B"
	cluster_done "$((NNODES - 1))"
else
	wait_board phase running 300 || fail "the jobs never ran"
	record_ranks burn "$RESULTS/ranks.txt"
	if [ "node$NODE_ID" != "$LOST" ]; then
		wait_board phase a_failed 300 || fail "job A never failed"
		sleep 1
		ps -o pid,user,args | grep '[b]urn' > "$RESULTS/burn_after_a"
	fi
	# The last node is killed somewhere in here.
	wait_done
fi
exit 0
