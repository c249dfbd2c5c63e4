# Helpers for the multi-node scenarios (busybox sh, sourced, not run). Every
# node runs the same scenario; NODE_ID tells them apart.
#
# Node 0 is the head: it runs gangd, the users' front ends (`gang`) and a tiny
# "board" (a key/value service on port 7999, busybox nc) through which the
# nodes wait for each other, but no agent and no ranks. Nodes 1..NNODES-1
# compute: each runs scx_gang --coordinator and stays up until the head says
# it is done. (With CLUSTER_HEAD=0 node 0 computes too; on one emulated CPU
# shared with busy ranks, gangd and every `gang` command then crawl: a
# `gang ps` took 10-13 s instead of 0.5-1 s.)
#
# Typical scenario:
#   . /scenarios/cluster_lib.sh
#   cluster_init
#   [ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100
#   start_node_agent
#   if [ "$NODE_ID" = 0 ]; then
#       wait_nodes "$COMPUTE_NODES"; ...jobs...; board_put phase x; ...; cluster_done
#   else
#       wait_board phase x; ...; wait_done
#   fi
. /scenarios/lib.sh

# With the uptime: the nodes' logs can be read side by side.
log() { echo "[scenario $(cut -d' ' -f1 /proc/uptime)] $*"; }

# say MESSAGE: a progress line for the host: "PROGRESS: MESSAGE". The host's
# script shows node 0's lines of its scenario's tag (scripts/eval.sh "eval",
# bench_cluster.sh "bench", bench_wait.sh "waitbench"); a scenario sets
# PROGRESS after sourcing this file.
PROGRESS=scenario
say() { log "$PROGRESS: $*"; }

# poll_for SECONDS CMD...: like lib.sh's wait_for, but CMD runs once a second.
# A node has one emulated CPU shared with busy ranks: polling a `gang ps` or
# an nc 20 times a second would take the CPU its agent and gangd need.
poll_for() {
	local until_ms=$(( $(now_ms) + $1 * 1000 )); shift
	until "$@" 2>/dev/null; do
		[ "$(now_ms)" -ge "$until_ms" ] && return 1
		sleep 1
	done
}

NL='
'
# (cluster_bench.sh names the same choice BENCH_HEAD.)
CLUSTER_HEAD=${CLUSTER_HEAD:-${BENCH_HEAD:-1}}
COMPUTE_NODES=$((NNODES - CLUSTER_HEAD))
FIRST_COMPUTE=$CLUSTER_HEAD
# is_compute: this node runs an agent and ranks.
is_compute() { [ "$NODE_ID" -ge "$FIRST_COMPUTE" ]; }

GANGD_KNOBS=/run/gangd
# The image's cluster CA (gangd) and each node's certificate (scripts/image.sh).
GANGD_CA=/etc/gangd/ca
NODE_TLS=/etc/scx_gang/tls/node$NODE_ID
GANGD_PORT=7070
BOARD_PORT=7999
BOARD=/run/board
ALICE_UID=1000
BOB_UID=1001

# cluster_init: on every node, first. Homes for the test users, the board on
# node 0, and every peer reachable.
cluster_init() {
	local i
	chown alice:alice /home/alice 2>/dev/null
	chown bob:bob /home/bob 2>/dev/null
	mkdir -p "$BOARD"
	[ "$NODE_ID" = 0 ] && start_board
	i=0
	while [ "$i" -lt "$NNODES" ]; do
		[ "$i" = "$NODE_ID" ] || wait_for 60 ping -c 1 -W 1 "node$i" > /dev/null || {
			# (iproute2's ip by its path: busybox's has no -s. ARP was
			# complete both ways in the one failure kept so far while ping
			# failed: the counters say where the packets went.)
			{ /usr/bin/ip -s addr; /usr/bin/ip -s link; /usr/bin/ip route show
			  /usr/bin/ip neigh; cat /proc/net/snmp; dmesg | tail -n 30; } > "$RESULTS/net.txt" 2>&1
			fail "node$i does not answer ping"
		}
		i=$((i + 1))
	done
	log "node $NODE_ID: all $NNODES nodes reachable"
	[ "$NODE_ID" = 0 ] || wait_board board up 60 || fail "node 0's board does not answer"
}

# ---- the board (node 0, port 7999) --------------------------------------------------

start_board() {
	cat > /run/board.sh <<'EOF'
#!/bin/sh
read -r cmd key val
case $key in ''|*[!A-Za-z0-9_.-]*) echo "ERR bad key"; exit 0 ;; esac
case $cmd in
get) cat "/run/board/$key" 2>/dev/null
	[ "$key" != abort ] && [ -f /run/board/abort ] && echo "!abort $(cat /run/board/abort)" ;;
put) echo "$val" > "/run/board/$key.tmp" && mv "/run/board/$key.tmp" "/run/board/$key" && echo OK ;;
*) echo "ERR bad command" ;;
esac
EOF
	chmod 0755 /run/board.sh
	echo up > "$BOARD/board"
	nc -ll -p "$BOARD_PORT" -e /run/board.sh < /dev/null > /dev/null 2>&1 &
	BOARD_PID=$!
	wait_for 10 sh -c "netstat -ltn | grep -q ':$BOARD_PORT '" || fail "the board does not listen"
}

# board_req KEY: the board's raw answer: KEY's value (empty if unset) and,
# if a node failed, a line "!abort MESSAGE". Fails if node 0 does not answer.
board_req() {
	if [ "$NODE_ID" != 0 ]; then
		echo "get $1" | timeout 10 nc -w 3 node0 "$BOARD_PORT" 2>/dev/null
		return
	fi
	[ -f "$BOARD/$1" ] && cat "$BOARD/$1"
	[ "$1" != abort ] && [ -f "$BOARD/abort" ] && echo "!abort $(cat "$BOARD/abort")"
	return 0
}

# board_get KEY: its value (empty if unset); fails if node 0 does not answer.
board_get() {
	local out
	out=$(board_req "$1") || return 1
	case $out in "!abort "*) out= ;; esac
	echo "${out%%"$NL"*}"
}

# board_put KEY VALUE...: fails if node 0 does not answer.
board_put() {
	local k=$1; shift
	if [ "$NODE_ID" = 0 ]; then
		echo "$*" > "$BOARD/$k.tmp" && mv "$BOARD/$k.tmp" "$BOARD/$k"
		return
	fi
	[ "$(echo "put $k $*" | timeout 10 nc -w 3 node0 "$BOARD_PORT" 2>/dev/null)" = OK ] || {
		log "board_put $k: node 0 did not answer"
		return 1
	}
}

# wait_board KEY VALUE [SECONDS]: until KEY has VALUE (default 300 s). Gives
# up early when a node failed (the board's "abort" key) or node 0 is gone.
wait_board() {
	local until_ms=$(( $(now_ms) + ${3:-300} * 1000 )) out v misses=0
	while :; do
		if out=$(board_req "$1"); then
			misses=0
			case $out in "!abort "*) v= ;; *) v=${out%%"$NL"*} ;; esac
			[ "$v" = "$2" ] && return 0
			case $out in
			*"!abort "*) log "giving up on $1: ${out#*!abort }"; return 1 ;;
			esac
		else
			misses=$((misses + 1))
			[ "$misses" -ge 5 ] && { log "giving up on $1: node 0 is gone"; return 1; }
		fi
		[ "$(now_ms)" -ge "$until_ms" ] && return 1
		sleep 1
	done
}

# A failure anywhere ends the run everywhere: the board's "abort" key stops
# every node waiting on the board, and node 0 stays a moment to serve it.
fail() {
	echo "[scenario] FAIL: $*"
	echo "$*" > "$RESULTS/failure"
	# The first failure is the cause; later ones are often its consequences.
	[ -n "$(board_get abort 2> /dev/null)" ] || board_put abort "node$NODE_ID: $*" > /dev/null 2>&1
	[ "$NODE_ID" = 0 ] && sleep 5
	exit 1
}

# ---- gangd and the node agents -----------------------------------------------------

# start_gangd ARGS...: node 0 only. gangd with the image's cluster CA, its log
# in $RESULTS/gangd.log; returns once it listens and serves its knob files.
# A node is lost after NODE_TIMEOUT_MS (default 10000) of silence: gangd's
# default (3 s) is meant for real machines, and an emulated node runs 10 to
# 50 times slower (starting a rank alone takes it about 2 s).
NODE_TIMEOUT_MS=${NODE_TIMEOUT_MS:-10000}
start_gangd() {
	[ "$NODE_ID" = 0 ] || fail "start_gangd on node $NODE_ID: gangd runs on node 0"
	gangd --ca-dir "$GANGD_CA" --node-timeout-ms "$NODE_TIMEOUT_MS" "$@" \
		> "$RESULTS/gangd.log" 2>&1 &
	GANGD_PID=$!
	poll_for 60 gangd_up_or_dead
	kill -0 "$GANGD_PID" 2>/dev/null || fail "gangd exited: $(tail -5 "$RESULTS/gangd.log")"
	gangd_up || fail "gangd did not come up: $(tail -5 "$RESULTS/gangd.log")"
	board_put gangd up || fail "the board refused a put"
	log "gangd up (pid $GANGD_PID)"
}
gangd_up() {
	test -e "$GANGD_KNOBS/nodes" && netstat -ltn | grep -q ":$GANGD_PORT "
}
gangd_up_or_dead() { gangd_up || ! kill -0 "$GANGD_PID"; }

# stop_gangd: Ctrl-C; its exit status goes to gangd.rc.
stop_gangd() {
	kill -INT "$GANGD_PID" 2>/dev/null
	wait_for 20 sh -c "! kill -0 $GANGD_PID" || kill -KILL "$GANGD_PID" 2>/dev/null
	wait "$GANGD_PID"
	echo $? > "$RESULTS/gangd.rc"
	log "gangd stopped"
}

# start_node_agent [ARGS...]: on a compute node, scx_gang joining gangd on
# node 0, as node<NODE_ID> (on the head: nothing but its board entries). Nodes join in order (node i after node i-1 was admitted), so
# gangd numbers them like their names; the agent joins before it loads the
# BPF scheduler, so the slow part (loading, verifying) runs on every node at
# once. Returns once the scheduler is attached (with --switching signal or
# none, which load no BPF: once the knob files are served) and the agent
# logged its admission; SCX_PID is its PID, SCX_SWITCHING its mode, its log
# scx_gang.log.
#
# Tasks of no gang (gangd, the board, this script, the agent's helpers) get
# OTHER_SHARE_PCT (default 25) % of the node's one CPU while gangs are busy:
# at the scheduler's default of 5 %, an emulated CPU leaves gangd and the
# scripts too slow to answer heartbeats and barriers in time.
OTHER_SHARE_PCT=${OTHER_SHARE_PCT:-25}
start_node_agent() {
	if ! is_compute; then
		# The head has no agent; the first compute node joins after it.
		board_put "joined.node$NODE_ID" yes && board_put "ready.node$NODE_ID" yes
		return
	fi
	SCX_SWITCHING=$(switching_of "$@")
	wait_board gangd up 120 || fail "gangd did not come up on node 0"
	[ "$NODE_ID" = 0 ] || wait_board "joined.node$((NODE_ID - 1))" yes 300 ||
		fail "node$((NODE_ID - 1)) never joined"
	scx_gang --coordinator "node0:$GANGD_PORT" --tls-dir "$NODE_TLS" \
		--node-name "node$NODE_ID" --min-other-share-pct "$OTHER_SHARE_PCT" "$@" \
		> "$RESULTS/scx_gang.log" 2>&1 &
	SCX_PID=$!
	poll_for 120 joined_or_dead
	kill -0 "$SCX_PID" 2>/dev/null || fail "scx_gang exited: $(tail -5 "$RESULTS/scx_gang.log")"
	joined || fail "scx_gang did not join: $(tail -5 "$RESULTS/scx_gang.log")"
	board_put "joined.node$NODE_ID" yes || fail "node 0's board does not answer"
	if [ "$SCX_SWITCHING" = bpf ]; then
		poll_for 120 attached_or_dead
		kill -0 "$SCX_PID" 2>/dev/null || fail "scx_gang exited: $(tail -5 "$RESULTS/scx_gang.log")"
		state_is enabled || fail "scx_gang joined but sched_ext is $(cat $SCX_STATE): $(tail -3 "$RESULTS/scx_gang.log")"
	else
		poll_for 60 knobs_or_dead
		kill -0 "$SCX_PID" 2>/dev/null || fail "scx_gang exited: $(tail -5 "$RESULTS/scx_gang.log")"
		test -e "$KNOBS/mode" ||
			fail "scx_gang --switching $SCX_SWITCHING serves no knob files: $(tail -3 "$RESULTS/scx_gang.log")"
	fi
	board_put "ready.node$NODE_ID" yes || fail "node 0's board does not answer"
	log "node $NODE_ID: $(grep -o 'joined cluster as node [0-9]*' "$RESULTS/scx_gang.log" | head -1) (--switching $SCX_SWITCHING)"
}
# switching_of ARGS...: the --switching mode among scx_gang's arguments (bpf,
# its default, if none is given).
switching_of() {
	local mode=bpf
	while [ $# -gt 0 ]; do
		case $1 in
		--switching) [ $# -ge 2 ] && { mode=$2; shift; } ;;
		--switching=*) mode=${1#--switching=} ;;
		esac
		shift
	done
	echo "$mode"
}
knobs_or_dead() { test -e "$KNOBS/mode" || ! kill -0 "$SCX_PID"; }
joined() { grep -q "joined cluster as node" "$RESULTS/scx_gang.log"; }
joined_or_dead() { joined || ! kill -0 "$SCX_PID"; }

# stop_node_agent: Ctrl-C; exit status to scx_gang.rc (lib.sh's stop_scx_gang).
stop_node_agent() {
	kill -0 "$SCX_PID" 2>/dev/null || { echo dead > "$RESULTS/scx_gang.rc"; return; }
	stop_scx_gang
}

# node_count: the number of nodes gangd knows. The knob file holds either a
# number or one line per node.
node_count() {
	local c
	c=$(cat "$GANGD_KNOBS/nodes" 2>/dev/null)
	case $c in
	'' ) echo 0 ;;
	*[!0-9]*) echo "$c" | grep -c . ;;
	*) echo "$c" ;;
	esac
}

# wait_nodes N [SECONDS]: node 0, until every node has its scheduler
# attached (an agent joins gangd before it has loaded it, and a job placed on
# it meanwhile fails) and gangd knows N nodes, and still does 4 s later (an
# agent that falls silent after joining is dropped again).
nodes_at_least() { [ "$(node_count)" -ge "$1" ]; }
nodes_stable() { nodes_at_least "$1" && sleep 4 && nodes_at_least "$1"; }
wait_nodes() {
	local i=0
	while [ "$i" -lt "$NNODES" ]; do
		wait_board "ready.node$i" yes "${2:-120}" || fail "node$i never got ready"
		i=$((i + 1))
	done
	poll_for "${2:-120}" nodes_stable "$1" ||
		fail "gangd knows $(node_count) node(s), not $1: $(cat $GANGD_KNOBS/nodes)"
	log "gangd knows $1 nodes"
}

# every_compute KEY VALUE SECONDS WHAT: node 0, until every compute node put
# KEY.node<i> VALUE (each within SECONDS); else fails "node<i> never WHAT".
every_compute() {
	local i=$FIRST_COMPUTE
	while [ "$i" -lt "$NNODES" ]; do
		wait_board "$1.node$i" "$2" "$3" || fail "node$i never $4"
		i=$((i + 1))
	done
}

# ---- phases: a fresh cluster per phase -------------------------------------------------
# A scenario comparing settings (cluster_eval.sh's policies,
# cluster_switching.sh's modes) restarts gangd and every agent between its
# phases, so that nothing of one lingers into the next. On node 0,
# phase_gangd starts the phase's gangd and returns once every compute node
# is in; end_phase_gangd stops it. A compute node starts its agent once the
# board has gangd.PHASE up, then puts ready.PHASE.node<i> yes.

# phase_gangd PHASE BARRIER [GANGD-ARGS...]: node 0, gangd for the compute
# nodes with BARRIER, its switch log in switch.PHASE.jsonl, and the ARGS;
# the board's gangd.PHASE up; then until every compute node is
# ready.PHASE (300 s each) and gangd knows them all, still 4 s later.
phase_gangd() {
	local k=$1 barrier=$2
	shift 2
	start_gangd --nodes "$COMPUTE_NODES" --barrier "$barrier" \
		--switch-log "$RESULTS/switch.$k.jsonl" "$@"
	board_put "gangd.$k" up
	every_compute "ready.$k" yes 300 "joined phase $k"
	poll_for 60 nodes_stable "$COMPUTE_NODES" ||
		fail "phase $k: gangd knows $(node_count) node(s), not $COMPUTE_NODES"
}

# end_phase_gangd PHASE: node 0, the phase's gangd stopped (stop_gangd: exit
# status in gangd.rc), its log kept as gangd.PHASE.log.
end_phase_gangd() {
	stop_gangd
	mv "$RESULTS/gangd.log" "$RESULTS/gangd.$1.log"
	GANGD_PID=
}

# try NAME CMD...: CMD's exit status, stdout and stderr to NAME.{rc,out,err}.
try() {
	n=$1; shift
	"$@" > "$RESULTS/$n.out" 2> "$RESULTS/$n.err"
	echo $? > "$RESULTS/$n.rc"
	log "$n: rc $(cat "$RESULTS/$n.rc"): $(head -c 300 "$RESULTS/$n.err")"
}

# ---- jobs ----------------------------------------------------------------------------

# as_user UID CMD...: CMD as that user (its own group, no others).
as_user() { local u=$1; shift; runas "$u" "$u" -- "$@"; }
as_alice() { as_user $ALICE_UID "$@"; }

# submit NAME N [GANG-RUN-ARGS...] -- PROG ARGS...: `gang run -n N --name NAME`
# as alice in the background; stdout to NAME.out, stderr to NAME.err, its
# PID in JOB_PID. finish_job NAME PID writes the exit status to NAME.rc.
submit() {
	local name=$1 n=$2; shift 2
	# runas itself, not as_alice: $! must be gang's PID (runas execs it), so
	# that a test can signal it like a shell's Ctrl-C or Ctrl-Z would.
	runas $ALICE_UID $ALICE_UID -- gang run -n "$n" --name "$name" "$@" \
		> "$RESULTS/$name.out" 2> "$RESULTS/$name.err" &
	JOB_PID=$!
	LIVE_JOBS="$LIVE_JOBS $name:$JOB_PID"
	log "submitted $name (-n $n, gang run pid $JOB_PID)"
}
finish_job() {
	local rc j live=
	wait "$2"
	rc=$?
	echo $rc > "$RESULTS/$1.rc"
	for j in $LIVE_JOBS; do [ "${j#*:}" = "$2" ] || live="$live $j"; done
	LIVE_JOBS=$live
	log "job $1 ended with rc $rc"
	return 0
}

# jobs_alive: every `gang run` submitted and not finished still runs; if not,
# says which ended and how.
jobs_alive() {
	local j
	for j in $LIVE_JOBS; do
		kill -0 "${j#*:}" 2>/dev/null && continue
		echo "gang run of job ${j%%:*} ended: $(head -c 300 "$RESULTS/${j%%:*}.err")"
		return 1
	done
}

# jobs_in_state STATE: how many jobs `gang ps --json` shows in STATE
# (case-insensitive, whatever the JSON's spacing).
jobs_in_state() {
	as_alice gang ps --json 2>/dev/null | tr ',{}' '\n\n\n' | grep -ic "\"state\": *\"$1\""
}

# wait_jobs STATE N [SECONDS]: until N jobs are in STATE.
jobs_at_least() { [ "$(jobs_in_state "$1")" -ge "$2" ]; }
jobs_at_least_or_ended() { jobs_at_least "$@" || ! jobs_alive > /dev/null; }
wait_jobs() {
	poll_for "${3:-120}" jobs_at_least_or_ended "$1" "$2"
	jobs_alive || fail "waiting for $2 job(s) $1: $(jobs_alive)"
	jobs_at_least "$1" "$2" ||
		fail "$(jobs_in_state "$1") job(s) $1, not $2: $(as_alice gang ps 2>&1 | tr '\n' ';')"
}

# job_id NAME: the id of alice's job NAME, from `gang ps --json`.
job_id() {
	as_alice gang ps --json 2>/dev/null | tr -d '\n' | tr '}' '\n' | grep "\"name\": *\"$1\"" |
		sed -n 's/.*"job": *\([0-9][0-9]*\).*/\1/p' | head -n 1
}

# job_nodes NAME: the nodes of alice's job NAME, from `gang ps --json`.
job_nodes() {
	as_alice gang ps --json 2>/dev/null | tr -d '\n' | tr '}' '\n' | grep "\"name\": *\"$1\"" |
		sed -n 's/.*"nodes": *\[\([^]]*\)\].*/\1/p' | tr -d '" ' | tr ',' ' ' | head -n 1
}

# cpu_ticks PID: user + system time of a process so far, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# gang_frame CHANNEL JSON: one frame of gangd's wire protocol
# (wire/src/proto/frame.rs: magic, version 2, channel, length, payload).
be32() {
	printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"
}
gang_frame() { printf 'GANG\000\002\'"$(printf %03o "$1")"; be32 ${#2}; printf '%s' "$2"; }

# record_ranks PROG FILE: one line per running PROG process on this node:
# pid, real/effective uid, gid, cgroup.
record_ranks() {
	local pid
	: > "$2"
	for pid in $(pidof "$1"); do
		echo "$pid uid $(awk '/^Uid:/ {print $2, $3}' /proc/$pid/status 2>/dev/null)" \
			"gid $(awk '/^Gid:/ {print $2, $3}' /proc/$pid/status 2>/dev/null)" \
			"cgroup $(cut -d: -f3 /proc/$pid/cgroup 2>/dev/null)" >> "$2"
	done
}

# job_cgroups_empty: every job cgroup below the gang root is gone or empty.
job_cgroups_empty() {
	local d
	for d in "$GANG_ROOT"/job*; do
		[ -d "$d" ] || continue
		[ -z "$(cat "$d/cgroup.procs" 2>/dev/null)" ] || return 1
	done
	return 0
}

# ---- the end -------------------------------------------------------------------------

# save_node_state: what the scheduler and gangd show now, into $RESULTS.
save_node_state() {
	local f
	for f in "$KNOBS"/*; do
		[ -f "$f" ] && echo "$(basename "$f"): $(cat "$f" 2>/dev/null | tr '\n' ';')"
	done > "$RESULTS/scx_gang.knobs" 2>&1
	ls -la "$GANG_ROOT" > "$RESULTS/gang_root.ls" 2>&1
	[ "$NODE_ID" = 0 ] && for f in "$GANGD_KNOBS"/*; do
		[ -f "$f" ] && echo "$(basename "$f"): $(cat "$f" 2>/dev/null | tr '\n' ';')"
	done > "$RESULTS/gangd.knobs" 2>&1
	return 0
}

# wait_done: nodes other than 0 stay up (their agents serving) until node 0
# says it is done, or is gone; then stop the agent, save state and tell
# node 0 this node is finished.
wait_done() {
	local misses=0 out
	while :; do
		if out=$(board_req done); then
			misses=0
			[ "${out%%"$NL"*}" = yes ] && break
			case $out in
			*"!abort "*) log "stopping: ${out#*!abort }"; break ;;
			esac
		else
			misses=$((misses + 1))
			[ "$misses" -ge 10 ] && { log "node 0 is gone"; break; }
		fi
		sleep 1
	done
	save_node_state
	[ -n "$SCX_PID" ] && stop_node_agent
	board_put "finished.node$NODE_ID" yes || true
	log "node $NODE_ID done"
}

# cluster_done [NODE...]: node 0, at the end: tells the others, waits (at most
# 60 s) until every other node, except the ones named (e.g. killed on
# purpose), finished; then stops its own agent and gangd.
cluster_done() {
	local i
	save_node_state
	board_put done yes
	i=1
	while [ "$i" -lt "$NNODES" ]; do
		case " $* " in
		*" $i "*) ;;
		*) wait_board "finished.node$i" yes 60 || log "node$i did not finish" ;;
		esac
		i=$((i + 1))
	done
	[ -n "$SCX_PID" ] && stop_node_agent
	[ -n "$GANGD_PID" ] && stop_gangd
	kill "$BOARD_PID" 2>/dev/null
	log "cluster done"
}
