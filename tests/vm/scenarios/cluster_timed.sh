# Timed switching (issue 12): gangd sends plans ahead (switching = timed,
# strict barrier, 100 ms slots), and every compute node switches on its own
# clock at the planned instants: no Freeze or Switch per slot. Two jobs of
# 3 ranks (burn) take turns. The head records the nodes file (each node's cluster
# clock), a merged trace, the switch log (one line per generation with each
# node's switch instant on the cluster clock) and gangd's counters.
#
# Then, while the jobs go on: the knob back to commanded and to timed again
# (knob_flip.txt: the switch log's line counts at each step); gangd
# stopped, each compute node counting its own switches over 1.5 s while it
# is away (rotating.txt: "node before after"); gangd started again, which
# adopts the jobs and plans again (switches2.jsonl, counters2.txt).
#
# With gangd #2: a third job S, a TCP ring streaming 256 KiB tokens across
# the nodes all the time, so every boundary where S leaves has data in
# flight that the drain in the slot's tail must see out (or count). While
# it streams, a clock fault injected on the first compute node (its
# clock_fault_us knob: its estimate 50 ms off, as an undetected step;
# fault.txt: switch log lines, commanded_switches, drain_timeouts and
# switches, before and 4 s after); then a fourth job C whose rank 1 stops
# reading after 3 s (ring --stop-reading): its data on rank 0's node can
# never drain, so every switch away from C there ends in a drain timeout,
# counted, and the rotation goes on (stall.txt: the same counts when C
# stalls and 8 s later).
. /scenarios/cluster_lib.sh

cluster_init
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100 \
	--switching timed --switch-log "$RESULTS/switches.jsonl"
start_node_agent

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"
	submit A 3 -- /usr/bin/burn --seconds 70 --name A; A=$JOB_PID
	submit B 3 -- /usr/bin/burn --seconds 70 --name B; B=$JOB_PID
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

	# The knob at run time: commanded, then timed again.
	n0=$(wc -l < "$RESULTS/switches.jsonl")
	echo commanded > "$GANGD_KNOBS/switching" || fail "switching=commanded refused"
	sleep 2
	n1=$(wc -l < "$RESULTS/switches.jsonl")
	echo timed > "$GANGD_KNOBS/switching" || fail "switching=timed refused"
	sleep 3
	n2=$(wc -l < "$RESULTS/switches.jsonl")
	echo "$n0 $n1 $n2" > "$RESULTS/knob_flip.txt"
	log "knob flip: switch log lines $n0 -> $n1 (commanded) -> $n2 (timed)"

	# gangd away: every compute node goes on with its plan on its own.
	stop_gangd
	mv "$RESULTS/gangd.log" "$RESULTS/gangd.1.log"
	board_put phase away
	: > "$RESULTS/rotating.txt"
	i=$FIRST_COMPUTE
	while [ "$i" -lt "$NNODES" ]; do
		poll_for 30 test -s "$BOARD/rotating.node$i" || log "node$i did not count"
		echo "node$i $(cat "$BOARD/rotating.node$i" 2>/dev/null || echo none)" \
			>> "$RESULTS/rotating.txt"
		i=$((i + 1))
	done
	log "while gangd was away: $(tr '\n' ' ' < "$RESULTS/rotating.txt")"

	# gangd back: it adopts the jobs and plans again.
	start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100 \
		--switching timed --switch-log "$RESULTS/switches2.jsonl"
	poll_for 60 grep -q "adoption over" "$RESULTS/gangd.log" || log "adoption never ended"
	sleep 5
	for k in switches late_switches late_plans missed_switches commanded_switches; do
		echo "$k $(cat "$GANGD_KNOBS/$k")"
	done > "$RESULTS/counters2.txt"
	log "counters after the restart: $(tr '\n' ' ' < "$RESULTS/counters2.txt")"

	# S streams from now on.
	submit S 3 -- /usr/bin/ring --bytes 262144 --seconds 25 --timeout 300; S=$JOB_PID
	wait_jobs running 3 60

	# A clock fault on the first compute node: detected at its next clock
	# exchange, switched by command until its clock is good again.
	counts() { echo "$(wc -l < "$RESULTS/switches2.jsonl") $(cat "$GANGD_KNOBS/commanded_switches") $(cat "$GANGD_KNOBS/drain_timeouts") $(cat "$GANGD_KNOBS/switches")"; }
	f0=$(counts)
	board_put phase fault
	poll_for 30 test -s "$BOARD/fault.done" || log "the fault was not injected"
	sleep 4
	echo "$f0 $(counts)" > "$RESULTS/fault.txt"
	log "clock fault (lines commanded timeouts switches, before and after): $(cat "$RESULTS/fault.txt")"

	# A peer that stops reading: C's rank 1 after 3 s.
	submit C 3 -- /usr/bin/ring --bytes 1048576 --seconds 600 --timeout 600 --stop-reading 1:3; C=$JOB_PID
	wait_jobs running 4 60
	sleep 5
	s0=$(counts)
	sleep 8
	echo "$s0 $(counts)" > "$RESULTS/stall.txt"
	log "C stalled (lines commanded timeouts switches, then 8 s later): $(cat "$RESULTS/stall.txt")"
	kill -INT "$C"
	finish_job C "$C"
	finish_job S "$S"
	finish_job A "$A"
	finish_job B "$B"
	cluster_done
else
	wait_board phase running 120 || fail "the jobs never ran"
	# gangd away: this node's own switches over 1.5 s.
	if wait_board phase away 120; then
		a=$(cat "$KNOBS/switches")
		sleep 1.5
		b=$(cat "$KNOBS/switches")
		board_put "rotating.node$NODE_ID" "$a $b"
	fi
	if [ "$NODE_ID" = "$FIRST_COMPUTE" ] && wait_board phase fault 120; then
		echo 50000 > "$KNOBS/clock_fault_us" || fail "clock_fault_us=50000 refused"
		board_put fault.done yes
	fi
	wait_done
fi
exit 0
