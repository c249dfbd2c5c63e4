# Cluster acceptance 3: job control from the front end.
#  1. Ctrl-C (SIGINT to `gang run`) leaves no rank on any node: no burn
#     process, every job cgroup empty or gone.
#  2. Ctrl-Z (SIGTSTP) suspends the job cluster-wide: `gang ps` shows it
#     suspended and no rank gets CPU time for 2 s; SIGCONT runs it again.
#  3. kill -9 of the rank on node 1 ends the job with a non-zero status and
#     a report naming the rank, the node and signal 9; no rank is left.
# The head (node 0) drives, every compute node checks its own ranks; results
# per node in ctrlc.*, tstp.*, kill9.*, the jobs' own in C.*, Z.*, K.* on the
# head.
. /scenarios/cluster_lib.sh

cluster_init
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100
start_node_agent

# check_gone PHASE: no burn left here (within 10 s), job cgroups empty.
check_gone() {
	poll_for 10 sh -c '[ -z "$(pidof burn)" ]'
	echo "$(pidof burn)" > "$RESULTS/$1.burn"
	poll_for 10 job_cgroups_empty
	for d in "$GANG_ROOT"/job*; do
		[ -d "$d" ] && echo "$d: $(cat "$d/cgroup.procs" | tr '\n' ' ')"
	done > "$RESULTS/$1.cgroups"
	board_put "$1.node$NODE_ID" checked || fail "board_put"
}

# progress PHASE: CPU time the local burn rank gets in 2 s.
progress() {
	pid=$(pidof burn | cut -d' ' -f1)
	[ -n "$pid" ] || { echo "no rank" > "$RESULTS/$1.progress"; return; }
	t0=$(cpu_ticks "$pid")
	sleep 2
	echo $(( $(cpu_ticks "$pid") - t0 )) > "$RESULTS/$1.progress"
	board_put "$1.node$NODE_ID" measured || fail "board_put"
}

# all_nodes KEY VALUE: the head waits until every compute node put
# KEY.node<i> VALUE.
all_nodes() { every_compute "$1" "$2" 60 "reported $1"; }

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"

	# 1. Ctrl-C
	submit C 3 -- /usr/bin/burn --seconds 120 --name C; C=$JOB_PID
	wait_jobs running 1 60
	sleep 2
	log "Ctrl-C to gang run"
	kill -INT "$C"
	finish_job ctrlc "$C"
	poll_for 20 sh -c '! runas 1000 1000 -- gang ps --json | grep -q "\"name\": *\"C\""'
	as_alice gang ps > "$RESULTS/ctrlc.ps" 2>&1
	board_put phase ctrlc
	all_nodes ctrlc checked

	# 2. Ctrl-Z, then SIGCONT
	submit Z 3 -- /usr/bin/burn --seconds 120 --name Z; Z=$JOB_PID
	wait_jobs running 1 60
	sleep 1
	log "Ctrl-Z to gang run"
	kill -TSTP "$Z"
	wait_jobs suspended 1 20
	as_alice gang ps --json > "$RESULTS/tstp.ps.json" 2>&1
	board_put phase suspended
	all_nodes suspended measured
	log "SIGCONT to gang run"
	kill -CONT "$Z"
	wait_jobs running 1 20
	as_alice gang ps --json > "$RESULTS/cont.ps.json" 2>&1
	board_put phase resumed
	all_nodes resumed measured
	kill -INT "$Z"
	finish_job tstp "$Z"
	board_put phase tstp_done
	all_nodes tstp checked

	# 3. kill -9 of the rank on node 1
	submit K 3 -- /usr/bin/burn --seconds 120 --name K; K=$JOB_PID
	wait_jobs running 1 60
	as_alice gang ps --json > "$RESULTS/kill9.ps.json" 2>&1
	board_put phase kill9
	wait_board kill9.node1 killed 60 || fail "node 1 did not kill its rank"
	finish_job kill9 "$K"
	board_put phase kill9_done
	all_nodes kill9 checked
	cluster_done
else
	wait_board phase ctrlc 300 || fail "no ctrlc phase"
	check_gone ctrlc
	wait_board phase suspended 300 || fail "no suspended phase"
	progress suspended
	wait_board phase resumed 300 || fail "no resumed phase"
	progress resumed
	wait_board phase tstp_done 300 || fail "no tstp_done phase"
	check_gone tstp
	# Only node 1 acts in kill9, and the head waits for it: the others may
	# never see the phase (it can be over before their next look).
	if [ "$NODE_ID" = 1 ]; then
		wait_board phase kill9 300 || fail "no kill9 phase"
		# gangd calls K running once its agents start it, which can
		# be a moment before this node's rank has exec'd burn.
		poll_for 30 pidof burn > /dev/null
		pid=$(pidof burn | cut -d' ' -f1)
		[ -n "$pid" ] || fail "no rank of K on node 1"
		echo "$pid" > "$RESULTS/kill9.pid"
		kill -9 "$pid"
		board_put kill9.node1 killed || fail "board_put"
	fi
	wait_board phase kill9_done 300 || fail "no kill9_done phase"
	check_gone kill9
	wait_done
fi
exit 0
