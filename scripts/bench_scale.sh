#!/usr/bin/env bash
# gangd at scale (issue 14): for each N, a real gangd on loopback and N fake
# node agents (gang-load: the real TLS link, certificates and encoder;
# immediate answers; no processes), 4 CPUs per node, 100 ms slots, strict
# barrier. Per N, gang-load runs: idle (joined, no job), steady (three jobs
# over every CPU, switching), arrivals (jobs of 1-N nodes, one after the
# other), loss (a node goes silent; its jobs fail; it joins again); see
# coordinator/src/bin/gang-load/main.rs and docs/scale.md for every column.
#
#   scripts/bench_scale.sh [--quick] [--nodes "64 256 1024 4096"] [--steady 5]
#                          [--arrivals 5] [--idle 2] [--barrier strict]
#                          [--switching commanded|timed] [--arrival-gap-ms MS]
#                          [--bg-per-node K] [--out DIR] [--certs DIR] [--no-build]
#                          [--table-only] [--compare LABEL=CSV]...
#
# --switching timed: plans sent ahead instead of a barrier per switch (the
# agents ack them and report their switches in batches; gangd writes its
# switch log), and the table's "plan" column: how long a plan took to
# reach every node (from gangd's making it to the last ack, p50/p99 over
# the arrivals' plans). --arrival-gap-ms MS: each arriving job is held
# placed MS ms and MS ms pass after its end (0, the default: back to back,
# gangd saturated and each plan queued behind the last; 400: each plan
# timed alone). --bg-per-node K: the three background jobs have K ranks on each node
# instead of one per CPU (cheaper to place and to switch: K = 1 lets the
# switch be measured at 4096 nodes on 2 cores). --quick: N = 64 and 256 only. --table-only: the table again from DIR's CSV. Writes DIR (default target/bench/scale)/
# scale.csv, table.txt and scale.svg (the figures against N, drawn by gang-eval; --compare adds
# another run's scale.csv as a line of its own, e.g. before=DIR/scale.csv), and prints the table.
# The default run takes about
# 3 minutes on 2 cores (most of it at 4096 nodes). Progress on stderr.
# Every process it starts (gang-load, and the gangd gang-load started, by
# the PID it wrote) is stopped on exit, failure and Ctrl-C included. The
# certificates are made once for the largest N (a minute for 4096), in a
# scratch directory, or kept in --certs DIR for the next run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

NODES="64 256 1024 4096" STEADY=5 ARRIVALS=5 IDLE=2 BARRIER=strict SWITCHING=commanded OUT=target/bench/scale BUILD=1 CERTS= TABLE_ONLY=0 BG=4 GAP=0
COMPARE=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --quick) NODES="64 256"; shift ;;
        --nodes) NODES=$2; shift 2 ;;
        --steady) STEADY=$2; shift 2 ;;
        --arrivals) ARRIVALS=$2; shift 2 ;;
        --idle) IDLE=$2; shift 2 ;;
        --barrier) BARRIER=$2; shift 2 ;;
        --switching) SWITCHING=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --certs) CERTS=$2; shift 2 ;;
        --bg-per-node) BG=$2; shift 2 ;;
        --arrival-gap-ms) GAP=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --table-only) TABLE_ONLY=1; shift ;;
        --compare) COMPARE+=("$2"); shift 2 ;;
        -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
done
for n in $NODES; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "--nodes: $n is not a node count"; done
for s in "$STEADY" "$ARRIVALS" "$IDLE"; do [[ $s =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "phase lengths are seconds: $s"; done
[[ $BARRIER =~ ^(strict|off)$ ]] || die "--barrier: strict or off"
[[ $SWITCHING =~ ^(commanded|timed)$ ]] || die "--switching: commanded or timed"
TIMED=()
[[ $SWITCHING == timed ]] && TIMED=(--switching timed --switch-log)
[[ $BG =~ ^[1-4]$ ]] || die "--bg-per-node: 1 to 4 (the nodes have 4 CPUs)"
[[ $GAP =~ ^[0-9]+$ ]] || die "--arrival-gap-ms: a whole number of ms"

# The table of $OUT/scale.csv: the columns a reader compares with the targets.
print_table() {
    awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    function v(k) { return (!(k in c) || $c[k] == "") ? "-" : $c[k] }
    FNR == 2 {
        printf "%6s %7s %7s %7s %6s %6s %6s %9s %9s %15s %9s %15s %15s %17s %8s %7s\n", "nodes", "join", "threads", "RSS", "CPU%", "CPU%", "CPU%", "switch/s", "msgs/s", "switch p50/p99", "place all", "place p50/p99", "plan p50/p99", "alloc p50/p99", "lost", "relinks"
        printf "%6s %7s %7s %7s %6s %6s %6s %9s %9s %15s %9s %15s %15s %17s %8s %7s\n", "", "s", "", "MB", "idle", "steady", "arriv", "(10 max)", "", "ms", "ms", "ms", "ms", "us", "ms", ""
    }
    {
        printf "%6s %7s %7s %7s %6s %6s %6s %9s %9s %15s %9s %15s %15s %17s %8s %7s\n", v("nodes"), v("join_s"), v("threads"), v("rss_mb"), v("cpu_idle_pct"), v("cpu_steady_pct"), v("cpu_arrivals_pct"), v("switches_per_s"), v("switch_msgs_per_s"), v("switch_p50_ms") "/" v("switch_p99_ms"), v("place_all_ms"), v("place_p50_ms") "/" v("place_p99_ms"), v("plan_p50_ms") "/" v("plan_p99_ms"), v("alloc_p50_us") "/" v("alloc_p99_us"), v("lost_detect_ms"), v("relinks")
    }' "$OUT/scale.csv" | tee "$OUT/table.txt"
}

BIN=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release

# $OUT/scale.svg: this run (labelled "this run") and every --compare run.
draw_figure() {
    if [[ ! -x $BIN/gang-eval ]]; then
        warn "no $BIN/gang-eval: no scale.svg (cargo build --release -p gang-eval)"
        return 0
    fi
    "$BIN/gang-eval" scale "this run=$OUT/scale.csv" "${COMPARE[@]}" --out "$OUT" >/dev/null \
        || die "gang-eval could not draw $OUT/scale.svg"
    step "figure: $OUT/scale.svg"
}

if ((TABLE_ONLY)); then
    [[ -f $OUT/scale.csv ]] || die "no $OUT/scale.csv"
    print_table
    draw_figure
    exit 0
fi

if ((BUILD)); then
    step "building gangd, gang-load and gang-eval"
    (export BPF_CLANG=${BPF_CLANG:-clang-19}; cargo build --release -p gang-coordinator -p gang-eval --bins >&2)
fi
for b in gangd gang-load; do [[ -x $BIN/$b ]] || die "$BIN/$b missing (build it, or drop --no-build)"; done

# Every fake agent and gangd's side of it hold a socket.
max_n=0
for n in $NODES; do ((n > max_n)) && max_n=$n; done
need=$((max_n + 256))
if (($(ulimit -n) < need)); then
    ulimit -n "$need" 2>/dev/null || die "need $need open files (ulimit -n) for $max_n nodes"
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-scale.XXXXXX")
[[ -n $CERTS ]] || CERTS=$WORK/certs
LOAD_PID=
stop_all() {
    if [[ -n $LOAD_PID ]]; then kill "$LOAD_PID" 2>/dev/null || true; fi
    for f in "$WORK"/n*/gangd.pid; do
        [[ -f $f ]] || continue
        local pid
        pid=$(<"$f")
        # Only if it is still our gangd (the PID may have been reused).
        if [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$BIN/gangd"* ]]; then kill "$pid" 2>/dev/null || true; fi
    done
    if [[ -n $LOAD_PID ]]; then wait "$LOAD_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap stop_all EXIT
trap 'exit 130' INT TERM

CSV=$OUT/scale.csv
rm -f "$CSV"
for n in $NODES; do
    step "N = $n nodes x 4 CPUs: idle ${IDLE} s, steady ${STEADY} s, arrivals ${ARRIVALS} s, then a lost node"
    header=()
    [[ -f $CSV ]] || header=(--header)
    "$BIN/gang-load" --gangd "$BIN/gangd" --dir "$WORK/n$n" --certs "$CERTS" --nodes "$n" --cpus 4 --slot-ms 100 \
        --barrier "$BARRIER" "${TIMED[@]}" --bg-per-node "$BG" --idle "$IDLE" --steady "$STEADY" --arrivals "$ARRIVALS" --arrival-gap-ms "$GAP" \
        "${header[@]}" >>"$CSV" &
    LOAD_PID=$!
    if ! wait "$LOAD_PID"; then
        LOAD_PID=
        warn "N = $n failed (gangd's log: kept as $OUT/gangd-$n.log)"
        cp "$WORK/n$n/gangd.log" "$OUT/gangd-$n.log" 2>/dev/null || true
        continue
    fi
    LOAD_PID=
    rm -rf "$WORK/n$n"
done
[[ -f $CSV ]] || die "no N completed"

print_table
draw_figure
step "CSV: $CSV; table: $OUT/table.txt"
