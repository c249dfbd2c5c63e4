# Helpers shared by the VM scenarios (busybox sh, sourced, not run).
# The guest init gives us NODE_ID, NNODES and RESULTS (a directory the host
# gets back).

GANG_ROOT=/sys/fs/cgroup/scx_gang
KNOBS=/run/scx_gang
SCX_STATE=/sys/kernel/sched_ext/state

log() { echo "[scenario] $*"; }
fail() { echo "[scenario] FAIL: $*"; echo "$*" > "$RESULTS/failure"; exit 1; }

# Milliseconds since boot (from /proc/uptime, 10 ms resolution).
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }

# wait_for SECONDS CMD...: poll CMD every 50 ms until it succeeds.
wait_for() {
	deadline=$(( $(now_ms) + $1 * 1000 )); shift
	until "$@" 2>/dev/null; do
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		usleep 50000
	done
}

state_is() { [ "$(cat $SCX_STATE)" = "$1" ]; }

# start_scx_gang [ARGS...]: start the daemon, wait until it is attached and
# its knob files are served. SCX_PID is its PID.
start_scx_gang() {
	scx_gang "$@" > "$RESULTS/scx_gang.log" 2>&1 &
	SCX_PID=$!
	wait_for 60 attached_or_dead || true
	state_is enabled || fail "scx_gang did not attach: $(tail -5 $RESULTS/scx_gang.log)"
	wait_for 20 test -e $KNOBS/slot_ms || fail "knob files did not appear in $KNOBS"
	log "scx_gang attached (pid $SCX_PID)"
}

# stop_scx_gang: Ctrl-C, then wait; the exit status goes to scx_gang.rc.
stop_scx_gang() {
	kill -INT "$SCX_PID"
	wait "$SCX_PID"
	echo $? > "$RESULTS/scx_gang.rc"
	log "scx_gang stopped, sched_ext state: $(cat $SCX_STATE)"
}

# np_1k_field FILE...: " np_1k_us=US", NetPIPE's one-way time at 1 KiB
# from its table (its last such row in FILEs), or nothing without one.
np_1k_field() {
	awk '$3 == "bytes" && $2 == 1024 && $11 == "usec" { u = $10 } END { if (u != "") printf " np_1k_us=%s", u }' "$@"
}

# in_gang GANG CMD...: run CMD in the background inside gang GANG (a cgroup
# below the gang root, created if missing). Its output goes to the caller's
# redirection.
in_gang() {
	g=$1; shift
	mkdir -p "$GANG_ROOT/$g"
	sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$GANG_ROOT/$g" "$@" &
}

# wait_gangs N: until scx_gang knows N gangs.
wait_gangs() {
	wait_for 20 sh -c "[ \"\$(cat $KNOBS/nr_gangs)\" = $1 ]" || fail "nr_gangs never reached $1 (is $(cat $KNOBS/nr_gangs))"
}

# Attached, or the daemon is gone (no point waiting longer).
attached_or_dead() { state_is enabled || ! kill -0 "$SCX_PID"; }

# busy_gang GANG SECONDS [THREADS]: a CPU-bound gang in the background; its
# report goes to $RESULTS/GANG.json and its PID to LAST_GANG_PID.
busy_gang() {
	in_gang "$1" burn --seconds "$2" --threads "${3:-2}" --name "$1" > "$RESULTS/$1.json"
	LAST_GANG_PID=$!
}
