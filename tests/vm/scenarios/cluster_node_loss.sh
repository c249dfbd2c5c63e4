# Cluster acceptance 4: a node dies under a running job. Job B (2 ranks, one
# per node) is placed first, on node0 and node1 (the nodes join in order);
# job A (3 ranks) has one rank on every node. Node 0 then asks the host to
# kill node 2 (cluster.sh --kill-node 2@mark:@@kill-node-2@@): A fails
# cleanly, its `gang run` exits non-zero naming the node, its other ranks
# are gone; B runs on and finishes with 0.
. /scenarios/cluster_lib.sh

cluster_init
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$NNODES" --slot-ms 100
start_node_agent

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$NNODES"
	submit B 2 --per-node 1 -- /usr/bin/burn --seconds 60 --name B; B=$JOB_PID
	wait_jobs running 1 60
	submit A 3 -- /usr/bin/burn --seconds 120 --name A; A=$JOB_PID
	wait_jobs running 2 60
	as_alice gang ps --json > "$RESULTS/ps_before.json" 2>&1
	job_nodes A > "$RESULTS/A.nodes"
	job_nodes B > "$RESULTS/B.nodes"
	case " $(cat "$RESULTS/B.nodes") " in
	*" node2 "*) fail "precondition: job B was placed on node2 ($(cat "$RESULTS/B.nodes")), the test needs it on node0 and node1" ;;
	esac
	case " $(cat "$RESULTS/A.nodes") " in
	*" node2 "*) ;;
	*) fail "precondition: job A has no rank on node2 ($(cat "$RESULTS/A.nodes"))" ;;
	esac
	board_put phase running
	sleep 2
	echo "@@kill-node-2@@"
	t0=$(now_ms)
	finish_job A "$A"
	echo $(( $(now_ms) - t0 )) > "$RESULTS/A.fail_ms"
	cat "$GANGD_KNOBS/nodes" > "$RESULTS/nodes_after" 2>&1
	as_alice gang ps --json > "$RESULTS/ps_after.json" 2>&1
	board_put phase a_failed
	sleep 1
	ps -o pid,user,args | grep '[b]urn' > "$RESULTS/burn_after_a"
	finish_job B "$B"
	cluster_done 2
else
	wait_board phase running 300 || fail "the jobs never ran"
	record_ranks burn "$RESULTS/ranks.txt"
	if [ "$NODE_ID" = 1 ]; then
		wait_board phase a_failed 300 || fail "job A never failed"
		sleep 1
		ps -o pid,user,args | grep '[b]urn' > "$RESULTS/burn_after_a"
	fi
	# Node 2 is killed somewhere in here.
	wait_done
fi
exit 0
