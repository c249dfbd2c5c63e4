# Benchmark (not a test): the wait policies of the gang runtime library
# (issue 4), seed 003's question on our cluster. A ring job, one rank per
# compute node, passes a small token (ring --bytes 64) for WAIT_SECONDS while
# on every compute node a CPU-bound process competes for the node's one CPU:
#   eevdf:    no sched_ext scheduler; the ring's ranks and the competitors
#             are plain processes (implicit co-scheduling: only the wait
#             policy can keep the ranks in step);
#   scx_gang: gangd and an agent per node; the ring and a burn job of as many
#             ranks each get a slot (slot_ms WAIT_SLOT_MS, barrier strict).
# For each policy (ring --wait): rounds per second of the ring (rank 0) and
# the library's counters. Results: node 0's $RESULTS/wait.jsonl.
# Settings (env.NAME=a,b): WAIT_POLICIES "block spin:200 adaptive inslot:200"
#   WAIT_SECONDS 6   WAIT_SLOT_MS 50   WAIT_REPS 2
. /scenarios/cluster_lib.sh

POLICIES=${WAIT_POLICIES:-"block spin:200 adaptive inslot:200"}
SECS=${WAIT_SECONDS:-6}
SLOT=${WAIT_SLOT_MS:-50}
REPS=${WAIT_REPS:-2}
NC=$COMPUTE_NODES
[ "$NC" -ge 2 ] || fail "a ring needs at least 2 compute nodes"
PROGRESS=waitbench

# peers PORT: every compute node's address, by rank.
peers() {
	local i=$FIRST_COMPUTE p=""
	while [ "$i" -lt "$NNODES" ]; do p="$p${p:+,}node$i:$1"; i=$((i + 1)); done
	echo "$p"
}
rate() { sed -n 's/.*"rounds":\([0-9]*\).*"elapsed_s":\([0-9.]*\).*/\1 \2/p' | awk '{ if ($2 > 0) printf "%.1f", $1 / $2; else print 0 }'; }

# ---- eevdf: plain processes, in lock step through the board ----------------
eevdf_phase() {
	local k=0 rep p port out i
	for rep in $(seq "$REPS"); do
		for p in $POLICIES; do
			k=$((k + 1))
			port=$((7200 + k))
			if [ "$NODE_ID" = 0 ]; then
				board_put wstep "$k"
				every_compute wdone "$k" 300 "finished wait run $k"
				out=$(board_get "wres.$k")
				echo "{\"sched\":\"eevdf\",\"policy\":\"$p\",\"rep\":$rep,\"rate\":$(echo "$out" | rate),\"rank0\":$out}" >> "$RESULTS/wait.jsonl"
				say "eevdf rep $rep $p: $(echo "$out" | rate) rounds/s"
			else
				wait_board wstep "$k" 300 || fail "node 0 never started wait run $k"
				burn --seconds $((SECS + 20)) --name hog > /dev/null &
				HOG=$!
				GANG_RANK=$((NODE_ID - FIRST_COMPUTE)) GANG_SIZE=$NC GANG_PEERS=$(peers "$port") \
					ring --seconds "$SECS" --bytes 64 --wait "$p" --timeout 60 > /tmp/ring.json 2> /tmp/ring.err ||
					say "ring failed: $(tail -2 /tmp/ring.err)"
				kill $HOG; wait $HOG
				[ "$NODE_ID" = "$FIRST_COMPUTE" ] && board_put "wres.$k" "$(cat /tmp/ring.json)"
				board_put "wdone.node$NODE_ID" "$k" || fail "board"
			fi
		done
	done
}

# ---- scx_gang: two jobs through gangd ------------------------------------
scx_phase() {
	local rep p PB out
	for rep in $(seq "$REPS"); do
		for p in $POLICIES; do
			# runas execs gang: $! is the front end, which Ctrl-C (INT) ends with its job.
			runas $ALICE_UID $ALICE_UID -- gang run -n "$NC" --name busy -- /usr/bin/burn --seconds $((SECS + 30)) > /dev/null 2>&1 &
			PB=$!
			as_alice gang run -n "$NC" --name ring --label -- /usr/bin/ring --seconds "$SECS" --bytes 64 \
				--wait "$p" --timeout 60 > /tmp/ring.out 2> /tmp/ring.err || say "ring failed: $(tail -2 /tmp/ring.err)"
			kill -INT $PB; wait $PB
			out=$(sed -n 's/^0: //p' /tmp/ring.out | head -1)
			[ -n "$out" ] || out='{"rounds":0,"elapsed_s":0}'
			echo "{\"sched\":\"scx_gang\",\"policy\":\"$p\",\"rep\":$rep,\"rate\":$(echo "$out" | rate),\"rank0\":$out}" >> "$RESULTS/wait.jsonl"
			say "scx_gang rep $rep $p: $(echo "$out" | rate) rounds/s"
			sleep 1
		done
	done
}

cluster_init
say "$NC compute node(s); policies $POLICIES; $SECS s per run; slot_ms $SLOT; reps $REPS"
[ "$NODE_ID" = 0 ] && : > "$RESULTS/wait.jsonl"
eevdf_phase
if [ "$NODE_ID" = 0 ]; then
	start_gangd --nodes "$NC" --slot-ms "$SLOT" --barrier strict --fill 0
fi
start_node_agent
if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$NC"
	sleep 2
	scx_phase
	cluster_done
else
	wait_done
fi
exit 0
