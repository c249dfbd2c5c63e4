# Cluster acceptance: MPI programs built with Debian's MPICH (ch4:ucx) run
# unmodified under `gang run` with no mpiexec: gangd serves every job's
# ranks PMI-1, UCX carries the messages over the nodes' virtio NICs (tcp;
# its defaults need no change, see scripts/image.sh --mpi). Alice runs, one
# after the other, from the head (node 0):
#   ring      gang run -n 3 -- /usr/bin/mpi_ring --rounds 200
#   allreduce gang run -n 3 -- mpi_allreduce --iters 200
#   netpipe   gang run -n 2 -- NPmpich2 (ping-pong from 1 byte up to 64
#             KiB, 5 repetitions per trial, no perturbations: ~40 s here;
#             its table goes to stderr, and to np.out on rank 0's node)
#   pairA + pairB  mpi_ring --rounds 300 and mpi_allreduce --iters 300
#             --grain-us 2000 (3 ranks each) at the same time: they take
#             turns cluster-wide (slots of 100 ms, strict barrier), UCX's
#             TCP connections frozen and thawed at every switch
#   abort     gang run -n 3 -- mpi_allreduce --iters 200 --fault-rank 1:
#             rank 1 corrupts its value, every rank's check fails and calls
#             MPI_Abort (code 3); the job must fail and no rank may be left
#   abort1    mpi_allreduce --iters 200 --abort-rank 1: rank 1 alone calls
#             MPI_Abort (code 4) while the others wait for it in the
#             allreduce; gangd must end them.
#   race      gang run -n 2 -- mpi_finalize_race: provokes the MPI_Finalize
#             deadlock described below (expected to hang, FINALIZE_GRACE 20
#             s, then dumped and Ctrl-Ced like any hung job).
# Then the same programs built with Open MPI (ompi_*: PMIx, each node's
# agent runs a PMIx server per job, docs/pmix.md), with no mpirun:
#   ompi_ring, ompi_allreduce   as ring and allreduce
#   ompi_pair   ompi_ring and ompi_allreduce (3 ranks each) at once, taking
#             turns cluster-wide
#   ompi_abort  ompi_allreduce --abort-rank 1: MPI_Abort(.., 4) through PMIx
#   hpcc      Debian's hpcc (unmodified) on 3 ranks with a small
#             hpccinf.txt (every compute node writes one to /tmp, the
#             ranks' cwd; rank 0 writes hpccoutf.txt there, copied to its
#             node's results), while `share` (ompi_ring --rounds 100000)
#             shares the nodes by gang scheduling; once both run, each
#             compute node tries to reach the PMIx servers' ports from
#             outside the jobs' cgroups (as bob, as alice, as root: every
#             one must be refused) and writes pmix_guard.txt ("who port
#             refused|connected" lines); share is Ctrl-Ced SHARE_S (40)
#             s later, hpcc goes on alone.
# Outputs on the head: NAME.out / NAME.err / NAME.rc / NAME.ms;
# pair.both_running ("yes" once `gang ps` showed both pair jobs running at
# once). After every phase each compute node writes PHASE.procs (MPI
# processes still there after 15 s, "pid:name" each, empty if none) and
# PHASE.cgroups (non-empty job cgroups).
#
# A job that hangs is Ctrl-Ced by the head, which writes NAME.timeout:
# "limit" (still running JOB_LIMIT s after submission) or "finalize" (its
# work was done, so only MPI_Finalize was left: every rank printed its
# result line, or NetPIPE its last row; and the job still runs
# FINALIZE_GRACE s later). Before the Ctrl-C every compute node
# writes NAME.dump (what its MPI processes do: states, kernel stacks, CPU
# time over 2 s, sockets with their queues, the scheduler's view) and
# NAME.ranks, one line per process of the job there: "pid comm state wchan
# ticks-in-2-s spinning|blocked".
#
# Why "finalize": MPICH 4.0.2's ch4:ucx MPI_Finalize closes every UCX
# endpoint (ucp_disconnect_nb, progressing until all closes completed) and
# only then enters the PMI barrier, a blocking read on the PMI socket. With
# UCX 1.13's tcp transport, closing an endpoint that sent anything since its
# last flush sends a flush request (an empty PUT, 25 bytes) and waits for
# the peer's acknowledgement; a peer that already finished its own closes
# sits in the PMI barrier, no longer progresses UCX, and never answers: the
# late rank spins in its close loop forever, the early ones wait forever in
# the barrier. It takes ranks reaching MPI_Finalize far enough apart, which
# time sharing (the pair phase) makes likely. (Later MPICH releases changed
# this barrier, then removed it.) Any launcher's blocking PMI barrier hangs
# the same way (tests/mpi/finalize_race.c hangs under mpiexec on the host
# too); gangd's PMI server cannot make a rank progress UCX.
#
# Debugging: env.UCX_LOG_LEVEL=info or env.MPIR_CVAR_DEBUG_SUMMARY=1 on the
# kernel command line (cluster.sh --append) reach the ranks: gang run
# passes the user's environment on. env.PHASES=pair,abort (say) runs only
# those phases.
. /scenarios/cluster_lib.sh

MPI_PROGS="mpi_ring mpi_allreduce NPmpich2 mpi_finalize_race ompi_ring ompi_allreduce hpcc gang-pmix-server"
# A job runs at most this long (s) before the head Ctrl-Cs it (emulated
# nodes: MPI_Init alone takes seconds).
JOB_LIMIT=${JOB_LIMIT:-240}
JOB_LIMIT_DEFAULT=$JOB_LIMIT
FINALIZE_GRACE=${FINALIZE_GRACE:-60}
SHARE_S=40
ALL_PHASES="ring allreduce netpipe pair abort abort1 race ompi_ring ompi_allreduce ompi_pair ompi_abort hpcc"
PHASES=${PHASES:-$ALL_PHASES}
want() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

cluster_init
[ "$NODE_ID" = 0 ] && start_gangd --nodes "$COMPUTE_NODES" --slot-ms 100
start_node_agent

# mpi_procs: the MPI processes on this node, "pid:name" each.
mpi_procs() {
	local p pid
	for p in $MPI_PROGS; do
		for pid in $(pidof "$p"); do printf '%s:%s ' "$pid" "$p"; done
	done
}

# watch_job NAME PID T0 FILE PATTERN N: until job NAME's `gang run` (PID,
# submitted at T0 ms) ends, or hangs (see NAME.timeout above: dump,
# Ctrl-C); its work is done once N lines of its FILE (out or err) match
# PATTERN (GRACE, default FINALIZE_GRACE: seconds it may run on after
# that). Exit status in NAME.rc, time in NAME.ms.
watch_job() {
	local name=$1 pid=$2 t0=$3 file=$RESULTS/$1.$4 pattern=$5 n=$6 all_at= hang= now id
	local grace=${GRACE:-$FINALIZE_GRACE}
	while kill -0 "$pid" 2>/dev/null; do
		now=$(now_ms)
		if [ "$(grep -c -e "$pattern" "$file")" -ge "$n" ]; then
			[ -n "$all_at" ] || all_at=$now
			[ $((now - all_at)) -ge $((grace * 1000)) ] && { hang=finalize; break; }
		fi
		[ $((now - t0)) -ge $((JOB_LIMIT * 1000)) ] && { hang=limit; break; }
		sleep 1
	done
	if [ -n "$hang" ]; then
		log "job $name hangs ($hang): dump, then Ctrl-C"
		echo "$hang" > "$RESULTS/$name.timeout"
		id=$(job_id "$name")
		{ as_alice gang ps; as_alice gang matrix; save_node_state; cat "$RESULTS/gangd.knobs"; } \
			> "$RESULTS/$name.ps" 2>&1
		board_put dump "$name:$id"
		all_nodes "dumped_$name" yes
		kill -INT "$pid"
		poll_for 30 sh -c "! kill -0 $pid" || kill -KILL "$pid"
	fi
	finish_job "$name" "$pid"
	echo $(( $(now_ms) - t0 )) > "$RESULTS/$name.ms"
	log "$name: $(grep -c '^{' "$RESULTS/$name.out") JSON line(s); stderr: $(head -c 400 "$RESULTS/$name.err" | tr '\n' ';')"
}

# end_phase PHASE: every compute node records what is left.
end_phase() {
	board_put phase "$1"
	all_nodes "$1" checked
}

# job_phase NAME N FILE PATTERN COUNT PROG ARGS...: alice's `gang run -n N
# --name NAME -- PROG ARGS...`, waited for (watch_job's FILE PATTERN COUNT:
# how to tell its work is done); then the phase NAME ends.
OK_LINE='"ok":true'
job_phase() {
	local name=$1 n=$2 file=$3 pattern=$4 count=$5 t0
	shift 5
	t0=$(now_ms)
	submit "$name" "$n" -- "$@"
	watch_job "$name" "$JOB_PID" "$t0" "$file" "$pattern" "$count"
	end_phase "$name"
}

# pair_phase PHASE PREFIX: PREFIX_ring --rounds 300 (PHASE"A") and
# PREFIX_allreduce --iters 300 --grain-us 2000 (PHASE"B"), 3 ranks each, at
# the same time; PHASE.both_running says whether both ran at once.
pair_phase() {
	local t0 pa pb
	t0=$(now_ms)
	submit "$1A" 3 -- "$2_ring" --rounds 300; pa=$JOB_PID
	submit "$1B" 3 -- "$2_allreduce" --iters 300 --grain-us 2000; pb=$JOB_PID
	if poll_for 90 jobs_at_least running 2; then
		echo yes > "$RESULTS/$1.both_running"
		as_alice gang matrix > "$RESULTS/$1.matrix" 2>&1
	else
		echo no > "$RESULTS/$1.both_running"
	fi
	watch_job "$1A" "$pa" "$t0" out "$OK_LINE" 3
	watch_job "$1B" "$pb" "$t0" out "$OK_LINE" 3
	end_phase "$1"
}

# all_nodes KEY VALUE: the head waits until every compute node put
# KEY.node<i> VALUE.
all_nodes() { every_compute "$1" "$2" 90 "reported $1"; }

# dump NAME:ID: on a compute node, what the MPI processes do (job NAME,
# gangd's job ID, hangs): NAME.dump and NAME.ranks (see above).
dump() {
	local name=${1%%:*} id=${1#*:} p t t1 t2 st wc d f
	log "dumping the ranks of $name (job$id)"
	: > "$RESULTS/$name.ranks"
	for p in $(cat "$GANG_ROOT/job$id/cgroup.procs" 2>/dev/null); do
		t1=$(cpu_ticks "$p")
		sleep 2
		t2=$(cpu_ticks "$p")
		st=$(awk '/^State:/ {print $2}' "/proc/$p/status" 2>/dev/null)
		wc=$(cat "/proc/$p/wchan" 2>/dev/null)
		if [ $((t2 - t1)) -gt 0 ]; then t=spinning; else t=blocked; fi
		echo "$p $(cat /proc/$p/comm 2>/dev/null) ${st:-?} ${wc:-?} $((t2 - t1)) $t" >> "$RESULTS/$name.ranks"
	done
	{
		echo "== $(date) (uptime $(cut -d' ' -f1 /proc/uptime)) node$NODE_ID, job $name (job$id) hangs"
		echo "job$id: freeze $(cat "$GANG_ROOT/job$id/cgroup.freeze" 2>/dev/null)" \
			"events $(tr '\n' ' ' < "$GANG_ROOT/job$id/cgroup.events" 2>/dev/null)"
		echo "entropy_avail $(cat /proc/sys/kernel/random/entropy_avail)"
		for p in $(pidof $MPI_PROGS); do
			echo "-- pid $p: $(tr '\0' ' ' < /proc/$p/cmdline)"
			grep -E '^(State|Threads|voluntary|nonvoluntary)' /proc/$p/status
			echo "cgroup $(cat /proc/$p/cgroup)"
			for t in /proc/$p/task/*; do
				echo "task ${t##*/}: $(cut -d' ' -f2,3,14,15 $t/stat) wchan $(cat $t/wchan)"
				sed 's/^/    /' $t/stack 2>/dev/null
			done
			ls -l /proc/$p/fd 2>/dev/null | grep -c socket | sed 's/^/sockets: /'
		done
		netstat -tn 2>/dev/null | grep -v TIME_WAIT
		for f in "$KNOBS"/*; do echo "knob $(basename "$f"): $(cat "$f" 2>/dev/null | tr '\n' ';')"; done
		for d in "$GANG_ROOT"/job*; do
			[ -d "$d" ] && echo "$d: procs $(cat $d/cgroup.procs | tr '\n' ' ') events $(cat $d/cgroup.events | tr '\n' ' ')"
		done
	} > "$RESULTS/$name.dump" 2>&1
	board_put "dumped_$name.node$NODE_ID" yes
}

# pmix_ports: the TCP ports the PMIx servers here listen on (busybox's
# netstat has no -p: the servers' socket inodes, found in /proc/net/tcp
# among the listeners, state 0A).
pmix_ports() {
	local pid fd l inodes= hex
	for pid in $(pidof gang-pmix-server); do
		for fd in /proc/$pid/fd/*; do
			l=$(readlink "$fd" 2>/dev/null) || continue
			case $l in "socket:["*"]") l=${l#socket:\[}; inodes="$inodes ${l%\]}" ;; esac
		done
	done
	for hex in $(awk -v inodes="$inodes" '
		BEGIN { n = split(inodes, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
		NR > 1 && $4 == "0A" && ($10 in want) { split($2, p, ":"); print p[2] }' /proc/net/tcp); do
		printf '%d\n' "0x$hex"
	done
}

two_pmix_ports() { [ "$(pmix_ports | wc -l)" -ge 2 ]; }

# probe_pmix: on a compute node, every port a PMIx server listens on (once
# both jobs' servers listen: gangd may see the jobs running before this
# node started its ranks), connected to from outside the jobs' cgroups as
# bob, alice and root.
probe_pmix() {
	local port who
	poll_for 60 two_pmix_ports
	: > "$RESULTS/pmix_guard.txt"
	for port in $(pmix_ports); do
		for who in bob alice root; do
			case $who in
			bob) set -- runas $BOB_UID $BOB_UID -- ;;
			alice) set -- runas $ALICE_UID $ALICE_UID -- ;;
			root) set -- ;;
			esac
			if "$@" timeout 5 nc 127.0.0.1 "$port" < /dev/null > /dev/null 2> "$RESULTS/pmix_guard.err"; then
				echo "$who $port connected"
			else
				echo "$who $port refused $(tr '\n' ' ' < "$RESULTS/pmix_guard.err")"
			fi >> "$RESULTS/pmix_guard.txt"
		done
	done
	log "PMIx guard probe: $(tr '\n' ';' < "$RESULTS/pmix_guard.txt")"
	board_put "probed.node$NODE_ID" yes
}

# wait_phase PHASE: on a compute node, until the head starts PHASE's checks;
# meanwhile it dumps its ranks' state when the head asks (once per request:
# the board keeps the last one).
DONE_DUMP= PROBED=
wait_phase() {
	local until_ms=$(( $(now_ms) + 900 * 1000 )) d
	while :; do
		[ "$(board_get phase)" = "$1" ] && return 0
		[ -n "$(board_get abort)" ] && return 1
		d=$(board_get dump)
		if [ -n "$d" ] && [ "$d" != "$DONE_DUMP" ]; then
			dump "$d"
			DONE_DUMP=$d
		fi
		if [ -n "$(board_get probe_pmix)" ] && [ -z "$PROBED" ]; then
			probe_pmix
			PROBED=yes
		fi
		[ "$(now_ms)" -ge "$until_ms" ] && return 1
		sleep 1
	done
}

# check_left NAME: on a compute node, after job NAME: no MPI process left
# (within 15 s: the agent kills a failed job's ranks), job cgroups empty.
check_left() {
	local d
	poll_for 15 sh -c "[ -z \"\$(pidof $MPI_PROGS)\" ]"
	mpi_procs > "$RESULTS/$1.procs"
	poll_for 10 job_cgroups_empty
	for d in "$GANG_ROOT"/job*; do
		[ -d "$d" ] && [ -n "$(cat "$d/cgroup.procs" 2>/dev/null)" ] &&
			echo "$d: $(tr '\n' ' ' < "$d/cgroup.procs")"
	done > "$RESULTS/$1.cgroups"
	board_put "$1.node$NODE_ID" checked || fail "board_put"
}

if [ "$NODE_ID" = 0 ]; then
	wait_nodes "$COMPUTE_NODES"
	cd /tmp || fail "no /tmp"
	want ring && job_phase ring 3 out "$OK_LINE" 3 /usr/bin/mpi_ring --rounds 200
	want allreduce && job_phase allreduce 3 out "$OK_LINE" 3 mpi_allreduce --iters 200
	want netpipe && job_phase netpipe 2 err ' 65536 bytes ' 1 NPmpich2 -u 65536 -n 5 -p 0 -o /tmp/np.out
	want pair && pair_phase pair mpi
	# (Never done: no rank of these gets to print its result.)
	want abort && job_phase abort 3 out "$OK_LINE" 1 mpi_allreduce --iters 200 --fault-rank 1
	want abort1 && job_phase abort1 3 out "$OK_LINE" 1 mpi_allreduce --iters 200 --abort-rank 1
	if want race; then
		GRACE=20
		job_phase race 2 err 'entering MPI_Finalize' 2 mpi_finalize_race --skew-ms 1000
		GRACE=
	fi
	want ompi_ring && job_phase ompi_ring 3 out "$OK_LINE" 3 ompi_ring --rounds 200
	want ompi_allreduce && job_phase ompi_allreduce 3 out "$OK_LINE" 3 ompi_allreduce --iters 200
	want ompi_pair && pair_phase ompi_pair ompi
	want ompi_abort && job_phase ompi_abort 3 out "$OK_LINE" 1 ompi_allreduce --iters 200 --abort-rank 1
	if want hpcc; then
		t0=$(now_ms)
		submit share 3 -- ompi_ring --rounds 100000; PS=$JOB_PID
		submit hpcc 3 -- hpcc; PH=$JOB_PID
		if poll_for 120 jobs_at_least running 2; then
			echo yes > "$RESULTS/hpcc.both_running"
			board_put probe_pmix yes
			all_nodes probed yes
		else
			echo no > "$RESULTS/hpcc.both_running"
		fi
		# Shared while hpcc's MPI parts that move data run (RandomAccess,
		# PTRANS, FFT: its first ~20 s), then alone: its LatencyBandwidth
		# part then takes ~2.5 ms a ring hop beside share against far less
		# alone, and it was 310 of the test's 540 s.
		sleep "$SHARE_S"
		kill -0 "$PH" 2>/dev/null && echo "$SHARE_S" > "$RESULTS/hpcc.shared_s"
		kill -INT "$PS"
		finish_job share "$PS"
		# (hpcc writes its results to hpccoutf.txt only: no line to wait for.)
		JOB_LIMIT=600
		watch_job hpcc "$PH" "$t0" out 'no line matches this' 1
		JOB_LIMIT=${JOB_LIMIT_DEFAULT}
		end_phase hpcc
	fi
	as_alice gang ps > "$RESULTS/ps_after.txt" 2>&1
	cluster_done
else
	# hpcc's input, in the ranks' cwd: HPL of N=240 on a 1x3 grid, the
	# other tests sized from it (~3 s on the host, natively).
	cat > /tmp/hpccinf.txt <<-'EOF'
	HPLinpack benchmark input file
	Innovative Computing Laboratory, University of Tennessee
	HPL.out      output file name (if any)
	8            device out (6=stdout,7=stderr,file)
	1            # of problems sizes (N)
	240          Ns
	1            # of NBs
	40           NBs
	0            PMAP process mapping (0=Row-,1=Column-major)
	1            # of process grids (P x Q)
	1            Ps
	3            Qs
	16.0         threshold
	1            # of panel fact
	2            PFACTs (0=left, 1=Crout, 2=Right)
	1            # of recursive stopping criterium
	4            NBMINs (>= 1)
	1            # of panels in recursion
	2            NDIVs
	1            # of recursive panel fact.
	1            RFACTs (0=left, 1=Crout, 2=Right)
	1            # of broadcast
	1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
	1            # of lookahead depth
	1            DEPTHs (>=0)
	2            SWAP (0=bin-exch,1=long,2=mix)
	64           swapping threshold
	0            L1 in (0=transposed,1=no-transposed) form
	0            U  in (0=transposed,1=no-transposed) form
	1            Equilibration (0=no,1=yes)
	8            memory alignment in double (> 0)
	##### This line (no. 32) is ignored (it serves as a separator). ######
	0                               Number of additional problem sizes for PTRANS
	1200 10000 30000                values of N
	0                               number of additional blocking sizes for PTRANS
	40 9 8 13 13 20 16 32 64        values of NB
	EOF
	chmod 0644 /tmp/hpccinf.txt
	# (PHASES comes from the kernel command line: the same on every node.)
	for phase in $PHASES; do
		wait_phase "$phase" || fail "no $phase phase"
		check_left "$phase"
	done
	# NetPIPE's rank 0 writes its table file where it ran; so does hpcc.
	[ -f /tmp/np.out ] && cp /tmp/np.out "$RESULTS/np.out"
	[ -f /tmp/hpccoutf.txt ] && cp /tmp/hpccoutf.txt "$RESULTS/hpccoutf.txt"
	wait_done
fi
exit 0
