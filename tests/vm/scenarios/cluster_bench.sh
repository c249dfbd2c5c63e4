# Benchmark (not a test): the cluster analogue of seed 000 Table 4, run by
# scripts/bench_cluster.sh on N compute nodes of one vCPU each. Everything in
# one boot, so the figures stand side by side:
#
#   T_overhead = TQ * (1 - r),  r = (U_a + U_b) / U_alone   (work rates)
#
# Roles. BENCH_HEAD=1 (default): node 0 is a head node: the board, gangd and
# the `gang run` front ends, no agent and no ranks; nodes 1..NNODES-1 compute.
# BENCH_HEAD=0: node 0 computes too (as the acceptance tests run it); then
# gangd is a task of no gang on a CPU its ranks keep busy, and every message
# it handles waits for the scheduler's minimum share of tasks of no gang
# (min_other_share_pct): milliseconds per hop, which is what a barrier then
# measures (only the scx_gang daemon itself, the agent, runs at once).
#
# 1. RTT, idle, default scheduler: node 0 pings every compute node (itself,
#    through loopback, with one node and no head), 20 echoes 0.2 s apart.
# 2. Signal-based switching, no scx_gang attached (default scheduler): on
#    every compute node at once, two local burn processes switched every TQ
#    by sigswitch (SIGSTOP/SIGCONT), against one burn alone. Nodes step
#    through the same list of runs in lock step through node 0's board.
# 3. scx_gang: gangd on node 0 (fill=BENCH_FILL, default 0: a frozen gang's
#    CPU stays idle, so the barrier's time shows as lost work, as a switch's
#    time does in Table 4), an agent on every compute node. One job of N
#    ranks alone (one rank per compute node: no switch), then for each TQ
#    and barrier two such jobs switched every TQ by gangd. Method "yield":
#    barrier strict, and every rank calls the runtime library's yield_point()
#    at each work unit (burn --yield-every 1), so slots end voluntarily
#    (seed 000 Table 5 against Table 4); early_switches counts the switches
#    gangd brought forward. Methods "timed-strict" and "timed-off": the
#    same two jobs under switching = timed (issue 12: plans, every node
#    switching on its own clock at the boundaries; strict parks and drains
#    in the slot's tail); from gangd's timed log lines, skew_us (spread of
#    the nodes' switch instants), late_us and each node's parked_us (the
#    switch's idle time on that node). Method "timed-strict-freezer":
#    timed-strict with every compute node's knob park = freezer (the
#    cgroup freezer) instead of park = bpf; "timed-strict-sockdiag" with
#    drain_check = sock_diag (a dump per drain check) instead of the socket
#    watch; "timed-strict-p50" and "-p90" with drain_lead_pct = 50 or 90
#    (the adaptive lead's quantile) instead of 75; node 0 asks for the knobs on the board (key nodeknobs) and
#    waits until every compute node took them (key nodeknobs.node<i>).
#    slot_ms, barrier and switching are set through
#    /run/gangd between runs. The switches inside the window come from
#    gangd's switch log (switch.jsonl): medians of total_us (barrier start ->
#    last Running), skew_us (spread of the Running answers), freeze_us.
#    Then RTT again: ping idle under scx_gang, ping while a job keeps every
#    node busy, and gangd's heartbeat RTT (min over its samples, /run/gangd/nodes).
#
# The window. Ranks on different VMs have unrelated clocks (the guests read
# the host's RTC to the second, and under emulation the clocks drift), so no
# absolute time is shared. Every burn instead spins from its own start for
# LEAD + D + TAIL seconds and counts only the work units done in
# [start + LEAD, start + LEAD + D] on its own CLOCK_MONOTONIC
# (`burn --busy-window LEAD D TAIL`). As long as all processes of a run start
# less than LEAD apart and TAIL covers the same spread, each process's window
# lies inside the time where every competitor is busy too, so each window
# sees the steady state (both jobs placed and alternating, or both signal
# gangs under sigswitch) and nothing else. The spread of the starts on node 0
# is recorded (spread_ms) and a run where it exceeds LEAD or TAIL is marked
# bad. Rates (units / D) are compared, so D may differ between TQs.
#
# Results: node 0's $RESULTS/gang.jsonl and rtt.jsonl, every node's
# $RESULTS/sig.jsonl (its units: the host adds up the nodes), switch.jsonl.
# Settings (env.NAME=a,b on the kernel command line):
#   BENCH_TQS "50 100 200 500"   BENCH_BARRIERS "strict off"   BENCH_REPS 3
#   BENCH_SECONDS 6 (D = max(BENCH_SECONDS, 12 * TQ / 1000))   BENCH_FILL 0
#   BENCH_SIG 1 (0: skip the signal-based part)   BENCH_HEAD 1
#   BENCH_RETRIES 2: a gang run whose job failed (e.g. gangd dropped a node
#   that stayed silent 2 s in a barrier: "silent in a switch barrier") is
#   run again, at most this many times; the retries are counted in
#   gang.jsonl and a run that never succeeds stays marked ok 0.
. /scenarios/cluster_lib.sh

TQS=${BENCH_TQS:-"50 100 200 500"}
BARRIERS=${BENCH_BARRIERS:-"strict off"}
REPS=${BENCH_REPS:-3}
DMIN=${BENCH_SECONDS:-6}
FILL=${BENCH_FILL:-0}
SIG=${BENCH_SIG:-1}
HEAD=${BENCH_HEAD:-1}
RETRIES=${BENCH_RETRIES:-2}
# The compute nodes (cluster_lib: BENCH_HEAD=1 makes node 0 the head) run
# the ranks and the signal runs (is_compute).
NC=$COMPUTE_NODES FIRST=$FIRST_COMPUTE
[ "$NC" -ge 1 ] || fail "BENCH_HEAD=1 needs at least 2 nodes (a head and a compute node)"
SIGROOT=/sys/fs/cgroup/sigbench   # not below the gang root: no gangs for scx_gang later

# Progress lines the host shows.
PROGRESS=bench

# D, LEAD and TAIL in seconds for a TQ (ms): starts of the second job's ranks
# may wait for its first slot, so LEAD and TAIL grow with TQ.
d_for() { awk -v t="$1" -v d="$DMIN" 'BEGIN { x = 12 * t / 1000; printf "%g\n", (x > d ? x : d) }'; }
lead_for() { awk -v t="$1" 'BEGIN { printf "%g\n", 1.5 + 2 * t / 1000 }'; }

# median: of the numbers on stdin (empty if none).
median() {
	sort -n | awk '{ a[NR] = $1 } END { if (NR) printf "%g\n", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# units FILE: the sum of "units" over the JSON lines of FILE (labels allowed).
units() { sed -n 's/.*"units":\([0-9]*\).*/\1/p' "$1" | awk '{ s += $1 } END { print s + 0 }'; }
starts() { sed -n 's/.*"start_s":\([0-9.]*\).*/\1/p' "$1"; }

# ping_stats HOST: median and min RTT of 20 echoes, in µs.
ping_stats() {
	ping -c 20 -i 0.2 "$1" 2>/dev/null | sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' > /tmp/ping.$$
	echo "$(median < /tmp/ping.$$ | awk '{ printf "%d", $1 * 1000 }') $(sort -n /tmp/ping.$$ | head -1 | awk '{ printf "%d", $1 * 1000 }') $(wc -l < /tmp/ping.$$)"
}
rtt_all() { # WHAT: ping every compute node but node 0 itself (itself if alone)
	local i=$((FIRST > 0 ? FIRST : 1)) peers s
	peers=""
	while [ "$i" -lt "$NNODES" ]; do peers="$peers node$i"; i=$((i + 1)); done
	[ -n "$peers" ] || peers=node0
	for p in $peers; do
		s=$(ping_stats "$p")
		set -- $s
		echo "{\"what\":\"$WHAT\",\"peer\":\"$p\",\"p50_us\":${1:-0},\"min_us\":${2:-0},\"n\":${3:-0}}" >> "$RESULTS/rtt.jsonl"
		say "RTT $WHAT node0 -> $p: p50 ${1:-?} us, min ${2:-?} us (${3:-0} echoes)"
	done
}
gangd_rtt() { # WHAT: gangd's heartbeat RTT per node
	sed -n 's/^[0-9]* \([^ ]*\) .*rtt_us=\([0-9][0-9]*\).*/\1 \2/p' "$GANGD_KNOBS/nodes" | while read -r n r; do
		echo "{\"what\":\"$WHAT\",\"peer\":\"$n\",\"p50_us\":$r,\"min_us\":$r,\"n\":1}" >> "$RESULTS/rtt.jsonl"
		say "RTT $WHAT $n: $r us"
	done
}

# ---- 2. signal-based switching, every node at once --------------------------------

# sig_run REP METHOD TQ: this node's part of one run; METHOD alone or sigstop.
sig_run() {
	local rep=$1 m=$2 tq=$3 d lead A B SW=""
	d=$(d_for "$tq")
	lead=$(lead_for "$tq")
	mkdir -p "$SIGROOT/a" "$SIGROOT/b"
	: > /tmp/sw.json
	sh -c 'echo $$ > "$0/cgroup.procs" && exec burn --busy-window "$1" "$2" "$1" --name a' "$SIGROOT/a" "$lead" "$d" > /tmp/sa.json &
	A=$!
	if [ "$m" = alone ]; then
		wait $A
		: > /tmp/sb.json
	else
		sh -c 'echo $$ > "$0/cgroup.procs" && exec burn --busy-window "$1" "$2" "$1" --name b' "$SIGROOT/b" "$lead" "$d" > /tmp/sb.json &
		B=$!
		sigswitch --slot-ms "$tq" "$SIGROOT/a" "$SIGROOT/b" > /tmp/sw.json &
		SW=$!
		wait $A $B
		kill -TERM $SW; wait $SW
	fi
	cat /tmp/sa.json /tmp/sb.json > /tmp/sig.json
	spread=$(starts /tmp/sig.json | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%d", (hi - lo) * 1000 }')
	echo "{\"rep\":$rep,\"method\":\"$m\",\"tq\":$tq,\"d\":$d,\"node\":$NODE_ID,\"units\":$(units /tmp/sig.json),\"spread_ms\":$spread,\"switches\":$(sed -n 's/.*"switches":\([0-9]*\).*/\1/p' /tmp/sw.json 2>/dev/null | head -1 | grep . || echo 0)}" >> "$RESULTS/sig.jsonl"
}

sig_phase() {
	local k=0 rep tq
	for rep in $(seq "$REPS"); do
		for tq in 0 $TQS; do
			k=$((k + 1))
			if [ "$NODE_ID" = 0 ]; then
				board_put sigstep "$k"
			else
				wait_board sigstep "$k" 300 || fail "node 0 never started signal run $k"
			fi
			if is_compute; then
				if [ "$tq" = 0 ]; then sig_run "$rep" alone 0; else sig_run "$rep" sigstop "$tq"; fi
			fi
			if [ "$NODE_ID" = 0 ]; then
				i=1
				while [ "$i" -lt "$NNODES" ]; do
					wait_board "sigdone.node$i" "$k" 300 || fail "node$i never finished signal run $k"
					i=$((i + 1))
				done
				if is_compute; then res=$(tail -1 "$RESULTS/sig.jsonl"); else res=$(board_get "sigres.node$FIRST"); fi
				say "signal rep $rep/$REPS TQ=$tq done (node $FIRST: $res)"
			else
				[ "$NODE_ID" = "$FIRST" ] && board_put "sigres.node$NODE_ID" "$(tail -1 "$RESULTS/sig.jsonl")"
				board_put "sigdone.node$NODE_ID" "$k" || fail "board"
			fi
		done
	done
	rmdir "$SIGROOT/a" "$SIGROOT/b" "$SIGROOT" 2>/dev/null
}

# ---- 3. scx_gang through gangd (node 0 drives, the others serve) ---------------------

knob() { echo "$2" > "$GANGD_KNOBS/$1" || fail "gangd refused $1=$2"; }

# node_knobs "NAME=VALUE,...": every compute node's knobs are so before
# the run goes on (board key nodeknobs); asked only when they change.
NODE_KNOBS="park=bpf,drain_check=watch,drain_lead_pct=75"
node_knobs() {
	[ "$1" = "$NODE_KNOBS" ] && return
	board_put nodeknobs "$1"
	every_compute nodeknobs "$1" 60 "took $1"
	NODE_KNOBS=$1
	say "compute nodes: $1"
}

# gang_run REP METHOD TQ: METHOD scx_alone (one job) or the barrier (two jobs);
# again while a job fails, at most RETRIES times.
gang_run() {
	local try=0
	while :; do
		gang_try "$@" "$try"
		[ "$ok" = 1 ] || [ "$try" -ge "$RETRIES" ] && break
		try=$((try + 1))
		say "run again ($try of at most $RETRIES)"
		sleep 2   # nodes dropped by gangd come back within a second or two
		bench_nodes_known 60
	done
	tail -1 /tmp/run.json >> "$RESULTS/gang.jsonl"
	say "rep $1/$REPS $2 TQ=$3: $(tail -1 "$RESULTS/gang.jsonl")"
}

gang_try() {
	local rep=$1 m=$2 tq=$3 try=$4 d lead PA PB=0 rc_a rc_b=0 sw0 sw_a sw_b names
	ok=1
	d=$(d_for "$tq")
	lead=$(lead_for "$tq")
	[ "$tq" = 0 ] || knob slot_ms "$tq"
	# yield: the strict barrier, ranks that yield at every work unit.
	YF=""
	case $m in
	timed-strict-freezer) node_knobs "park=freezer,drain_check=watch,drain_lead_pct=75" ;;
	timed-strict-sockdiag) node_knobs "park=bpf,drain_check=sock_diag,drain_lead_pct=75" ;;
	timed-strict-p50) node_knobs "park=bpf,drain_check=watch,drain_lead_pct=50" ;;
	timed-strict-p90) node_knobs "park=bpf,drain_check=watch,drain_lead_pct=90" ;;
	*) node_knobs "park=bpf,drain_check=watch,drain_lead_pct=75" ;;
	esac
	case $m in
	scx_alone) knob switching commanded ;;
	yield) knob switching commanded; knob barrier strict; YF="--yield-every 1" ;;
	timed-strict | timed-strict-freezer | timed-strict-sockdiag | timed-strict-p50 | timed-strict-p90) knob switching timed; knob barrier strict ;;
	timed-off) knob switching timed; knob barrier off ;;
	*) knob switching commanded; knob barrier "$m" ;;
	esac
	sw0=$(cat "$GANGD_KNOBS/switches")
	t0=$(now_ms)
	as_alice gang run -n "$NC" --name "A$rep" --label -- /usr/bin/burn --busy-window "$lead" "$d" "$lead" --name A $YF \
		> /tmp/A.out 2> /tmp/A.err &
	PA=$!
	names=A
	if [ "$m" != scx_alone ]; then
		as_alice gang run -n "$NC" --name "B$rep" --label -- /usr/bin/burn --busy-window "$lead" "$d" "$lead" --name B $YF \
			> /tmp/B.out 2> /tmp/B.err &
		PB=$!
		names="A B"
	fi
	# The switches inside the window, roughly (ranks start a little after
	# their submission): read the counter LEAD + 0.3 s and D later.
	sleep "$(awk -v l="$lead" 'BEGIN { print l + 0.3 }')"
	sw_a=$(cat "$GANGD_KNOBS/switches")
	early_a=$(cat "$GANGD_KNOBS/early_switches")
	sleep "$d"
	sw_b=$(cat "$GANGD_KNOBS/switches")
	early_b=$(cat "$GANGD_KNOBS/early_switches")
	wait $PA; rc_a=$?
	[ "$PB" = 0 ] || { wait $PB; rc_b=$?; }
	: > /tmp/AB.out
	for j in $names; do
		cat "/tmp/$j.out" >> /tmp/AB.out
		[ "$(grep -c '"units"' "/tmp/$j.out")" = "$NC" ] || { ok=0; say "job $j: $(grep -c '"units"' "/tmp/$j.out") rank reports, not $NC: $(tail -3 "/tmp/$j.err")"; }
	done
	[ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] || { ok=0; say "gang run rc $rc_a $rc_b: $(tail -3 /tmp/A.err) $(tail -3 /tmp/B.err 2>/dev/null)"; }
	# Start spread per rank (rank r of both jobs shares node r's CPU: one rank
	# per node, placed in node order), the largest of them.
	spread=0
	if [ "$m" != scx_alone ]; then
		spread=$(for r in $(seq 0 $((NC - 1))); do
			grep "^$r: " /tmp/AB.out | sed -n 's/.*"start_s":\([0-9.]*\).*/\1/p' | sort -n |
				awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%d\n", (hi - lo) * 1000 }'
		done | sort -n | tail -1)
		awk -v s="$spread" -v l="$lead" 'BEGIN { exit !(s / 1000 < l) }' || { ok=0; say "start spread $spread ms >= LEAD $lead s"; }
	fi
	sed -n "$((sw_a + 1)),${sw_b}p" "$RESULTS/switch.jsonl" > /tmp/win.jsonl
	tot=$(sed -n 's/.*"total_us":\([0-9]*\).*/\1/p' /tmp/win.jsonl | median)
	skew=$(sed -n 's/.*"skew_us":\([0-9]*\).*/\1/p' /tmp/win.jsonl | median)
	frz=$(sed -n 's/.*"freeze_us":\([0-9]*\).*/\1/p' /tmp/win.jsonl | median)
	tmax=$(sed -n 's/.*"total_us":\([0-9]*\).*/\1/p' /tmp/win.jsonl | sort -n | tail -1)
	# strict: how long a node stays frozen, from its Frozen to its Running
	# as gangd receives them (the one-way delays cancel): a lower bound of
	# the CPU time the barrier leaves idle on a node per switch (parking and
	# draining come on top). Mean over the nodes, median over the switches.
	idle=$(awk '{ s = $0; n = 0; t = 0
		while (match(s, /"frozen_at_us":[0-9]+,"running_at_us":[0-9]+/)) {
			m = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
			split(m, p, /[:,]/); t += p[4] - p[2]; n++
		}
		if (n) print t / n }' /tmp/win.jsonl | median)
	# timed: each node's parked_us (outgoing parked -> incoming running),
	# mean over the nodes, median over the switches; the top-level late_us
	# (the latest node's lateness; the key before "nodes").
	case $m in
	timed-*)
		idle=$(awk '{ s = $0; n = 0; t = 0
			while (match(s, /"parked_us":[0-9]+/)) {
				m = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
				split(m, p, ":"); t += p[2]; n++
			}
			if (n) print t / n }' /tmp/win.jsonl | median) ;;
	esac
	late=$(sed -n 's/.*"late_us":\([0-9]*\),"nodes".*/\1/p' /tmp/win.jsonl | median)
	fails=$(grep -c '"failed":\[{' /tmp/win.jsonl)
	cp /tmp/AB.out "$RESULTS/ranks.$rep.$m.$tq.out"
	echo "{\"rep\":$rep,\"method\":\"$m\",\"tq\":$tq,\"d\":$d,\"units\":$(units /tmp/AB.out),\"ok\":$ok,\"retries\":$try,\"spread_ms\":$spread,\"switches_before\":$((sw_a - sw0)),\"switches\":$((sw_b - sw_a)),\"early\":$((early_b - early_a)),\"total_p50_us\":${tot:-0},\"total_max_us\":${tmax:-0},\"skew_p50_us\":${skew:-0},\"freeze_p50_us\":${frz:-0},\"idle_p50_us\":${idle:-0},\"late_p50_us\":${late:-0},\"log_from\":$((sw_a + 1)),\"log_to\":$sw_b,\"failed_switches\":$fails,\"took_ms\":$(( $(now_ms) - t0 ))}" > /tmp/run.json
	cat /tmp/run.json >> "$RESULTS/tries.jsonl"
}

# bench_nodes_known [SECONDS]: until gangd knows every compute node, and
# still does 4 s later (an agent that falls silent after joining is dropped).
bench_nodes_known() {
	wait_for "${1:-120}" nodes_stable "$NC" ||
		fail "gangd knows $(node_count) node(s), not $NC: $(cat $GANGD_KNOBS/nodes)"
	log "gangd knows its $NC compute node(s)"
}

gang_phase() {
	local rep tq b
	# Every compute node's agent is up (joined, its scheduler attached:
	# start_node_agent returned there).
	every_compute benchready yes 300 "got its agent up"
	bench_nodes_known
	sleep 2   # a few heartbeats
	WHAT=ping_scx_idle rtt_all
	WHAT=gangd_hb_idle gangd_rtt
	for rep in $(seq "$REPS"); do
		gang_run "$rep" scx_alone 0
		for tq in $TQS; do
			for b in $BARRIERS; do
				gang_run "$rep" "$b" "$tq"
			done
		done
	done
	# RTT while every node is busy with a job (its ranks spinning).
	as_alice gang run -n "$NC" --name load -- /usr/bin/burn --seconds 8 > /dev/null 2>&1 &
	L=$!
	sleep 2
	WHAT=ping_loaded rtt_all
	wait $L
	WHAT=gangd_hb_loaded gangd_rtt
}

# slow_wait_done: a compute node's wait for the end, polling the board every
# 2 s instead of every second (each poll costs node 0 a shell and this node
# an nc: CPU that would be taken from the ranks), then lib's wait_done.
# Meanwhile it sets its knobs as node 0 asks (board key nodeknobs).
slow_wait_done() {
	local misses=0 v p kv applied="park=bpf,drain_check=watch,drain_lead_pct=75"
	while :; do
		if v=$(board_get done); then
			misses=0
			[ "$v" = yes ] && break
			[ -n "$(board_get abort)" ] && break
			p=$(board_get nodeknobs) || p=
			if [ -n "$p" ] && [ "$p" != "$applied" ]; then
				for kv in $(echo "$p" | tr , ' '); do
					echo "${kv#*=}" > "$KNOBS/${kv%%=*}" || fail "the knob ${kv%%=*} refused ${kv#*=}"
				done
				applied=$p
				board_put "nodeknobs.node$NODE_ID" "$p"
			fi
		else
			misses=$((misses + 1))
			[ "$misses" -ge 3 ] && break
		fi
		sleep 2
	done
	wait_done
}

# ---- main -----------------------------------------------------------------------------

cluster_init
say "$NNODES node(s), $NC computing$([ "$HEAD" = 1 ] && echo ', node 0 the head'); TQs: $TQS; barriers: $BARRIERS; reps $REPS; D >= $DMIN s; fill $FILL; signal part $SIG; load $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$RESULTS/sig.jsonl"
if [ "$NODE_ID" = 0 ]; then
	: > "$RESULTS/gang.jsonl"; : > "$RESULTS/rtt.jsonl"
	WHAT=ping_idle rtt_all
	board_put rtt done
else
	wait_board rtt done 300 || fail "node 0 never measured the RTT"
fi
[ "$SIG" = 1 ] && sig_phase
state_is disabled || fail "a sched_ext scheduler is attached before the gang part"

if [ "$NODE_ID" = 0 ]; then
	start_gangd --nodes "$NC" --slot-ms 100 --barrier strict --fill "$FILL" \
		--switch-log "$RESULTS/switch.jsonl"
fi
# (The head has no agent: start_node_agent only puts its board entries, and
# node 1 joins first: agents join in the order of their names.)
start_node_agent
if is_compute; then
	board_put "benchready.node$NODE_ID" yes || fail "node 0's board does not answer"
fi
if [ "$NODE_ID" = 0 ]; then
	gang_phase
	cluster_done
	grep -q '"ok":0' "$RESULTS/gang.jsonl" && say "some runs are marked bad (ok 0)"
else
	slow_wait_done
fi
exit 0
