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
#   abort     gang run -n 3 -- mpi_allreduce --iters 200 --fault-rank 1:
#             rank 1 corrupts its value, every rank's check fails and calls
#             MPI_Abort; the job must fail and no rank may be left anywhere.
# Outputs on the head: NAME.out / NAME.err / NAME.rc (NAME.timeout if the
# head had to Ctrl-C a job that hung). Every compute node writes, after
# the abort, abort.left (mpi_allreduce processes still there, empty if
# none) and abort.cgroups (non-empty job cgroups); after every job its
# node's MPI processes to NAME.procs (should be empty).
#
# Debugging: env.UCX_LOG_LEVEL=info or env.MPIR_CVAR_DEBUG_SUMMARY=1 on the
# kernel command line (cluster.sh --append) reach the ranks: gang run
# passes the user's environment on.
. /scenarios/cluster_lib.sh

MPI_PROGS="mpi_ring mpi_allreduce NPmpich2"
# A job runs at most this long (s) before the head Ctrl-Cs it (emulated
# nodes: MPI_Init alone takes seconds).
JOB_LIMIT=${JOB_LIMIT:-240}

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

# run_job NAME N PROG ARGS...: alice's `gang run -n N --name NAME -- PROG
# ARGS...`, waited for (at most JOB_LIMIT s, then Ctrl-C), exit status in
# NAME.rc; then every compute node records what is left.
run_job() {
	local name=$1 n=$2 t0
	shift 2
	t0=$(now_ms)
	submit "$name" "$n" -- "$@"
	if ! poll_for "$JOB_LIMIT" sh -c "! kill -0 $JOB_PID"; then
		log "job $name still runs after ${JOB_LIMIT}s: Ctrl-C"
		echo "$JOB_LIMIT" > "$RESULTS/$name.timeout"
		as_alice gang ps > "$RESULTS/$name.ps" 2>&1
		kill -INT "$JOB_PID"
		poll_for 30 sh -c "! kill -0 $JOB_PID" || kill -KILL "$JOB_PID"
	fi
	finish_job "$name" "$JOB_PID"
	echo $(( $(now_ms) - t0 )) > "$RESULTS/$name.ms"
	log "$name: $(grep -c '^{' "$RESULTS/$name.out") JSON line(s); stderr: $(head -c 400 "$RESULTS/$name.err" | tr '\n' ';')"
	board_put phase "$name"
	all_nodes "$name" checked
}

# all_nodes KEY VALUE: the head waits until every compute node put
# KEY.node<i> VALUE.
all_nodes() {
	local i=$FIRST_COMPUTE
	while [ "$i" -lt "$NNODES" ]; do
		wait_board "$1.node$i" "$2" 90 || fail "node$i never reported $1"
		i=$((i + 1))
	done
}

# check_left NAME: on a compute node, after job NAME: no MPI process left
# (within 15 s: the agent kills a failed job's ranks), job cgroups empty.
check_left() {
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
	run_job ring 3 /usr/bin/mpi_ring --rounds 200
	run_job allreduce 3 mpi_allreduce --iters 200
	run_job netpipe 2 NPmpich2 -u 65536 -n 5 -p 0 -o /tmp/np.out
	run_job abort 3 mpi_allreduce --iters 200 --fault-rank 1
	as_alice gang ps > "$RESULTS/ps_after.txt" 2>&1
	cluster_done
else
	for phase in ring allreduce netpipe abort; do
		wait_board phase "$phase" 900 || fail "no $phase phase"
		check_left "$phase"
	done
	cp "$RESULTS/abort.procs" "$RESULTS/abort.left"
	# NetPIPE's rank 0 writes its table file where it ran.
	[ -f /tmp/np.out ] && cp /tmp/np.out "$RESULTS/np.out"
	wait_done
fi
exit 0
