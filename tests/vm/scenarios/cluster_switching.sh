# The node daemon without BPF (scx_gang --switching signal|none): the same
# gangd, the same `gang run` and the same slot rotation, other local
# scheduling. Two phases, gangd and every agent restarted in between:
#
#   signal  agents --switching signal, gangd's strict barrier (every switch
#           a freeze first: SIGSTOP, park, TCP drain; then SIGSTOP the
#           outgoing job, SIGCONT the incoming one), slots of 200 ms
#   none    agents --switching none, barrier off: nothing switches, the
#           kernel's scheduler runs both jobs together
#
# In each phase two jobs of `burn`, one rank per compute node, run at once.
# Every compute node samples the state of every thread of its two ranks
# (/proc/PID/task/*/stat) SAMPLES times and classifies each sample: only A
# may run (some thread of A not stopped, every thread of B stopped), only B,
# both, neither. signal: the two never run together except in a sample
# caught mid-switch, both get turns and CPU time; none: both always run and
# share the CPU. No BPF scheduler is ever attached.
#
# Results: switching.PHASE.txt (key=value counts) and samples.PHASE.txt on
# every compute node; on node 0 the jobs' outputs (PHASEA.out, ...), their
# exit codes, gangd.PHASE.log and switch.PHASE.jsonl (gangd's switch log).
. /scenarios/cluster_lib.sh

SLOT_MS=200
# A job outlives its phase's start-up and sampling (wall-clock seconds).
BURN_S=${BURN_S:-45}
SAMPLES=${SAMPLES:-300}
C=$COMPUTE_NODES

# ---- node 0 ------------------------------------------------------------------------

# head_phase PHASE BARRIER: gangd with BARRIER, every agent in (cluster_lib's
# phase_gangd), two jobs; the compute nodes sample.
head_phase() {
	local p=$1 barrier=$2 a b job units
	phase_gangd "$p" "$barrier" --slot-ms "$SLOT_MS"
	log "phase $p: $C agents --switching $p in"
	submit "${p}A" "$C" -- /usr/bin/burn --seconds "$BURN_S" --name "${p}A"; a=$JOB_PID
	submit "${p}B" "$C" -- /usr/bin/burn --seconds "$BURN_S" --name "${p}B"; b=$JOB_PID
	wait_jobs running 2 120
	as_alice gang matrix > "$RESULTS/matrix.$p.txt" 2>&1
	board_put "running.$p" yes
	every_compute "sampled.$p" yes 300 "reached sampled.$p"
	finish_job "${p}A" "$a"
	finish_job "${p}B" "$b"
	for job in "${p}A" "${p}B"; do
		[ "$(cat "$RESULTS/$job.rc")" = 0 ] || fail "job $job: rc $(cat "$RESULTS/$job.rc"): $(head -c 300 "$RESULTS/$job.err")"
		units=$(grep -c '"units":[1-9]' "$RESULTS/$job.out")
		[ "$units" = "$C" ] || fail "job $job: $units of $C ranks report work done: $(head -c 300 "$RESULTS/$job.out")"
	done
	end_phase_gangd "$p"
	mv "$RESULTS/gangd.rc" "$RESULTS/gangd.$p.rc"
	board_put "over.$p" yes
	every_compute "stopped.$p" yes 120 "reached stopped.$p"
	log "phase $p done"
}

# ---- compute nodes ---------------------------------------------------------------------

# rank_of JOB: the PID of this node's rank of JOB (a burn named JOB).
rank_of() {
	local p cmd
	for p in $(pidof burn); do
		cmd=$(tr '\0' ' ' 2> /dev/null < "/proc/$p/cmdline")
		case "$cmd" in *"--name $1 "*) echo "$p"; return 0 ;; esac
	done
	return 1
}

# may_run PID: some thread of PID is not stopped (its state is not T).
may_run() {
	local t st
	for t in /proc/$1/task/*; do
		read -r _ _ st _ 2> /dev/null < "$t/stat" || continue
		[ "$st" = T ] || return 0
	done
	return 1
}

# sample PHASE: SAMPLES samples of the two ranks here; counts into
# switching.PHASE.txt, the samples (A, B, AB or -) into samples.PHASE.txt.
sample() {
	local p=$1 pa pb n=0 both=0 a=0 b=0 neither=0 alt=0 solo= now ra rb ta tb start_ms
	poll_for 60 rank_of "${p}A" > /dev/null || fail "no rank of ${p}A here: $(pidof burn)"
	poll_for 60 rank_of "${p}B" > /dev/null || fail "no rank of ${p}B here: $(pidof burn)"
	pa=$(rank_of "${p}A")
	pb=$(rank_of "${p}B")
	# Past the jobs' start (a rank that starts outside its slot runs until
	# the agent's next look, 100 ms).
	sleep 1
	ta=$(cpu_ticks "$pa")
	tb=$(cpu_ticks "$pb")
	start_ms=$(now_ms)
	: > "$RESULTS/samples.$p.txt"
	while [ "$n" -lt "$SAMPLES" ]; do
		[ -d "/proc/$pa" ] && [ -d "/proc/$pb" ] || fail "phase $p: a rank ended while sampled (sample $n)"
		if may_run "$pa"; then ra=1; else ra=0; fi
		if may_run "$pb"; then rb=1; else rb=0; fi
		case $ra$rb in
		11) both=$((both + 1)); now=AB ;;
		10) a=$((a + 1)); now=A ;;
		01) b=$((b + 1)); now=B ;;
		*) neither=$((neither + 1)); now=- ;;
		esac
		case $now in
		A | B)
			[ -n "$solo" ] && [ "$now" != "$solo" ] && alt=$((alt + 1))
			solo=$now ;;
		esac
		echo -n "$now " >> "$RESULTS/samples.$p.txt"
		n=$((n + 1))
		usleep 20000
	done
	ta=$(( $(cpu_ticks "$pa") - ta ))
	tb=$(( $(cpu_ticks "$pb") - tb ))
	{
		echo "phase=$p"
		echo "samples=$n"
		echo "both=$both"
		echo "a_only=$a"
		echo "b_only=$b"
		echo "neither=$neither"
		echo "alternations=$alt"
		echo "a_ticks=$ta"
		echo "b_ticks=$tb"
		echo "ms=$(( $(now_ms) - start_ms ))"
		echo "sched_ext=$(cat "$SCX_STATE" 2> /dev/null)"
		echo "knob_mode=$(cat "$KNOBS/mode" 2> /dev/null)"
		echo "knob_switches=$(cat "$KNOBS/switches" 2> /dev/null)"
	} > "$RESULTS/switching.$p.txt"
	log "phase $p: $(tr '\n' ' ' < "$RESULTS/switching.$p.txt")"
	check_samples "$p" "$n" "$both" "$a" "$b" "$neither" "$alt" "$ta" "$tb"
}

# check_samples PHASE N BOTH A B NEITHER ALTERNATIONS A_TICKS B_TICKS
check_samples() {
	local p=$1 n=$2 both=$3 a=$4 b=$5 neither=$6 alt=$7 ta=$8 tb=$9 total
	total=$((ta + tb))
	state_is disabled || fail "phase $p: sched_ext is $(cat $SCX_STATE): no BPF scheduler may be attached"
	[ "$total" -gt 0 ] || fail "phase $p: the ranks got no CPU time"
	if [ "$p" = signal ]; then
		# Both running: only a sample caught in the middle of a switch.
		[ "$both" -le $((n / 50 + 2)) ] || fail "phase $p: both jobs ran together in $both of $n samples"
		[ "$a" -ge $((n / 8)) ] && [ "$b" -ge $((n / 8)) ] ||
			fail "phase $p: A alone in $a, B alone in $b of $n samples: both must get turns"
		[ "$alt" -ge 4 ] || fail "phase $p: the jobs took turns $alt times only"
		[ $((ta * 5)) -ge "$total" ] && [ $((tb * 5)) -ge "$total" ] ||
			fail "phase $p: CPU ticks A $ta, B $tb: both must make progress"
	else
		[ "$both" = "$n" ] || fail "phase $p: a rank was stopped in $((n - both)) of $n samples"
		[ $((ta * 10)) -ge $((total * 3)) ] && [ $((tb * 10)) -ge $((total * 3)) ] ||
			fail "phase $p: CPU ticks A $ta, B $tb: the kernel shares the CPU"
	fi
}

# compute_phase PHASE: this node's agent in the phase, the samples, the agent out.
compute_phase() {
	local p=$1
	wait_board "gangd.$p" up 300 || fail "gangd of phase $p never came up"
	start_node_agent --switching "$p"
	board_put "ready.$p.node$NODE_ID" yes || fail "node 0's board does not answer"
	wait_board "running.$p" yes 300 || fail "the jobs of phase $p never ran"
	record_ranks burn "$RESULTS/ranks.$p.txt"
	sample "$p"
	board_put "sampled.$p.node$NODE_ID" yes || fail "node 0's board does not answer"
	wait_board "over.$p" yes 300 || fail "phase $p never ended"
	save_node_state
	mv "$RESULTS/scx_gang.knobs" "$RESULTS/scx_gang.$p.knobs"
	stop_node_agent
	SCX_PID=
	mv "$RESULTS/scx_gang.log" "$RESULTS/scx_gang.$p.log"
	mv "$RESULTS/scx_gang.rc" "$RESULTS/scx_gang.$p.rc"
	[ "$(cat "$RESULTS/scx_gang.$p.rc")" = 0 ] || fail "phase $p: scx_gang exited with $(cat "$RESULTS/scx_gang.$p.rc")"
	# Nothing of the phase is left stopped.
	for pid in $(pidof burn); do
		[ "$(cut -d' ' -f3 "/proc/$pid/stat" 2> /dev/null)" != T ] || fail "phase $p: burn $pid left stopped"
	done
	board_put "stopped.$p.node$NODE_ID" yes || fail "node 0's board does not answer"
}

cluster_init
if [ "$NODE_ID" = 0 ]; then
	start_node_agent
	head_phase signal strict
	head_phase none off
	cluster_done
else
	compute_phase signal
	compute_phase none
	wait_done
fi
exit 0
