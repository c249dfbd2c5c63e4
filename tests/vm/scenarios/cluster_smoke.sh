# Smoke test of the multi-node test bed itself, no coordinator: every node
# reaches every other and node 0's board; `ring` runs across the nodes with
# hand-set GANG_* variables, as alice; then again for 5 s inside a gang of
# a standalone scx_gang beside a busy gang (one vCPU: they take turns); and
# at the end node 0 asks the host to kill the last node
# (cluster.sh --kill-node LAST@mark:@@kill-last-node@@) and sees it vanish.
. /scenarios/cluster_lib.sh

cluster_init
LAST=$((NNODES - 1))

peers() {
	local i=0 p=
	while [ "$i" -lt "$NNODES" ]; do
		p="$p${p:+,}node$i:$1"
		i=$((i + 1))
	done
	echo "$p"
}
export GANG_RANK="$NODE_ID" GANG_SIZE="$NNODES" GANG_NODE="node$NODE_ID"

# 1. A ring across the nodes, as alice.
as_alice id > "$RESULTS/alice.id"
t0=$(now_ms)
GANG_PEERS=$(peers 7100) as_alice ring --rounds 50 > "$RESULTS/ring.json" 2> "$RESULTS/ring.err" ||
	fail "ring: $(cat "$RESULTS/ring.err")"
log "ring of $NNODES: 50 rounds in $(( $(now_ms) - t0 )) ms"

# 2. The same inside a gang, one vCPU shared with a busy gang.
start_scx_gang --slot-ms 50
busy_gang busy 8 1; B=$LAST_GANG_PID
export GANG_PEERS="$(peers 7200)"
in_gang ring ring --seconds 5 --bytes 16384 > "$RESULTS/ring_gang.json" 2> "$RESULTS/ring_gang.err"; R=$!
wait "$R" || fail "ring in a gang: $(cat "$RESULTS/ring_gang.err")"
wait "$B"
stop_scx_gang
board_put "ring.node$NODE_ID" done || fail "board_put"

# 3. The host kills the last node on request.
if [ "$NODE_ID" = 0 ]; then
	i=1
	while [ "$i" -lt "$NNODES" ]; do
		wait_board "ring.node$i" done 120 || fail "node$i never finished its rings"
		i=$((i + 1))
	done
	echo "@@kill-last-node@@"
	t0=$(now_ms)
	wait_for 60 sh -c "! ping -c 1 -W 1 node$LAST > /dev/null" || fail "node$LAST still answers"
	echo "$(( $(now_ms) - t0 ))" > "$RESULTS/last_node_gone_ms"
	log "node$LAST is gone"
	cluster_done "$LAST"
else
	wait_done
fi
exit 0
