#!/usr/bin/env bash
# The cluster benchmark (issue 3): seed 000 Table 4 on the VM cluster. For
# N = 1, 2, 3 compute nodes of ONE vCPU each, plus a head node 0 that runs
# gangd and the front ends but no ranks (one boot per N; node i's qemu is
# pinned to host core i % nproc), everything side by side in the same boot
# (tests/vm/scenarios/cluster_bench.sh has the method):
#   - scx_gang through gangd, overhead per switch T = TQ * (1 - r) for
#     barrier=strict and barrier=off, with the barrier's own time from
#     gangd's switch log (total_us and skew_us medians);
#   - SIGSTOP/SIGCONT switching (sigswitch) on every node at once, no
#     scx_gang attached;
#   - the inter-node RTT (ping from node 0, gangd's heartbeat RTT).
# r = (U_a + U_b) / U_alone as work rates over a window of D seconds that
# each process counts on its own clock (burn --busy-window); per
# repetition against that repetition's U_alone, then medians.
#
#   - voluntary yield (issue 4, seed 000 Table 5): barrier strict with
#     ranks that call yield_point() at every work unit ("yield"), so a
#     slot ends when all its ranks yielded (early switches are counted);
#   - timed switching (issue 12): "timed-strict" and "timed-off", the same
#     two jobs under switching = timed; per switch the idle time a node
#     reports (parked_us), the skew of the nodes' switch instants and the
#     latest node's lateness, in a table of their own next to strict;
#     "timed-strict-freezer" is timed-strict with the nodes' knob
#     park = freezer (the cgroup freezer) instead of park = bpf,
#     "timed-strict-sockdiag" with drain_check = sock_diag (a sock_diag
#     dump per drain check) instead of the socket watch,
#     "timed-strict-p50" and "timed-strict-p90" with drain_lead_pct = 50
#     or 90 (the adaptive lead's quantile) instead of 75;
#
#   scripts/bench_cluster.sh [--nodes "1 2 3"] [--tqs "50 100 200 500"] [--reps 3]
#                            [--seconds 6] [--barriers "strict off yield timed-strict timed-off"] [--fill 0]
#                            [--icount S] [--no-sig] [--quick] [--out DIR] [--no-build]
#                            [--tables-only]   (the tables again from DIR's boots)
#                            [--colocated]     (no head: gangd on compute node 0)
#                            [--quiet-wait S]  (wait up to S s, default 900, before each
#                                               boot until no other qemu runs on the host)
#   --quick: N = 1 2, TQ 100 200, 1 repetition.
#   --icount S: qemu -icount shift=S (guest time counts instructions). NOT the
#     default, and it does not work for a cluster: with cluster.sh's
#     sleep=off an idle guest's clock jumps to its next timer, so the guests'
#     clocks run apart from real time and from each other; tried with
#     --icount 0 --nodes 2: the nodes' 60 s wait for each other's ping passed
#     in seconds of real time and the cluster never formed. Real time it is,
#     with the host's noise (the table prints the noise floor).
# Writes DIR (default target/bench/cluster)/{results.csv,runs.csv,table.txt}
# and timed_nodes.csv (the timed runs per run and node), and keeps every
# boot's results in DIR/n<N>/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

NODES_LIST="1 2 3" TQS="50 100 200 500" REPS=3 DMIN=6 FILL=0
BARRIERS="strict off yield timed-strict timed-off"
ICOUNT= SIG=1 OUT=target/bench/cluster BUILD=1 BOOT=1 HEAD=1 QUIET_WAIT=900
while [[ $# -gt 0 ]]; do
    case $1 in
        --nodes) NODES_LIST=$2; shift 2 ;;
        --tqs | --slots) TQS=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --seconds) DMIN=$2; shift 2 ;;
        --barriers) BARRIERS=$2; shift 2 ;;
        --fill) FILL=$2; shift 2 ;;
        --icount) ICOUNT=$2; shift 2 ;;
        --no-sig) SIG=0; shift ;;
        --quick) NODES_LIST="1 2" TQS="100 200" REPS=1; shift ;;
        --out) OUT=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --tables-only) BOOT=0; shift ;;
        --colocated) HEAD=0; shift ;;
        --quiet-wait) QUIET_WAIT=$2; shift 2 ;;
        -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
done
for n in $NODES_LIST; do [[ $n =~ ^[1-9]$ ]] || die "--nodes: $n is not a node count"; done
for t in $TQS; do [[ $t =~ ^[0-9]+$ && $t -ge 1 ]] || die "--tqs: $t is not a slot length in ms"; done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
[[ $DMIN =~ ^[0-9]+$ && $DMIN -ge 2 ]] || die "--seconds must be an integer >= 2"
for b in $BARRIERS; do
    [[ $b =~ ^(strict|off|yield|timed-strict|timed-strict-freezer|timed-strict-sockdiag|timed-strict-p50|timed-strict-p90|timed-off)$ ]] ||
        die "--barriers: strict, off, yield, timed-strict, timed-strict-freezer, timed-strict-sockdiag, timed-strict-p50, timed-strict-p90 and/or timed-off"
done
[[ $FILL == 0 || $FILL == 1 ]] || die "--fill 0 or 1"
need_cmd awk

IMG=$OUT/image.cpio.gz
mkdir -p "$OUT"
NCPU=$(nproc)
TAIL_PID= MON_PID=
# Our helpers (progress filter, sampler) end with us, however we end.
trap '[[ -z $TAIL_PID$MON_PID ]] || kill $TAIL_PID $MON_PID 2>/dev/null' EXIT
if ((BOOT == 0)); then
    [[ -z ${ICOUNT} && -f $OUT/icount ]] && ICOUNT=$(cat "$OUT/icount")
    [[ -f $OUT/head ]] && HEAD=$(cat "$OUT/head")
elif ((BUILD)) || [[ ! -f $IMG ]]; then
    build_image "$IMG" scx_gang burn sigswitch gangd gang runas
fi

# Seconds a boot needs, generously: every run is LEAD + D + TAIL plus the
# start of its jobs; plus boot, the RTT and the daemons.
estimate() { # N
    LC_ALL=C awk -v tqs="$TQS" -v reps="$REPS" -v dmin="$DMIN" -v nb="$(wc -w <<<"$BARRIERS")" -v sig="$SIG" '
        function run(t,   d) { d = 12 * t / 1000; if (d < dmin) d = dmin; return d + 2 * (1.5 + 2 * t / 1000) + 10 }
        BEGIN { n = split(tqs, t, " "); s = run(0) * (1 + sig)
            for (i = 1; i <= n; i++) s += run(t[i]) * (nb + sig)
            printf "%d\n", 300 + reps * s * 1.5 }'
}

((BOOT)) && { echo "$ICOUNT" >"$OUT/icount"; echo "$HEAD" >"$OUT/head"; }
# Other VMs on the host (not booted from our image) take host cores from
# ours: wait for them to end before a boot, and sample them during it.
IMG_ABS=$(cd "$(dirname "$IMG")" && pwd)/$(basename "$IMG")
foreign_vms() {
    local p n=0
    for p in $(pgrep -x qemu-system-x86); do   # comm is cut to 15 characters
        tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$IMG_ABS" || n=$((n + 1))
    done
    echo "$n"
}
wait_quiet() {
    local until=$((SECONDS + QUIET_WAIT)) n
    n=$(foreign_vms)
    ((n == 0)) && return 0
    step "$n other qemu process(es) on the host: waiting up to $QUIET_WAIT s for them to end"
    while ((SECONDS < until)); do
        sleep 5
        n=$(foreign_vms)
        ((n == 0)) && { step "host quiet"; return 0; }
    done
    warn "still $n other qemu process(es) on the host: measuring anyway (see host_foreign_vms)"
}

APPEND="env.BENCH_TQS=${TQS// /,} env.BENCH_BARRIERS=${BARRIERS// /,} env.BENCH_REPS=$REPS env.BENCH_SECONDS=$DMIN env.BENCH_FILL=$FILL env.BENCH_SIG=$SIG env.BENCH_HEAD=$HEAD"
for n in $NODES_LIST; do
    ((BOOT)) || break
    t=$(estimate "$n")
    vms=$((n + HEAD)) pins=""
    for ((i = 0; i < vms; i++)); do pins+=" node$i->core$((i % NCPU))"; done
    step "N=$n: booting $vms node(s) x 1 vCPU ($( ((HEAD)) && echo "head node0 + ")$n computing), pinned:$pins${ICOUNT:+, icount shift=$ICOUNT} (at most $((t / 60)) min; host load $(cut -d' ' -f1-3 /proc/loadavg))"
    wait_quiet
    rm -rf "$OUT/n$n"
    mkdir -p "$OUT/n$n"
    # Samples of other VMs on the host during the boot, every 2 s.
    (while :; do echo "$(date +%s) $(foreign_vms)"; sleep 2; done) >"$OUT/n$n/host_foreign_vms" &
    MON_PID=$!
    # Progress: the scenario's "bench:" lines from node 0's console.
    exec 3>&2   # the tail's 2>/dev/null must not reach the filter's stderr
    tail -n +1 -F "$OUT/n$n/node0.console.log" \
        2>/dev/null > >(grep --line-buffered -a 'bench: ' | sed -u 's/^.*bench: /    /' >&3) &
    TAIL_PID=$!   # tail's own PID: when it ends, grep and sed see EOF
    rc=0
    "$SCRIPTS_DIR/cluster.sh" --image "$IMG" --scenario cluster_bench --out "$OUT/n$n" \
        --nodes "$vms" --vcpus 1 --mem 768 --pin ${ICOUNT:+--icount "$ICOUNT"} --timeout "$t" \
        --append "$APPEND" || rc=$?
    sleep 1
    kill "$TAIL_PID" "$MON_PID" 2>/dev/null || true
    wait "$TAIL_PID" "$MON_PID" 2>/dev/null || true
    TAIL_PID= MON_PID=
    fv=$(awk '$2 > 0 { b++ } END { printf "%d", NR ? 100 * b / NR : 0 }' "$OUT/n$n/host_foreign_vms")
    ((fv == 0)) || warn "N=$n: other VMs ran on the host during $fv % of this boot: its figures include their load"
    echo "$(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT/n$n/host_load_after"
    ((rc == 0)) || warn "N=$n: the boot failed (rc $rc); its runs that completed are still counted (see $OUT/n$n)"
done

# ---- tables ----------------------------------------------------------------------------
# gang-eval bench (eval/src/bench/) reads every boot's records in $OUT/n<N>/
# and writes runs.csv (one row per run: r and T_overhead against its
# repetition's U_alone), results.csv (medians) and table.txt.
runs=$OUT/runs.csv results=$OUT/results.csv table=$OUT/table.txt
EVAL=$REPO_ROOT/target/release/gang-eval
[[ -x $EVAL ]] && ((BUILD == 0)) || (cd "$REPO_ROOT" && cargo build --release -p gang-eval)
"$EVAL" bench "$OUT" --nodes "$NODES_LIST" --ncpu "$NCPU" --fill "$FILL" --seconds "$DMIN" \
    --head "$HEAD" ${ICOUNT:+--icount "$ICOUNT"} >/dev/null
echo
cat "$table"
step "results: $results, $runs, $table"
