#!/usr/bin/env bash
# Boot N guests on a private virtual switch, run one scenario in each, collect results.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
    cat >&2 <<USAGE
usage: $0 --image IMG.cpio.gz --scenario NAME --out DIR [--nodes N] [--vcpus V]
          [--mem MB] [--timeout SECONDS] [--pin] [--append "kernel args"]
          [--results-mb MB] [--mttcg] [--kill-node I@WHEN]... [--wait-quiet SECONDS]
  --nodes 1   --vcpus 2   --mem 1024   --timeout 300 (whole run, host side)
  --pin       pin node i's qemu to host core i % nproc
  --append    extra kernel args, e.g. scenario_timeout=100 (guest default: timeout-60)
  --mttcg     multi-threaded TCG (faster SMP, but kernel text patching can oops)
  --icount S  guest time counts instructions (qemu -icount shift=S): timings
              independent of host load, for benchmarks (not with --mttcg)
  --kill-node I@SECONDS   kill node I's qemu (SIGKILL: a power loss) SECONDS
                          after it was started, for fault tests
  --kill-node I@mark:TEXT kill node I's qemu as soon as any node's console
                          prints TEXT (a scenario asks for the kill when it is
                          ready for it: boot times vary too much under emulation)
  --wait-quiet S  first wait up to S seconds for other VMs on this host (another
                 test or a benchmark) to end: they share the cores, and the guests'
                 timeouts fire when emulated time crawls (then boots anyway)
Writes DIR/node<i>.console.log and DIR/node<i>/ (the guest's /results); a node
killed on purpose has no results and is listed in DIR/killed ("I SECONDS" per
line, seconds since the run started).
Exit 0 only if every node not killed on purpose powered off by itself with rc 0.
USAGE
    exit 2
}

IMG= SCENARIO= OUT= NODES=1 VCPUS=2 MEM=1024 TIMEOUT=300 PIN=0 APPEND= DISK_MB=64 TCG=single
WAIT_QUIET=0
KILLS=()
while (($#)); do
    case $1 in
    --image) IMG=${2:?}; shift 2 ;;
    --scenario) SCENARIO=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --nodes) NODES=${2:?}; shift 2 ;;
    --vcpus) VCPUS=${2:?}; shift 2 ;;
    --mem) MEM=${2:?}; shift 2 ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --append) APPEND=${2?}; shift 2 ;;
    --results-mb) DISK_MB=${2:?}; shift 2 ;;
    --pin) PIN=1; shift ;;
    --mttcg) TCG=multi; shift ;;
    --icount) ICOUNT=${2:?}; shift 2 ;;
    --kill-node) KILLS+=("${2:?}"); shift 2 ;;
    --wait-quiet) WAIT_QUIET=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
[[ -n $IMG && -n $SCENARIO && -n $OUT ]] || usage
[[ $WAIT_QUIET =~ ^[0-9]+$ ]] || die "WAIT_QUIET must be a number of seconds"
for v in NODES VCPUS MEM TIMEOUT DISK_MB; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
((NODES <= 254)) || die "at most 254 nodes"
# Kill requests, by node: KILL_AT[i] seconds after its boot or KILL_MARK[i] text.
declare -A KILL_AT=() KILL_MARK=()
for k in "${KILLS[@]}"; do
    [[ $k =~ ^([0-9]+)@(.+)$ ]] || die "--kill-node $k: expected I@SECONDS or I@mark:TEXT"
    ki=$((10#${BASH_REMATCH[1]})) kw=${BASH_REMATCH[2]}
    ((ki < NODES)) || die "--kill-node $k: there is no node $ki (--nodes $NODES)"
    [[ -z ${KILL_AT[$ki]:-}${KILL_MARK[$ki]:-} ]] || die "--kill-node: node $ki given twice"
    if [[ $kw =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
        KILL_AT[$ki]=$kw
    elif [[ $kw == mark:?* ]]; then
        KILL_MARK[$ki]=${kw#mark:}
    else
        die "--kill-node $k: WHEN must be SECONDS or mark:TEXT"
    fi
done
[[ -f $IMG ]] || die "image $IMG not found (build it with scripts/image.sh)"
need_cmd qemu-system-x86_64 tar truncate
need_cmd vde_switch
((PIN == 0)) || need_cmd taskset
need_kernel

IMG=$(cd "$(dirname "$IMG")" && pwd)/$(basename "$IMG")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# The guest's own guard must fire before ours so its results still get written.
if [[ $APPEND != *scenario_timeout=* ]]; then
    st=$((TIMEOUT - 60))
    ((st >= TIMEOUT / 2)) || st=$((TIMEOUT / 2))
    APPEND="scenario_timeout=$st${APPEND:+ $APPEND}"
fi

# The guests' TSC is the host's (TCG reads it), but a guest calibrates it
# against its emulated timers at boot, and on a loaded host that goes badly
# wrong: seen "tsc: Detected 57.618 MHz processor" for a 2.6 GHz TSC, after
# which the guest's clock ran many times too fast and every timeout in it
# fired. So the guests are told the host's TSC frequency. (Not with --icount:
# the TSC then counts instructions.)
host_tsc_khz() {
    local mhz
    mhz=$(dmesg 2>/dev/null | grep -o 'Refined TSC clocksource calibration: [0-9.]* MHz' | tail -n 1 | grep -o '[0-9.]*')
    [[ -n $mhz ]] ||
        mhz=$(dmesg 2>/dev/null | grep -o 'tsc: Detected [0-9.]* MHz' | tail -n 1 | grep -o '[0-9.]*')
    if [[ -z $mhz ]] && grep -qw constant_tsc /proc/cpuinfo; then
        mhz=$(awk -F': *' '/^cpu MHz/ {print $2; exit}' /proc/cpuinfo)
    fi
    [[ -n $mhz ]] && LC_ALL=C awk -v m="$mhz" 'BEGIN {printf "%d", m * 1000 + 0.5}'
}
if [[ $(uname -m) == x86_64 && -z ${ICOUNT:-} && $APPEND != *tsc_early_khz=* ]]; then
    if khz=$(host_tsc_khz) && [[ $khz -gt 0 ]]; then
        APPEND+=" tsc_early_khz=$khz"
    else
        warn "host TSC frequency unknown: the guests calibrate their own (unreliable on a loaded host)"
    fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/scx_gang_cluster.XXXXXX")
SW=$WORK/switch
SW_PIDFILE=$WORK/switch.pid
declare -a PIDS=() STATE=() ELAPSED=() BOOTED=()

kill_pid() { # PID: TERM, then KILL if still there after 3 s
    local pid=$1 n=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null && ((n < 30)); do sleep 0.1; n=$((n + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
CLEANED=0
cleanup() {
    ((CLEANED)) && return 0
    CLEANED=1
    local i pid
    for i in "${!PIDS[@]}"; do
        [[ ${STATE[i]} == running ]] || continue
        step "stopping node $i (pid ${PIDS[i]})"
        kill_pid "${PIDS[i]}"
    done
    if [[ -s $SW_PIDFILE ]]; then
        pid=$(cat "$SW_PIDFILE")
        # Only the switch we started: its command line names our socket dir.
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$SW"; then
            kill_pid "$pid"
        fi
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo >&2; step "interrupted, cleaning up"; cleanup; exit 130' INT
trap 'step "terminated, cleaning up"; cleanup; exit 143' TERM

# ---- other VMs -------------------------------------------------------------------------
if ((WAIT_QUIET > 0)); then
    quiet_deadline=$((${EPOCHREALTIME%.*} + WAIT_QUIET)) said=0
    while others=$(pgrep -c -x qemu-system-x86) && ((others > 0)); do
        if ((${EPOCHREALTIME%.*} >= quiet_deadline)); then
            warn "other VMs still run after ${WAIT_QUIET} s of waiting; booting anyway"
            break
        fi
        if ((${EPOCHREALTIME%.*} >= said)); then
            step "waiting for $others other qemu process(es) on this host to end (at most ${WAIT_QUIET} s)"
            said=$((${EPOCHREALTIME%.*} + 60))
        fi
        sleep 2
    done
fi

# ---- network -------------------------------------------------------------------------
# A private switch only the guests see, even for one node: a NIC with no peer behind it
# stalls its TX queue and floods the console with NETDEV WATCHDOG messages.
# It runs at a higher priority than the guests (as root): starved behind
# pinned vCPUs that spin (polling MPI ranks), it dropped packets, and TCP
# then waits out retransmission timeouts (a 2 s NetPIPE run took 30-70 s).
step "starting virtual switch"
prio=()
((EUID == 0)) && prio=(nice -n -10)
"${prio[@]}" vde_switch -s "$SW" -p "$SW_PIDFILE" -d </dev/null >"$WORK/switch.log" 2>&1 ||
    die "vde_switch failed: $(cat "$WORK/switch.log")"
n=0
until [[ -s $SW_PIDFILE && -S $SW/ctl ]]; do
    ((n++ < 50)) || die "vde_switch did not come up"
    sleep 0.1
done
SW_PID=$(cat "$SW_PIDFILE")

# ---- boot ------------------------------------------------------------------------------
NCPU=$(nproc)
# Other VMs on this host (another test or benchmark) take the same cores:
# emulated time then crawls and timeouts inside the guests fire. Say so, and
# keep it with the results.
others=$(pgrep -c -x qemu-system-x86 2>/dev/null || true)
{
    echo "loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "other_qemu ${others:-0}"
    echo "cpus $NCPU"
    echo "tsc_khz ${khz:-unset}"
} >"$OUT/host_load"
((${others:-0} == 0)) ||
    warn "$others other qemu process(es) run on this host (load $(cut -d' ' -f1 /proc/loadavg), $NCPU CPUs): guest timings will suffer"
T0=$EPOCHREALTIME
for ((i = 0; i < NODES; i++)); do
    rm -rf "$OUT/node$i" "$OUT/node$i.console.log" "$OUT/killed"
    truncate -s "${DISK_MB}M" "$WORK/node$i.disk"
    cmd=(qemu-system-x86_64 -accel "tcg,thread=$TCG" -nographic -no-reboot
        -m "$MEM" -smp "$VCPUS"
        -kernel "$KERNEL_DIR/vmlinuz" -initrd "$IMG"
        -append "console=ttyS0 quiet panic=-1 nodeid=$i nnodes=$NODES scenario=$SCENARIO${APPEND:+ $APPEND}"
        -netdev "vde,id=n0,sock=$SW" -device "virtio-net-pci,netdev=n0,mac=$(printf '52:54:00:00:00:%02x' $((i + 1))),romfile="
        -drive "file=$WORK/node$i.disk,format=raw,if=virtio")
    [[ -z ${ICOUNT:-} ]] || cmd+=(-icount "shift=$ICOUNT,sleep=off")
    ((PIN == 0)) || cmd=(taskset -c $((i % NCPU)) "${cmd[@]}")
    step "booting node $i.."
    "${cmd[@]}" </dev/null >"$OUT/node$i.console.log" 2>&1 &
    PIDS[i]=$!
    STATE[i]=running
    BOOTED[i]=$EPOCHREALTIME
done

# ---- wait ------------------------------------------------------------------------------
elapsed() { LC_ALL=C awk -v a="${1:-$T0}" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b - a}'; }
# at_least A B: A >= B, for decimals
at_least() { LC_ALL=C awk -v a="$1" -v b="$2" 'BEGIN{exit !(a >= b)}'; }
# kill_node I WHY: the fault a test asked for. SIGKILL, like pulling the plug:
# the guest gets no chance to write results.
kill_node() {
    step "killing node $1 (qemu pid ${PIDS[$1]}) as asked: $2"
    kill -KILL "${PIDS[$1]}" 2>/dev/null || true
    wait "${PIDS[$1]}" 2>/dev/null || true
    STATE[$1]=killed
    ELAPSED[$1]=$(elapsed)
    echo "$1 ${ELAPSED[$1]}" >>"$OUT/killed"
}
check_kills() {
    local i
    for i in "${!KILL_AT[@]}"; do
        [[ ${STATE[i]} == running ]] || continue
        at_least "$(elapsed "${BOOTED[i]}")" "${KILL_AT[$i]}" || continue
        kill_node "$i" "${KILL_AT[$i]} s after its boot"
        unset "KILL_AT[$i]"
    done
    for i in "${!KILL_MARK[@]}"; do
        [[ ${STATE[i]} == running ]] || continue
        grep -qaF -- "${KILL_MARK[$i]}" "$OUT"/node*.console.log || continue
        kill_node "$i" "a console printed '${KILL_MARK[$i]}'"
        unset "KILL_MARK[$i]"
    done
}
deadline=$((${EPOCHREALTIME%.*} + TIMEOUT))
next_progress=$((${EPOCHREALTIME%.*} + 30))
declare -a QRC=()
while :; do
    ((${#KILL_AT[@]} + ${#KILL_MARK[@]} == 0)) || check_kills
    if [[ -n ${SW_PID:-} ]] && ! kill -0 "$SW_PID" 2>/dev/null; then
        warn "the virtual switch (pid $SW_PID) died after $(elapsed) s: the nodes are cut off ($(tail -n 3 "$WORK/switch.log" 2>/dev/null | tr '\n' ' '))"
        echo "switch died after $(elapsed) s" >>"$OUT/host_load"
        SW_PID=
    fi
    left=0
    for i in "${!PIDS[@]}"; do
        [[ ${STATE[i]} == running ]] || continue
        if kill -0 "${PIDS[i]}" 2>/dev/null; then
            left=$((left + 1))
            continue
        fi
        rc=0
        wait "${PIDS[i]}" || rc=$?
        QRC[i]=$rc
        STATE[i]=exited
        ELAPSED[i]=$(elapsed)
        step "node $i powered off after ${ELAPSED[i]} s"
    done
    ((left)) || break
    if ((${EPOCHREALTIME%.*} >= next_progress)); then
        next_progress=$((${EPOCHREALTIME%.*} + 30))
        running=()
        for i in "${!PIDS[@]}"; do [[ ${STATE[i]} != running ]] || running+=("$i"); done
        step "$(elapsed) s: node(s) ${running[*]} still running"
    fi
    if ((${EPOCHREALTIME%.*} >= deadline)); then
        for i in "${!PIDS[@]}"; do
            [[ ${STATE[i]} == running ]] || continue
            step "node $i timed out after ${TIMEOUT} s, killing it"
            kill_pid "${PIDS[i]}"
            STATE[i]=timeout
        done
        break
    fi
    sleep 0.2
done

for i in "${!KILL_AT[@]}" "${!KILL_MARK[@]}"; do
    warn "node $i was to be killed (${KILL_AT[$i]:-mark: ${KILL_MARK[$i]:-}}) but was not running any more"
done

# ---- results ---------------------------------------------------------------------------
FAILED=0
report_fail() { # NODE REASON
    FAILED=1
    echo "node $1: FAILED: $2" >&2
    echo "---- last 30 lines of $OUT/node$1.console.log ----" >&2
    # without the firmware's terminal control sequences (screen clear, reset)
    tail -n 30 "$OUT/node$1.console.log" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1b[a-zA-Z]/\n/g; s/\r//g' >&2
    echo "----" >&2
}
for ((i = 0; i < NODES; i++)); do
    mkdir -p "$OUT/node$i"
    disk=$WORK/node$i.disk
    if [[ -z $(head -c 512 "$disk" | tr -d '\0') ]]; then
        step "node $i: the guest wrote no results"
    else
        tar xf "$disk" -C "$OUT/node$i" 2>"$WORK/tar.err" ||
            step "node $i: results disk unreadable: $(head -n1 "$WORK/tar.err")"
    fi
    rcfile=$OUT/node$i/rc
    if [[ ${STATE[i]} == killed ]]; then
        step "node $i: killed on purpose after ${ELAPSED[i]} s, no results expected"
    elif [[ ${STATE[i]} == timeout ]]; then
        report_fail "$i" "timed out after ${TIMEOUT} s (killed)"
    elif ((QRC[i] != 0)); then
        report_fail "$i" "qemu exited with status ${QRC[i]}"
    elif grep -qa 'Kernel panic' "$OUT/node$i.console.log"; then
        report_fail "$i" "kernel panic"
    elif [[ ! -s $rcfile ]]; then
        report_fail "$i" "no rc in results (guest wrote no results)"
    elif [[ $(tr -d '[:space:]' <"$rcfile") != 0 ]]; then
        report_fail "$i" "scenario $SCENARIO exited with rc $(tr -d '[:space:]' <"$rcfile")"
    else
        step "node $i: scenario $SCENARIO rc 0, results in $OUT/node$i"
    fi
done
((FAILED == 0)) || exit 1
if [[ -s $OUT/killed ]]; then
    step "all $NODES node(s) passed ($(wc -l <"$OUT/killed") killed on purpose)"
else
    step "all $NODES node(s) passed"
fi
