# Cluster acceptance: attacks. While alice's job R (3 ranks, one per compute
# node) runs, the cluster is attacked the ways issue 10 names, each attempt
# recorded for tests/vm_cluster.rs to judge:
#  1. flood: node 1 holds 200 idle connections to gangd's port;
#  2. rogue agent: node 1 offers a certificate of a CA of its own;
#  3. replay: node 3's agent reaches gangd through a machine in the middle
#     (`attack replay` on node 3) that records it and plays the recording
#     to gangd on a connection of its own;
#  4. PMI: the head's listening TCP ports while jobs run (no PMI port);
#  5. a user (bob) asks for traces, kills alice's job, writes knobs and
#     opens the node's control socket;
#  6. fake gangd: gangd is stopped and bob serves gangd's port with a CA of
#     his own; every agent comes back to it and must refuse it (and never
#     run its uid-0 SpawnRank);
#  7. late rejoin: the real gangd comes back while node 2 is kept away (its
#     way to gangd, a forwarder, stopped): no job is accepted until node 2
#     is back or 30 s passed; then job S gets an id of its own, node 2
#     rejoins with R's rank and it goes back to R (never to S);
# and R and S finish with 0.
. /scenarios/cluster_lib.sh

cluster_init
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100
# start_agent_via PORT: this node's agent reaches gangd through a local
# forwarder on PORT (started by the caller); joins in turn like
# start_node_agent.
start_agent_via() {
	sleep 1
	wait_board gangd up 120 || fail "gangd did not come up on node 0"
	wait_board "joined.node$((NODE_ID - 1))" yes 300 || fail "node$((NODE_ID - 1)) never joined"
	scx_gang --coordinator "127.0.0.1:$1" --tls-dir "$NODE_TLS" \
		--node-name "node$NODE_ID" --min-other-share-pct "$OTHER_SHARE_PCT" \
		> "$RESULTS/scx_gang.log" 2>&1 &
	SCX_PID=$!
	poll_for 120 joined_or_dead
	joined || fail "scx_gang did not join through port $1: $(tail -5 "$RESULTS/scx_gang.log")"
	board_put "joined.node$NODE_ID" yes
	poll_for 120 attached_or_dead
	board_put "ready.node$NODE_ID" yes
}

case $NODE_ID in
2)
	attack forward --listen 127.0.0.1:7072 --to "node0:$GANGD_PORT" \
		> "$RESULTS/forward.out" 2>&1 &
	PROXY_PID=$!
	start_agent_via 7072
	;;
3)
	# Node 3's way to gangd goes through the man in the middle.
	attack replay --listen 127.0.0.1:7071 --to "node0:$GANGD_PORT" --secs 20 \
		> "$RESULTS/replay.json" 2> "$RESULTS/replay.err" &
	PROXY_PID=$!
	start_agent_via 7071
	;;
*) start_node_agent ;;
esac

# listening_ports: the TCP ports something listens on here (state 0A).
listening_ports() {
	for f in /proc/net/tcp /proc/net/tcp6; do
		awk '$4 == "0A" { split($2, a, ":"); print a[2] }' "$f" 2>/dev/null
	done | while read -r h; do printf '%d\n' "0x$h"; done | sort -nu | tr '\n' ' '
}

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"
	# R lives through every phase: it ends when the compute nodes have done
	# their last check (its stop file), at the latest after 600 s.
	submit R 3 -- /usr/bin/burn --seconds 600 --stop-file /tmp/R.stop --name R; R=$JOB_PID
	wait_jobs running 1 60
	RID=$(job_id R)

	# 1 + 2: from node 1; gangd must keep serving meanwhile.
	board_put phase flood
	sleep 5
	try ps_during_flood as_alice gang ps --json
	node_count > "$RESULTS/nodes_during_flood"
	wait_board flood.node1 done 180 || fail "node 1 never finished its flood"
	wait_board rogue.node1 done 120 || fail "node 1 never tried its rogue agent"

	# 3: the replay, recorded by node 3 after 20 s of its agent's traffic.
	wait_board replay.node3 done 180 || fail "node 3 never replayed"

	# 4: no port but gangd's and the board's (and the PMI of no job).
	listening_ports > "$RESULTS/head_ports"

	# 5: bob against alice's job and the cluster's trace.
	i=0
	while [ $i -lt 5 ]; do
		try "bob_trace$i" as_user $BOB_UID gang trace --seconds 600 --json /tmp/bob.json
		i=$((i + 1))
	done
	try bob_kill as_user $BOB_UID gang kill "$RID"
	try bob_suspend as_user $BOB_UID gang suspend "$RID"
	try bob_gangd_knob as_user $BOB_UID sh -c "echo 1 > $GANGD_KNOBS/slot_ms"
	board_put phase users
	wait_board users.node1 done 120 || fail "node 1 never tried as bob"

	# 6: gangd away, bob's fake on its port for 25 s.
	stop_gangd
	mv "$RESULTS/gangd.log" "$RESULTS/gangd.1.log"
	board_put phase fake
	as_user $BOB_UID attack fake-gangd --listen "0.0.0.0:$GANGD_PORT" --secs 25 \
		> "$RESULTS/fake_gangd.json" 2> "$RESULTS/fake_gangd.err"
	# 7: gangd back, node 2 kept away.
	board_put phase late
	wait_board paused.node2 yes 120 || fail "node 2 did not stop its way to gangd"
	start_gangd --nodes 1 --slot-ms 100
	poll_for 60 nodes_at_least 2 || log "nodes 1 and 3 did not come back"
	try early as_alice gang run -n 1 -- /bin/true
	poll_for 60 grep -q "adoption over" "$RESULTS/gangd.log" || log "adoption never ended"
	submit S 2 -- /usr/bin/burn --seconds 20 --name S; S=$JOB_PID
	wait_jobs running 2 60
	try ps_late as_alice gang ps --json
	board_put phase rejoin
	poll_for 120 nodes_stable "$COMPUTE_NODES" || log "only $(node_count) nodes came back"
	try ps_after as_alice gang ps --json
	finish_job S "$S"
	board_put phase after
	i=1
	while [ $i -lt "$NNODES" ]; do
		wait_board "checked.node$i" done 120 || log "node$i did not check for pwned"
		i=$((i + 1))
	done

	finish_job R "$R"
	cluster_done
else
	if [ "$NODE_ID" = 1 ]; then
		wait_board phase flood 300 || fail "no flood phase"
		attack flood --to "node0:$GANGD_PORT" --count 200 --secs 20 \
			> "$RESULTS/flood.json" 2> "$RESULTS/flood.err"
		board_put flood.node1 done
		attack rogue-agent --to "node0:$GANGD_PORT" \
			> "$RESULTS/rogue.json" 2> "$RESULTS/rogue.err"
		board_put rogue.node1 done
		wait_board phase users 300 || fail "no users phase"
		try bob_control as_user $BOB_UID scx_gang trace --seconds 1
		ls -l /run/scx_gang.sock > "$RESULTS/control_mode" 2>&1
		try bob_node_knob as_user $BOB_UID sh -c "echo 1 > $KNOBS/slot_ms"
		board_put users.node1 done
	fi
	if [ "$NODE_ID" = 3 ]; then
		poll_for 120 test -s "$RESULTS/replay.json" || log "no replay result"
		board_put replay.node3 done
	fi
	if [ "$NODE_ID" = 2 ]; then
		wait_board phase late 600 || fail "no late phase"
		kill -STOP "$PROXY_PID"
		board_put paused.node2 yes
		wait_board phase rejoin 600 || fail "no rejoin phase"
		kill -CONT "$PROXY_PID"
	fi
	wait_board phase after 600 || log "no after phase"
	{ test -e /tmp/pwned && cat /tmp/pwned; } > "$RESULTS/pwned" 2>&1
	touch /tmp/R.stop
	board_put "checked.node$NODE_ID" done
	wait_done
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
fi
exit 0
