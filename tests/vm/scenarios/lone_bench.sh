# Benchmark (not a test), issue 15: what a job alone on a node pays for the
# scheduler, with the host's noise taken out. One node, its guest time
# counted in instructions (scripts/bench.sh boots it with qemu -icount,
# sleep=off: an idle guest's clock jumps to its next timer; all but
# NetPIPE's boot, below), so a run takes
# the same guest time whatever the host does; caches are not modelled, so
# what differs between schedulers is the instructions they execute.
#
# The job: one rank per vCPU (two on a one-vCPU node, as the cluster's
# nodes are: no ops.select_cpu there, every wake-up goes through
# ops.enqueue), linked over loopback (rt: a token around the
# ranks, the latency-bound case; allreduce; ep: compute only), the same
# programs as the cluster evaluation; and netpipe: Debian's NetPIPE
# (NPmpich2, 1 byte to 1 KiB ping-pong), two ranks started by MPICH's own
# launcher (hydra, fork), talking TCP over lo as the cluster's ranks talk
# TCP between nodes (MPIR_CVAR_NOLOCAL and UCX_TLS=tcp: no shared memory
# between them). Its ranks poll, so it needs a vCPU per rank (refused on a
# node of one vCPU), and it is not for instruction-counted time: there the
# vCPUs take turns on one host thread and a polling vCPU gives up its turn
# only at its next timer, so each message waited milliseconds for the
# emulator (a 1 KiB message 5.7-12 ms one way, against 26 us in real
# time). scripts/bench.sh runs it in a boot of its own, in real time.
# Each round runs every workload once under each policy, the policies'
# phases in turn:
#
#   dedicated  the kernel's EEVDF (a second EEVDF phase: the noise floor)
#   eevdf      the kernel's EEVDF
#   bpfland    scx_bpfland, default options
#   gang       scx_gang with the job as its only gang (one slot, no switch),
#              a minimum share of 25 % for tasks of no gang, as on the
#              cluster's nodes
#
# Every rank runs in the same cgroup under every policy. Records in the
# evaluation's format ($RESULTS/records.txt, `job` lines with the ranks'
# longest elapsed time and rank 0's median iteration), so `gang-eval lone`
# makes the table on the host. The kernel's BPF statistics cost time in
# every callback (two clock reads and a sum per run), so the jobs run with
# them off; at the end of each sched_ext phase one more job (rt, or
# LONE_COST) runs with them on, and `scx_gang bpf-cost` lists what each
# callback cost over it ($RESULTS/bpf_cost.txt; that job's record in
# $RESULTS/cost_jobs.txt).
#
# LONE_ROUNDS (3), LONE_WORKLOADS ("rt allreduce ep"; or netpipe),
# LONE_POLICIES (all four; a kernel argument cannot hold blanks, so commas
# also separate), LONE_SCALE (1: work per job, a multiplier), LONE_COST and
# LONE_COST_SCALE (rt, 1: the BPF-cost job's workload and scale).
. /scenarios/lib.sh

ROUNDS=${LONE_ROUNDS:-3}
NCPU=$(grep -c ^processor /proc/cpuinfo)
WORKLOADS=${LONE_WORKLOADS:-"rt allreduce ep"}
SCALE=${LONE_SCALE:-1}
COST=${LONE_COST:-rt}
COST_SCALE=${LONE_COST_SCALE:-1}
POLICIES=$(echo "${LONE_POLICIES:-dedicated eevdf bpfland gang}" | tr , ' ')
WORKLOADS=$(echo "$WORKLOADS" | tr , ' ')
for p in $POLICIES; do
	case $p in dedicated | eevdf | bpfland | gang) ;; *) fail "unknown policy $p" ;; esac
done
for w in $WORKLOADS $COST; do
	case $w in rt | allreduce | ep | netpipe) ;; *) fail "unknown workload $w" ;; esac
	[ "$w" != netpipe ] || [ "$NCPU" -ge 2 ] || fail "netpipe's two ranks poll: they need two vCPUs, this node has $NCPU"
done
for n in "$ROUNDS" "$SCALE" "$COST_SCALE"; do
	case $n in '' | *[!0-9]* | 0*) fail "LONE_ROUNDS, LONE_SCALE and LONE_COST_SCALE take a whole number >= 1 (got '$n')" ;; esac
done
RANKS=$NCPU
[ "$RANKS" -ge 2 ] || RANKS=2   # a one-vCPU node: two ranks share it
LOG=$RESULTS/records.txt
PORT=7300
PHASE=0
BPFLAND_PID=

# wl_cmd WORKLOAD SCALE: its command, SCALE times the work (SCALE for the
# measured jobs, 1 for the warm-ups, COST_SCALE for the BPF-cost jobs).
wl_cmd() {
	case $1 in
	rt) echo "rt --rounds $((10000 * $2))" ;;
	allreduce) echo "allreduce --grain-us 1000 --iters $((300 * $2))" ;;
	ep) echo "ep --grain-us 1000 --iters $((300 * $2))" ;;
	netpipe) echo "NPmpich2 -u 1024 -n $((20 * $2)) -p 0 -o /tmp/np.out" ;;
	esac
}

# start_ranks WORKLOAD SCALE: the job's ranks in the background, rank i's output
# to /tmp/job.i.out and .err; sets pids and ranks.
start_ranks() {
	cmd=$(wl_cmd "$1" "$2")
	if [ "$1" = netpipe ]; then
		in_gang lone mpiexec.hydra -launcher fork -n 2 -genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp \
			-genv UCX_NET_DEVICES lo rankprobe --ok-on-exit -- $cmd > /tmp/job.0.out 2> /tmp/job.0.err
		pids=$!
		ranks=2
		return
	fi
	peers=
	i=0
	while [ $i -lt "$RANKS" ]; do
		peers="$peers${peers:+,}127.0.0.1:$((PORT + i))"
		i=$((i + 1))
	done
	pids=
	i=0
	while [ $i -lt "$RANKS" ]; do
		in_gang lone env GANG_RANK=$i GANG_SIZE="$RANKS" GANG_PEERS="$peers" $cmd \
			> "/tmp/job.$i.out" 2> "/tmp/job.$i.err"
		pids="$pids $!"
		i=$((i + 1))
	done
	PORT=$((PORT + RANKS))
	ranks=$RANKS
}

attached_or_gone() { state_is enabled || ! kill -0 "$1"; }

# start_policy POLICY: attach its scheduler (none for the kernel's).
start_policy() {
	case $1 in
	bpfland)
		scx_bpfland > "$RESULTS/bpfland.$PHASE.log" 2>&1 &
		BPFLAND_PID=$!
		wait_for 900 attached_or_gone "$BPFLAND_PID"
		state_is enabled || fail "scx_bpfland did not attach: $(tail -3 "$RESULTS/bpfland.$PHASE.log")"
		;;
	gang) start_scx_gang --min-other-share-pct 25 ;;
	esac
	log "phase $PHASE: $1 ($(cat $SCX_STATE))"
}

# stop_policy POLICY: its BPF cost over one more rt job, then detach.
stop_policy() {
	if state_is enabled; then
		echo 1 > /proc/sys/kernel/bpf_stats_enabled || fail "cannot enable BPF statistics"
		jobs_log=$LOG
		LOG=$RESULTS/cost_jobs.txt
		run_job "$1" "$COST" "$PHASE" "$COST_SCALE"
		LOG=$jobs_log
		echo 0 > /proc/sys/kernel/bpf_stats_enabled
		out=$(scx_gang bpf-cost 2>&1) || fail "scx_gang bpf-cost failed under $1: $out"
		echo "$out" | sed "s/^/bpf_cost node=0 phase=$PHASE policy=$1 /" >> "$RESULTS/bpf_cost.txt"
	fi
	case $1 in
	bpfland)
		kill -INT "$BPFLAND_PID"
		wait "$BPFLAND_PID"
		BPFLAND_PID=
		;;
	gang)
		stop_scx_gang
		SCX_PID=
		;;
	esac
	wait_for 60 state_is disabled || fail "sched_ext still $(cat $SCX_STATE) after $1"
}

# daemon_ns: CPU time (ns) of the attached scheduler's process, all its
# threads (scx_gang's daemon or scx_bpfland's); 0 under the kernel's.
daemon_ns() {
	pid=${SCX_PID:-$BPFLAND_PID}
	[ -n "$pid" ] || { echo 0; return; }
	cat /proc/"$pid"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d\n", s }'
}

# run_job POLICY WORKLOAD ROUND [SCALE]: one job (SCALE by default), its
# record appended to $LOG.
run_job() {
	d0=$(daemon_ns)
	submit=$(now_ms)
	start_ranks "$2" "${4:-$SCALE}"
	rc=0
	for pid in $pids; do wait "$pid" || rc=$?; done
	end=$(now_ms)
	daemon_ms=$(awk -v a="$d0" -v b="$(daemon_ns)" 'BEGIN { printf "%.3f", (b - a) / 1e6 }')
	cat /tmp/job.*.out > "$RESULTS/$1.$2.r$3.out"
	cat /tmp/job.*.err > "$RESULTS/$1.$2.r$3.err"
	rm -f /tmp/job.*.out /tmp/job.*.err
	out=$RESULTS/$1.$2.r$3.out
	ok=$(grep -c '"ok":true' "$out")
	elapsed=$(sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p' "$out" | sort -n | tail -1)
	p50=$(sed -n 's/.*"rank":0,.*"iter_us":{"p50":\([0-9.]*\).*/ iter_p50_us=\1/p' "$out" | head -1)
	np=$(np_1k_field "$RESULTS/$1.$2.r$3.err" "$out")
	[ "$rc" = 0 ] && [ "$ok" = "$ranks" ] ||
		echo "# FAILED job $1.$2.r$3: rc $rc, $ok of $ranks ranks ok" >> "$LOG"
	echo "job policy=$1 workload=$2 mpl=1 rep=$3 idx=0 submit_ms=$submit end_ms=$end rc=$rc ranks=$ranks ranks_ok=$ok elapsed_s=${elapsed:-0}$p50$np probe_daemon_cpu_ms=$daemon_ms" >> "$LOG"
	log "$1 $2 round $3: ${elapsed:-?} s, rc $rc, $ok/$ranks ranks ok"
}

echo 0 > /proc/sys/kernel/bpf_stats_enabled || fail "no kernel.bpf_stats_enabled"
echo "meta scenario=lone_bench ranks=$RANKS rounds=$ROUNDS scale=$SCALE workloads=$(echo $WORKLOADS | tr ' ' ,) policies=$(echo $POLICIES | tr ' ' ,)" > "$LOG"
: > "$RESULTS/bpf_cost.txt"
: > "$RESULTS/cost_jobs.txt"
# The boot's first job takes three times as long (the ranks link up while
# the node warms up): one rt job under the kernel's scheduler first (and a
# NetPIPE job, MPI's first start), kept apart in warmup.txt.
LOG=$RESULTS/warmup.txt
run_job warmup rt 0 1
case " $WORKLOADS " in *" netpipe "*) run_job warmup netpipe 0 1 ;; esac
LOG=$RESULTS/records.txt
r=0
while [ $r -lt "$ROUNDS" ]; do
	for p in $POLICIES; do
		PHASE=$((PHASE + 1))
		start_policy "$p"
		for w in $WORKLOADS; do run_job "$p" "$w" "$r"; done
		stop_policy "$p"
	done
	r=$((r + 1))
done
log "done: $(grep -c '^job' "$LOG") jobs, $(grep -c '^# FAILED' "$LOG") failed"
exit 0
