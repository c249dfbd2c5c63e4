# The evaluation (issue 5): the same jobs, launched the same way (`gang run`
# through gangd, one rank per compute node), under the schedulers people use
# today and under scx_gang, side by side in one boot. scripts/eval.sh boots
# it and turns eval.log into the figures (gang-eval).
#
# Policies, one phase each (gangd and every node's daemon are restarted
# between phases, so nothing of one policy lingers into the next):
#   dedicated    every workload alone (the FIFO baseline), default scheduler
#   eevdf        the kernel's own scheduler (scx_gang --switching none: the
#                agent starts the ranks, nothing switches)
#   bpfland      scx_bpfland attached on every compute node, agent as eevdf
#   signal       signal-based gang scheduling: gangd's rotation, every node
#                stops the outgoing gang and continues the incoming one
#                (SIGSTOP/SIGCONT, --switching signal), barrier off
#   spinblock    implicit coscheduling: eevdf, and every receive spins
#                EVAL_SPIN_US before it blocks (--wait spin:US)
#   gang-off     scx_gang, barrier off
#   gang-strict  scx_gang, barrier strict (network drain before each switch)
#   gang-yield   gang-strict, ranks call yield_point() every iteration
#   gang-timed   gang-strict with timed switching (gangd --switching timed):
#                plans sent ahead, every node switches on its own clock,
#                parking in the slot's tail (docs/timed-switching.md)
#   gang-poll    gang-strict with the node daemon's --no-gang-watch: its main
#                loop wakes every 100 ms to rescan the gang root, as before
#                the gang watch (issue 15: its cost to a lone job)
#
# Cells: for every workload and MPL M, M identical jobs submitted at once
# (same arrival), EVAL_REPS times. EVAL_ROUNDS R > 1 runs the policies' phases
# R times over, in turn (round r's repetitions are numbered r * EVAL_REPS
# on): a drift of the host over the boot then falls on every policy alike
# instead of on the last phases. A short job arriving behind long ones:
# EVAL_SHORT_BEHIND long allreduce jobs, then, EVAL_SHORT_AFTER_S later, a
# short one (its response time against FIFO's).
#
# Output: $RESULTS/eval.log on node 0, the records gang-eval reads (see
# eval/src/records.rs), every job's output in $RESULTS/jobs/, gangd's
# switch logs. Progress: "eval: " lines on node 0's console.
#
# Settings (env.NAME=a,b on the kernel command line):
#   EVAL_POLICIES   "dedicated eevdf bpfland signal spinblock gang-off gang-strict gang-yield"
#   EVAL_WORKLOADS  "rt allreduce alltoall ep mpi_allreduce ompi_allreduce"
#   EVAL_MPLS "1 2 3"  EVAL_REPS 1  EVAL_ROUNDS 1  EVAL_SCALE 1 (multiplies every job's work)
#   EVAL_WORK_PCT 100 (then takes that percentage of it: the test command's
#   reduced size runs half-length jobs)
#   EVAL_SLOT_MS 100  EVAL_SPIN_US 1000  EVAL_SHORT 1  EVAL_SHORT_BEHIND 2
#   EVAL_SHORT_AFTER_S 2  EVAL_CAP_S 300 (a job running longer is killed and
#   recorded with capped=S)  EVAL_SIZE (a label for the report)
#   EVAL_PROBE 0 (1: every rank runs under rankprobe, and each job record
#   carries its ranks' probe figures summed, as probe_<key>=; netpipe's
#   1 KiB one-way time as np_1k_us=)  EVAL_BPF_STATS 0 (1: the kernel times
#   BPF callbacks; scx_gang logs their cost when it stops)
. /scenarios/cluster_lib.sh

POLICIES=${EVAL_POLICIES:-"dedicated eevdf bpfland signal spinblock gang-off gang-strict gang-yield"}
WORKLOADS=${EVAL_WORKLOADS:-"rt allreduce alltoall ep mpi_allreduce ompi_allreduce"}
MPLS=${EVAL_MPLS:-"1 2 3"}
REPS=${EVAL_REPS:-1}
ROUNDS=${EVAL_ROUNDS:-1}
SCALE=${EVAL_SCALE:-1}
WORK_PCT=${EVAL_WORK_PCT:-100}
SLOT_MS=${EVAL_SLOT_MS:-100}
SPIN_US=${EVAL_SPIN_US:-1000}
SHORT=${EVAL_SHORT:-1}
SHORT_BEHIND=${EVAL_SHORT_BEHIND:-2}
SHORT_AFTER_S=${EVAL_SHORT_AFTER_S:-2}
CAP_S=${EVAL_CAP_S:-300}
PROBE=${EVAL_PROBE:-0}
LOG=$RESULTS/eval.log
JOBS=$RESULTS/jobs
C=$COMPUTE_NODES
PROGRESS=eval

# ---- workloads ------------------------------------------------------------------------

# work N: N units of a workload's work at this run's scale and percentage
# (at least 1).
work() {
	local n=$(($1 * SCALE * WORK_PCT / 100))
	[ "$n" -ge 1 ] || n=1
	echo "$n"
}

# wl_cmd WORKLOAD POLICY: the rank's command line. Our workloads take the
# policy's flags (spin-block receives, voluntary yields); MPI programs do
# their own waiting (MPICH polls).
wl_cmd() {
	local w=$1 p=$2 flags=
	case $p in
	spinblock) flags="--wait spin:$SPIN_US" ;;
	gang-yield) flags="--yield" ;;
	esac
	case $w in
	rt) echo "/usr/bin/rt --rounds $(work 1500) $flags" ;;
	allreduce) echo "/usr/bin/allreduce --grain-us 1000 --iters $(work 700) $flags" ;;
	allreduce_long) echo "/usr/bin/allreduce --grain-us 1000 --iters $(work 2100) $flags" ;;
	allreduce_short) echo "/usr/bin/allreduce --grain-us 1000 --iters $(work 150) $flags" ;;
	alltoall) echo "/usr/bin/alltoall --bytes 65536 --iters $(work 150) $flags" ;;
	ep) echo "/usr/bin/ep --grain-us 1000 --iters $(work 1000) $flags" ;;
	mpi_allreduce) echo "/usr/bin/mpi_allreduce --grain-us 1000 --iters $(work 60)" ;;
	mpi_ring) echo "/usr/bin/mpi_ring --rounds $(work 400)" ;;
	# The same allreduce built with Open MPI (PMIx bootstrap, ob1/TCP).
	ompi_allreduce) echo "/usr/bin/ompi_allreduce --grain-us 1000 --iters $(work 60)" ;;
	# NetPIPE (MPICH, polling): 1 byte to 1 KiB ping-pong; it prints no
	# result line, so rankprobe --ok-on-exit gives its own.
	netpipe) echo "/usr/bin/rankprobe --ok-on-exit -- /usr/bin/NPmpich2 -u 1024 -n $(work 20) -p 0 -o /tmp/np.out" ;;
	*) fail "unknown workload $w" ;;
	esac
}

# rank_cmd WORKLOAD POLICY: the command gang run starts, under rankprobe
# (EVAL_PROBE=1: where each rank's node spent its time) or not.
rank_cmd() {
	local c
	c=$(wl_cmd "$1" "$2")
	case $c in
	*rankprobe*) echo "$c" ;;
	*) if [ "$PROBE" = 1 ]; then echo "/usr/bin/rankprobe -- $c"; else echo "$c"; fi ;;
	esac
}

# ---- the phases: which daemons run on the compute nodes ----------------------------------

# switching POLICY: the node daemon's --switching for it.
switching() {
	case $1 in
	dedicated | eevdf | bpfland | spinblock) echo none ;;
	signal) echo signal ;;
	gang-off | gang-strict | gang-yield | gang-timed | gang-poll) echo bpf ;;
	*) fail "unknown policy $1" ;;
	esac
}
# barrier POLICY: gangd's --barrier for it.
barrier() { case $1 in gang-strict | gang-yield | gang-timed | gang-poll) echo strict ;; *) echo off ;; esac; }
# node_flags POLICY: more flags of the node daemon for it.
node_flags() { case $1 in gang-poll) echo --no-gang-watch ;; esac; }
# gangd_switching POLICY: gangd's --switching for it.
gangd_switching() { case $1 in gang-timed) echo timed ;; *) echo commanded ;; esac; }

BPFLAND_PID= SCX_PID= PHASE_NOW=
# bpf_cost: with EVAL_BPF_STATS=1, what the BPF callbacks of the scheduler
# attached in this phase (scx_gang's or scx_bpfland's) cost over it, one
# line per callback into bpf_cost.txt (gang-eval lone puts the schedulers
# side by side, issue 15). Nothing under a kernel scheduler.
bpf_cost() {
	[ "${EVAL_BPF_STATS:-0}" = 1 ] && [ -n "$PHASE_NOW" ] && state_is enabled || return 0
	local out
	out=$(scx_gang bpf-cost 2>&1) || { log "scx_gang bpf-cost failed in $PHASE_NOW: $out"; return 0; }
	echo "$out" | sed "s/^/bpf_cost node=$NODE_ID $PHASE_NOW /" >> "$RESULTS/bpf_cost.txt"
}
# stop_local: this compute node's daemons of the last phase, by PID.
stop_local() {
	bpf_cost
	PHASE_NOW=
	if [ -n "$SCX_PID" ]; then
		kill -INT "$SCX_PID" 2>/dev/null
		wait_for 30 sh -c "! kill -0 $SCX_PID" || kill -KILL "$SCX_PID" 2>/dev/null
		wait "$SCX_PID" 2>/dev/null
		SCX_PID=
	fi
	if [ -n "$BPFLAND_PID" ]; then
		kill -INT "$BPFLAND_PID" 2>/dev/null
		wait_for 30 sh -c "! kill -0 $BPFLAND_PID" || kill -KILL "$BPFLAND_PID" 2>/dev/null
		wait "$BPFLAND_PID" 2>/dev/null
		BPFLAND_PID=
	fi
	wait_for 30 state_is disabled || fail "sched_ext still $(cat $SCX_STATE) after the phase"
}

# attached_or_gone PID: sched_ext is enabled, or PID (the scheduler) exited.
attached_or_gone() { state_is enabled || ! kill -0 "$1"; }

# start_local PHASE POLICY: a compute node joins phase PHASE's gangd.
start_local() {
	local k=$1 p=$2 mode
	mode=$(switching "$p")
	PHASE_NOW="phase=$k policy=$p"
	if [ "$p" = bpfland ]; then
		scx_bpfland > "$RESULTS/bpfland.$k.log" 2>&1 &
		BPFLAND_PID=$!
		# Loading and verifying its BPF takes a minute or more under emulation.
		poll_for 300 attached_or_gone "$BPFLAND_PID"
		state_is enabled || fail "scx_bpfland did not attach: $(tail -3 "$RESULTS/bpfland.$k.log")"
		log "scx_bpfland attached: $(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)"
	fi
	wait_board "gangd.$k" up 120 || fail "gangd of phase $k never came up"
	scx_gang --coordinator "node0:$GANGD_PORT" --tls-dir "$NODE_TLS" \
		--node-name "node$NODE_ID" --min-other-share-pct "$OTHER_SHARE_PCT" \
		--switching "$mode" $(node_flags "$p") > "$RESULTS/scx_gang.$k.log" 2>&1 &
	SCX_PID=$!
	poll_for 120 sh -c "grep -q 'joined cluster as node' $RESULTS/scx_gang.$k.log || ! kill -0 $SCX_PID"
	grep -q 'joined cluster as node' "$RESULTS/scx_gang.$k.log" ||
		fail "scx_gang --switching $mode did not join: $(tail -3 "$RESULTS/scx_gang.$k.log")"
	if [ "$mode" = bpf ]; then
		poll_for 300 attached_or_gone "$SCX_PID"
		state_is enabled || fail "scx_gang did not attach: $(tail -3 "$RESULTS/scx_gang.$k.log")"
	fi
	board_put "ready.$k.node$NODE_ID" yes || fail "node 0's board does not answer"
}

# compute_phases: a compute node follows node 0's phases until node 0 says
# "end" (or a node failed). One board request every 2 s: a node whose one
# CPU runs three spinning MPI ranks answers slowly, so only 10 misses in a
# row mean node 0 is gone.
compute_phases() {
	local k=0 out v misses p
	while :; do
		k=$((k + 1))
		misses=0
		while :; do
			if out=$(board_req phase) && [ -n "$out" ]; then
				misses=0
				case $out in *"!abort "*) log "stopping: ${out#*!abort }"; return 1 ;; esac
				v=${out%%"$NL"*}
				[ "$v" = end ] && { log "node 0 ended the evaluation"; return 0; }
				[ "$v" = "$k" ] && break
			else
				misses=$((misses + 1))
				[ "$misses" -ge 10 ] && fail "node 0's board did not answer 10 times in a row"
			fi
			sleep 2
		done
		p=$(board_get "policy.$k")
		[ -n "$p" ] || fail "phase $k has no policy on the board"
		log "phase $k: $p"
		net_snapshot "phase $k ($p)"
		stop_local
		start_local "$k" "$p"
	done
}

# ---- node 0: the phases and the cells ------------------------------------------------

GANGD_PID=
# head_phase PHASE POLICY: gangd for the policy, every compute node in
# (cluster_lib's phase_gangd; the last phase's gangd stopped first).
head_phase() {
	local k=$1 p=$2
	if [ -n "$GANGD_PID" ]; then
		end_phase_gangd "$((k - 1))"
	fi
	board_put "policy.$k" "$p"
	board_put phase "$k"
	# A fresh cluster per phase: its own state (job ids, known nodes).
	phase_gangd "$k" "$(barrier "$p")" --slot-ms "$SLOT_MS" --mpl-max 4 \
		--switching "$(gangd_switching "$p")" --state-dir "/run/gangd-state.$k"
	say "phase $k: $p (agents --switching $(switching "$p"), barrier $(barrier "$p"), gangd switching $(gangd_switching "$p")) ready"
}

# run_job NAME WORKLOAD POLICY: submits one job (as alice) in the background;
# its end (exit status and time) goes to jobs/NAME.end.
run_job() {
	local name=$1 cmd
	cmd=$(rank_cmd "$2" "$3")
	(
		runas $ALICE_UID $ALICE_UID -- gang run -n "$C" --name "$name" -- $cmd \
			> "$JOBS/$name.out" 2> "$JOBS/$name.err"
		echo "$? $(now_ms)" > "$JOBS/$name.end"
	) &
	echo "$(now_ms)" > "$JOBS/$name.submit"
}

# wait_job NAME: until its end is recorded (polled every 0.2 s: node 0 runs
# no ranks, and a cell's next jobs start sooner). A job still running
# CAP_S after its submission is killed (`gang kill`) and marked capped:
# MPI ranks poll while they wait, and under a local scheduler three jobs of
# them can take hours (scx_bpfland did not finish 20 iterations in 10 min).
wait_job() {
	local cap_ms=$(( $(cat "$JOBS/$1.submit") + CAP_S * 1000 )) id
	until [ -s "$JOBS/$1.end" ]; do
		if [ "$(now_ms)" -ge "$cap_ms" ] && [ ! -e "$JOBS/$1.capped" ]; then
			id=$(job_id "$1")
			say "job $1 still runs after $CAP_S s: killing it (job ${id:-?})"
			touch "$JOBS/$1.capped"
			[ -n "$id" ] && as_alice gang kill "$id" > /dev/null 2>&1
			cap_ms=$(( $(now_ms) + 120000 ))
		elif [ "$(now_ms)" -ge "$cap_ms" ]; then
			fail "job $1 did not end within 120 s of gang kill"
		fi
		usleep 200000
	done
}

# job_fields NAME: the record fields of an ended job.
job_fields() {
	local n=$1 rc end ok elapsed
	set -- $(cat "$JOBS/$n.end")
	rc=$1 end=$2
	ok=$(grep -c '"ok":true' "$JOBS/$n.out")
	elapsed=$(sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p' "$JOBS/$n.out" | sort -n | tail -1)
	echo "submit_ms=$(cat "$JOBS/$n.submit") end_ms=$end rc=$rc ranks=$C ranks_ok=$ok elapsed_s=${elapsed:-0}$([ -e "$JOBS/$n.capped" ] && echo " capped=$CAP_S")$(probe_fields "$n")"
	if [ -e "$JOBS/$n.capped" ]; then
		echo "# CAPPED job $n: killed after $CAP_S s" >> "$LOG"
	elif [ "$rc" != 0 ] || [ "$ok" != "$C" ]; then
		say "job $n FAILED: rc $rc, $ok of $C ranks ok: $(head -c 300 "$JOBS/$n.err" | tr '\n' ' ')" >&2
		echo "# FAILED job $n: rc $rc, $ok of $C ranks ok" >> "$LOG"
	fi
}

# probe_fields NAME: " probe_KEY=SUM ..." over the job's rankprobe lines
# (every rank's), NetPIPE's 1 KiB row (usec, one way) if it has one, and
# rank 0's median iteration time of our workloads (iter_p50_us).
probe_fields() {
	awk '$1 == "rankprobe" { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (!(kv[1] in sum)) order[++n] = kv[1]; sum[kv[1]] += kv[2] } }
		END { for (i = 1; i <= n; i++) printf " probe_%s=%.3f", order[i], sum[order[i]] }' "$JOBS/$1.out"
	np_1k_field "$JOBS/$1.err" "$JOBS/$1.out"
	# Rank 0's median iteration (rt: the round-trip latency).
	sed -n 's/.*"rank":0,.*"iter_us":{"p50":\([0-9.]*\).*/ iter_p50_us=\1/p' "$JOBS/$1.out" | head -1 | tr -d '\n'
}

secs_since() { awk -v t="$1" -v n="$(now_ms)" 'BEGIN { printf "%.1f", (n - t) / 1000 }'; }
switches() { cat "$GANGD_KNOBS/switches" 2>/dev/null || echo 0; }

# tcp_counts: this node's TCP retransmitted segments and retransmission
# timeouts since boot. The eevdf phase once saw every connection of the
# cluster fall silent for 15 s while MPI jobs ran: these counters tell
# packet loss (and TCP's back-off) from a stalled host.
tcp_counts() {
	awk '$1 == "Tcp:" || $1 == "TcpExt:" {
		if (!($1 in hdr)) { hdr[$1] = 1; for (i = 2; i <= NF; i++) col[$1 i] = $i; next }
		for (i = 2; i <= NF; i++) v[col[$1 i]] = $i
	} END { printf "%d %d", v["RetransSegs"], v["TCPTimeouts"] }' /proc/net/snmp /proc/net/netstat
}

# net_snapshot LABEL: a compute node's network counters, appended to
# net.txt at every phase change (the head records them per cell).
net_snapshot() {
	{ echo "== $1 $(cut -d' ' -f1 /proc/uptime)"; cat /proc/net/snmp /proc/net/netstat /proc/net/dev; } >> "$RESULTS/net.txt" 2>/dev/null
}

# all_nodes_in: before a cell, every compute node is known to gangd. A node
# dropped during the last cell (silent past --node-timeout-ms) rejoins on
# its own; without this wait every cell after it would fail at submission.
all_nodes_in() {
	nodes_at_least "$C" && return 0
	say "gangd knows $(node_count) of $C nodes: waiting for them to rejoin"
	poll_for 120 nodes_stable "$C" || say "the nodes did not rejoin: the next jobs will fail"
}

CELLS_DONE=0
# cell POLICY WORKLOAD MPL REP: MPL jobs at once, every one waited for.
cell() {
	local p=$1 w=$2 m=$3 r=$4 i sw0 names= t0 net0 net1
	all_nodes_in
	net0=$(tcp_counts)
	sw0=$(switches)
	t0=$(now_ms)
	i=0
	while [ "$i" -lt "$m" ]; do
		run_job "$p.$w.m$m.r$r.j$i" "$w" "$p"
		i=$((i + 1))
	done
	i=0
	while [ "$i" -lt "$m" ]; do
		wait_job "$p.$w.m$m.r$r.j$i"
		echo "job policy=$p workload=$w mpl=$m rep=$r idx=$i $(job_fields "$p.$w.m$m.r$r.j$i")" >> "$LOG"
		i=$((i + 1))
	done
	echo "cell policy=$p workload=$w mpl=$m rep=$r switches=$(($(switches) - sw0))" >> "$LOG"
	net1=$(tcp_counts)
	echo "# net policy=$p workload=$w mpl=$m rep=$r head_tcp_retrans=$((${net1% *} - ${net0% *})) head_tcp_timeouts=$((${net1#* } - ${net0#* }))" >> "$LOG"
	CELLS_DONE=$((CELLS_DONE + 1))
	say "[$CELLS_DONE/$CELLS] $p $w MPL $m rep $r: $(secs_since "$t0") s, $(($(switches) - sw0)) switches"
}

# short_test POLICY REP: long jobs at once, a short one SHORT_AFTER_S later.
short_test() {
	local p=$1 r=$2 i tl n
	all_nodes_in
	tl=$(now_ms)
	i=0
	while [ "$i" -lt "$SHORT_BEHIND" ]; do
		run_job "$p.long.r$r.j$i" allreduce_long "$p"
		i=$((i + 1))
	done
	sleep "$SHORT_AFTER_S"
	n=$p.short.r$r
	run_job "$n" allreduce_short "$p"
	wait_job "$n"
	echo "short policy=$p rep=$r workload=allreduce_short behind=$SHORT_BEHIND long_workload=allreduce_long first_long_submit_ms=$tl $(job_fields "$n")" >> "$LOG"
	i=0
	while [ "$i" -lt "$SHORT_BEHIND" ]; do
		wait_job "$p.long.r$r.j$i"
		# Kept for people; gang-eval reads the short job's record only.
		echo "# long policy=$p rep=$r idx=$i $(job_fields "$p.long.r$r.j$i")" >> "$LOG"
		i=$((i + 1))
	done
	say "short job behind $SHORT_BEHIND long ones, $p rep $r: $(tail -1 "$LOG" | sed 's/.*\(rc=[0-9]*\).*/\1/')"
}

head_main() {
	local k=0 p w m r nw nm round rep
	mkdir -p "$JOBS"
	chmod 0777 "$JOBS"
	nw=$(echo $WORKLOADS | wc -w) nm=$(echo $MPLS | wc -w)
	CELLS=0
	for p in $POLICIES; do
		if [ "$p" = dedicated ]; then
			CELLS=$((CELLS + (nw + 2 * SHORT) * REPS * ROUNDS))
		else
			CELLS=$((CELLS + nw * nm * REPS * ROUNDS))
		fi
	done
	{
		echo "# scx_gang evaluation: $(date -u +%Y-%m-%dT%H:%M:%SZ 2>/dev/null)"
		echo "meta nodes=$C vcpus=$(nproc) head=1 slot_ms=$SLOT_MS reps=$((REPS * ROUNDS)) rounds=$ROUNDS scale=$SCALE work_pct=$WORK_PCT size=${EVAL_SIZE:-custom} spin_us=$SPIN_US cap_s=$CAP_S kernel=$(uname -r) gangd_fill=1"
	} > "$LOG"
	for round in $(seq 0 $((ROUNDS - 1))); do
		for p in $POLICIES; do
			k=$((k + 1))
			head_phase "$k" "$p"
			if [ "$k" = 1 ]; then
				# One unrecorded job of each workload first: the first start of a
				# program in a fresh guest loads it and its libraries from the
				# initramfs (an MPI job's first run took 1.4 s, later ones 0.5 s).
				for w in $WORKLOADS; do
					run_job "warmup.$w" "$w" "$p"
					wait_job "warmup.$w"
				done
				say "warm-up jobs done"
			fi
			for r in $(seq 0 $((REPS - 1))); do
				rep=$((round * REPS + r))
				if [ "$p" = dedicated ]; then
					for w in $WORKLOADS; do cell dedicated "$w" 1 "$rep"; done
					if [ "$SHORT" = 1 ]; then
						cell dedicated allreduce_long 1 "$rep"
						cell dedicated allreduce_short 1 "$rep"
					fi
					continue
				fi
				for m in $MPLS; do
					for w in $WORKLOADS; do cell "$p" "$w" "$m" "$rep"; done
				done
				[ "$SHORT" = 1 ] && short_test "$p" "$rep"
			done
		done
	done
	end_phase_gangd "$k"
	board_put phase end
	say "all $CELLS cells done"
}

# ---- main ---------------------------------------------------------------------------

cluster_init
# rankprobe's node counters: the scheduler's own statistics (yields,
# wake-ups) in /proc/schedstat are only kept when asked for.
[ "$PROBE" = 1 ] && echo 1 > /proc/sys/kernel/sched_schedstats 2>/dev/null
# EVAL_BPF_STATS=1: the kernel times every BPF callback (scx_gang logs
# what each of its own cost when it stops).
[ "${EVAL_BPF_STATS:-0}" = 1 ] && echo 1 > /proc/sys/kernel/bpf_stats_enabled 2>/dev/null
if [ "$NODE_ID" = 0 ]; then
	head_main
	cluster_done
else
	compute_phases
	net_snapshot end
	stop_local
	board_put "finished.node$NODE_ID" yes || true
	log "node $NODE_ID done"
fi
exit 0
