# Cluster acceptance 5: bad input is refused and disturbs nothing. With a job
# R running (3 ranks):
#  - `gang run -n 99` (more CPUs than the cluster has) is refused;
#  - a missing program is refused before anything starts;
#  - bad knob values (`policy` bogus, `slot_ms` 0) fail with EINVAL and
#    change nothing;
#  - garbage on gangd's port (text, an oversized frame header, a Hello with
#    a wrong proof), sent from compute node 1, is dropped with a line in gangd's log, and
#    gangd keeps serving; the wrong Hello is answered with a refusal;
# and R still finishes with 0.
. /scenarios/cluster_lib.sh

cluster_init
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100
start_node_agent

# knob_write NAME KNOB VALUE: as root, the way an operator would.
knob_write() {
	cat "$GANGD_KNOBS/$2" > "$RESULTS/$1.before" 2>&1
	sh -c "echo '$3' > $GANGD_KNOBS/$2" > "$RESULTS/$1.out" 2> "$RESULTS/$1.err"
	echo $? > "$RESULTS/$1.rc"
	cat "$GANGD_KNOBS/$2" > "$RESULTS/$1.after" 2>&1
}

gangd_log_lines() { wc -l < "$RESULTS/gangd.log"; }

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"
	# R runs through every check and ends once they are done (its stop
	# file, on the compute nodes), at the latest after 150 s.
	submit R 3 -- /usr/bin/burn --seconds 150 --stop-file /tmp/R.stop --name R; R=$JOB_PID
	wait_jobs running 1 60

	try n99 as_alice gang run -n 99 -- /usr/bin/burn --seconds 1
	try missing as_alice gang run -n 3 -- /no/such/program
	as_alice gang ps --json > "$RESULTS/ps_after_refusals.json" 2>&1
	knob_write policy policy bogus
	knob_write slot0 slot_ms 0

	# Garbage from node 1, while node 0 watches gangd's log.
	lines=$(gangd_log_lines)
	board_put phase garbage
	wait_board garbage.node1 sent 120 || fail "node 1 sent no garbage"
	sleep 1
	tail -n +$((lines + 1)) "$RESULTS/gangd.log" > "$RESULTS/garbage.log"
	node_count > "$RESULTS/nodes_after_garbage"
	try ps_after_garbage as_alice gang ps --json
	kill -0 "$GANGD_PID" && echo alive > "$RESULTS/gangd_after_garbage"

	board_put phase checked
	finish_job R "$R"
	cluster_done
else
	if [ "$NODE_ID" = 1 ]; then
		wait_board phase garbage 300 || fail "no garbage phase"
		# 1. Text instead of a frame.
		echo "hello gangd, this is not a frame" | timeout 10 nc -w 3 node0 "$GANGD_PORT" > /dev/null 2>&1
		# 2. A frame header announcing 4 GiB.
		printf 'GANG\000\002\001\377\377\377\377' | timeout 10 nc -w 3 node0 "$GANGD_PORT" > /dev/null 2>&1
		# 3. A well-formed Hello frame, in plain TCP (no TLS, no certificate).
		hello="{\"type\":\"hello\",\"nr_cpus\":1,\"housekeeping_cpus\":\"\",\"agent_version\":\"0\"}"
		(gang_frame 1 "$hello"; sleep 3) | timeout 10 nc -w 3 node0 "$GANGD_PORT" > "$RESULTS/wrong_hello.reply" 2>&1
		board_put garbage.node1 sent || fail "board_put"
	fi
	wait_board phase checked 300 || log "no checked phase"
	touch /tmp/R.stop
	wait_done
fi
exit 0
