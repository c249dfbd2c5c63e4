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
#
#   scripts/bench_cluster.sh [--nodes "1 2 3"] [--tqs "50 100 200 500"] [--reps 3]
#                            [--seconds 6] [--barriers "strict off yield"] [--fill 0]
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
# and keeps every boot's results in DIR/n<N>/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

NODES_LIST="1 2 3" TQS="50 100 200 500" REPS=3 DMIN=6 BARRIERS="strict off yield" FILL=0
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
for b in $BARRIERS; do [[ $b == strict || $b == off || $b == yield ]] || die "--barriers: strict, off and/or yield"; done
[[ $FILL == 0 || $FILL == 1 ]] || die "--fill 0 or 1"
need_cmd awk sort

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
# idle_est NODE0_DIR: per strict run, the CPU time a switch leaves idle on a
# node, from gangd's switch log (the lines of the run's window): the node's
# drain_us (its freezer written -> parked and drained) plus its Frozen ->
# Running at gangd (one-way delays cancel); mean over the nodes, median over
# the switches. "idle <rep> <method> <tq> <µs>" lines.
idle_est() {
    local line rep m tq from to
    while read -r line; do
        [[ $line =~ \"rep\":([0-9]+),\"method\":\"strict\",\"tq\":([0-9]+),.*\"log_from\":([0-9]+),\"log_to\":([0-9]+) ]] || continue
        rep=${BASH_REMATCH[1]} tq=${BASH_REMATCH[2]} from=${BASH_REMATCH[3]} to=${BASH_REMATCH[4]}
        ((to >= from)) || continue
        sed -n "${from},${to}p" "$1/switch.jsonl" | LC_ALL=C awk '{ s = $0; n = 0; t = 0
                while (match(s, /"drain_us":[0-9]+,[^}]*},"frozen_at_us":[0-9]+,"running_at_us":[0-9]+/)) {
                    m = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
                    split(m, p, /[:,}]/); t += p[2] + p[length(p)] - p[length(p) - 2]; n++
                }
                if (n) print t / n }' | sort -n |
            awk -v k="$rep strict $tq" '{ a[NR] = $1 } END { if (NR) printf "idle %s %d\n", k, NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
    done <"$1/gang.jsonl"
}

# runs.csv: one row per run with r and T_overhead against its repetition's
# U_alone (the signal runs summed over the nodes); results.csv: medians.
runs=$OUT/runs.csv results=$OUT/results.csv table=$OUT/table.txt
echo "nodes,rep,method,tq_ms,d_s,units,rate,alone_rate,r,overhead_us,switches,total_p50_us,skew_p50_us,freeze_p50_us,frozen_p50_us,idle_est_us,spread_ms,ok,early_switches" >"$runs"
for n in $NODES_LIST; do
    dir=$OUT/n$n
    {
        for f in "$dir"/node*/sig.jsonl; do [[ ! -f $f ]] || sed 's/^/sig /' "$f"; done
        [[ ! -f $dir/node0/gang.jsonl ]] || sed 's/^/gang /' "$dir/node0/gang.jsonl"
        [[ ! -f $dir/node0/gang.jsonl ]] || idle_est "$dir/node0"
        true   # a boot that left no results (pipefail: an empty group must not end the script)
    } | LC_ALL=C awk -v N="$n" '
        function f(name,   v) { v = $0; if (index(v, "\"" name "\":") == 0) return ""; sub(".*\"" name "\":\"?", "", v); sub("[\",}].*", "", v); return v }
        $1 == "sig" {
            k = f("rep") " " f("method") " " f("tq"); su[k] += f("units"); sn[k]++; sd[k] = f("d")
            ssw[k] += f("switches"); if (f("spread_ms") > ssp[k]) ssp[k] = f("spread_ms"); next
        }
        $1 == "idle" { gi2[$2 " " $3 " " $4] = $5; next }
        $1 == "gang" { k = f("rep") " " f("method") " " f("tq"); gu[k] = f("units"); gd[k] = f("d"); gsw[k] = f("switches")
            gt[k] = f("total_p50_us"); gs[k] = f("skew_p50_us"); gf[k] = f("freeze_p50_us"); gi[k] = f("idle_p50_us"); gsp[k] = f("spread_ms"); gok[k] = f("ok"); ge[k] = f("early") }
        END {
            for (k in su) { split(k, a, " "); if (a[2] == "alone" && sn[k] == N && sd[k] > 0 && su[k] > 0) alone[a[1]] = su[k] / sd[k] }
            for (k in gu) { split(k, a, " "); if (a[2] == "scx_alone" && gok[k] == 1 && gd[k] > 0 && gu[k] > 0) scx[a[1]] = gu[k] / gd[k] }
            for (k in su) { split(k, a, " "); if (a[2] == "alone") continue
                ok = (sn[k] == N && (a[1] in alone) && sd[k] > 0); rate = ok ? su[k] / sd[k] : 0; base = ok ? alone[a[1]] : 0
                r = ok ? rate / base : 0
                printf "%d,%d,sigstop,%d,%s,%d,%.2f,%.2f,%.5f,%.1f,%d,,,,,,%d,%d,\n", N, a[1], a[3], sd[k], su[k], rate, base, r, ok ? a[3] * (1 - r) * 1000 : 0, ssw[k] / (sn[k] ? sn[k] : 1), ssp[k], ok }
            for (k in gu) { split(k, a, " "); if (a[2] == "scx_alone") continue
                ok = (gok[k] == 1 && (a[1] in scx) && gd[k] > 0); rate = ok ? gu[k] / gd[k] : 0; base = ok ? scx[a[1]] : 0
                r = ok ? rate / base : 0
                printf "%d,%d,%s,%d,%s,%d,%.2f,%.2f,%.5f,%.1f,%d,%s,%s,%s,%s,%s,%d,%d,%s\n", N, a[1], a[2], a[3], gd[k], gu[k], rate, base, r, ok ? a[3] * (1 - r) * 1000 : 0, gsw[k], gt[k], gs[k], gf[k], (a[2] == "strict" ? gi[k] : ""), (a[2] == "strict" ? gi2[k] : ""), gsp[k], ok, ge[k] }
            # the baselines too (r = 1 by definition; their rate is the figure)
            for (k in alone) printf "%d,%d,alone,0,,,%.2f,%.2f,1,0,0,,,,,,,1,\n", N, k, alone[k], alone[k]
            for (k in scx) printf "%d,%d,scx_alone,0,,,%.2f,%.2f,%.5f,0,0,,,,,,,1,\n", N, k, scx[k], (k in alone) ? alone[k] : 0, (k in alone) ? scx[k] / alone[k] : 0
        }' | sort -t, -k1,1n -k3,3 -k4,4n -k2,2n >>"$runs"
done

# RTT per N: the slowest peer's median (ping) and gangd's heartbeat minimum.
rtt() { # N WHAT -> µs (max over peers), or -
    local f=$OUT/n$1/node0/rtt.jsonl
    [[ -f $f ]] || { echo -; return; }
    grep "\"what\":\"$2\"" "$f" | sed -n 's/.*"p50_us":\([0-9]*\).*/\1/p' | sort -n | tail -1 | grep . || echo -
}

echo "nodes,method,tq_ms,runs,r_median,overhead_us_median,overhead_us_min,overhead_us_max,switches_median,total_p50_us,skew_p50_us,freeze_p50_us,frozen_p50_us,idle_est_us,rtt_ping_idle_p50_us,rtt_ping_loaded_p50_us,rtt_gangd_hb_min_us" >"$results"
{
    for n in $NODES_LIST; do
        fv=-
        [[ -s $OUT/n$n/host_foreign_vms ]] && fv=$(awk '$2 > 0 { b++ } END { printf "%d", NR ? 100 * b / NR : 0 }' "$OUT/n$n/host_foreign_vms")
        echo "retried $n $(grep -c '"retries":[1-9]' "$OUT/n$n/node0/gang.jsonl" 2>/dev/null)"
        echo "rtt $n $(rtt "$n" ping_idle) $(rtt "$n" ping_loaded) $(rtt "$n" gangd_hb_loaded) $(rtt "$n" ping_scx_idle) $(rtt "$n" gangd_hb_idle) $fv"
    done
    tail -n +2 "$runs"
} | LC_ALL=C awk -F, -v results="$results" -v icount="$ICOUNT" -v ncpu="$NCPU" -v fill="$FILL" -v d="$DMIN" -v head="$HEAD" '
    function median(list,   n, a, i, j, t) {
        n = split(list, a, " "); if (n == 0) return ""
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function minmax(list, want,   n, a, i, m) { n = split(list, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (want == "min" ? a[i] + 0 < m + 0 : a[i] + 0 > m + 0) m = a[i]; return m }
    function us(x) { return x == "" || x == "-" ? "-" : (x >= 10000 ? sprintf("%.1f ms", x / 1000) : sprintf("%d µs", x)) }
    function ov(x) { return x == "" ? "-" : sprintf("%.0f", x) }
    /^retried / { split($0, a, " "); retried[a[2]] = a[3]; next }
    /^rtt / { split($0, a, " "); rping[a[2]] = a[3]; rload[a[2]] = a[4]; rhb[a[2]] = a[5]; rsi[a[2]] = a[6]; rhbi[a[2]] = a[7]; fvm[a[2]] = a[8]; next }
    $18 != 1 { bad[$1 " " $3 " " $4]++; next }
    {
        k = $1 " " $3 " " $4
        if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
        if (!($1 in seenN)) { seenN[$1] = 1; ns[++nn] = $1 }
        if ($3 != "alone" && $3 != "scx_alone" && !(($1 " " $4) in seenT)) { seenT[$1 " " $4] = 1; tq[$1, ++nt[$1]] = $4 }
        R[k] = R[k] " " $9; O[k] = O[k] " " $10; S[k] = S[k] " " $11
        if ($12 != "") T[k] = T[k] " " $12
        if ($13 != "") K[k] = K[k] " " $13
        if ($14 != "") F[k] = F[k] " " $14
        if ($15 != "") I[k] = I[k] " " $15
        if ($16 != "") E[k] = E[k] " " $16
        if ($3 == "alone" || $3 == "scx_alone") A[k] = A[k] " " $7
        if ($19 != "") { EA[k] += $19; ES[k] += $11 }
    }
    END {
        for (i = 1; i <= nk; i++) {
            k = keys[i]; split(k, a, " ")
            o = median(O[k]); med[k] = o
            rng[k] = split(O[k], z, " ") > 1 ? sprintf(" [%.0f..%.0f]", minmax(O[k], "min"), minmax(O[k], "max")) : ""
            tot[k] = median(T[k]); skw[k] = median(K[k]); idl[k] = median(I[k]); est[k] = median(E[k])
            printf "%d,%s,%d,%d,%.5f,%.1f,%.1f,%.1f,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", a[1], a[2], a[3], split(O[k], z, " "), median(R[k]), o, minmax(O[k], "min"), minmax(O[k], "max"),
                median(S[k]), tot[k], skw[k], median(F[k]), idl[k], est[k], rping[a[1]], rload[a[1]], rhb[a[1]] >> results
        }
        print "Cluster benchmark, seed 000 Table 4 method: T_overhead = TQ * (1 - (U_a+U_b)/U_alone), medians over repetitions."
        clock = icount == "" ? "guest time = host real time (no -icount): every figure includes the host'"'"'s scheduling noise" : "qemu -icount shift=" icount ": guest time counts instructions, RTT and barrier times are NOT physical"
        if (head) printf "N compute nodes (node 1..N, ranks) + head node 0 (gangd, front ends, no ranks); 1 vCPU each, qemu pinned to host core i %% %d: %s.\n", ncpu, ncpu == 2 ? "node 2 shares core 0 with the (mostly idle) head, nodes 1 and 3 share core 1" : "see n<N>/"
        else printf "N compute nodes, gangd on node 0 among its ranks; 1 vCPU each, qemu pinned to host core i %% %d%s.\n", ncpu, ncpu == 2 ? " (3 nodes: nodes 0 and 2 share core 0)" : ""
        print clock "."
        printf "Window D >= %d s per run; gangd fill=%d; scx_gang against one job alone under scx_gang, SIGSTOP (sigswitch) against burn alone on the default scheduler, every node at once.\n", d, fill
        print "yield = the strict barrier with ranks that call yield_point() at every work unit (seed 000 Table 5); early = share of its switches gangd brought forward because every rank had yielded; strict/yld = strict overhead over yield overhead."
        print "total = barrier start -> last node Running (gangd switch log, p50 over the window); idle≈ = CPU time a strict switch leaves idle on a node, from the switch log: its park+drain time plus its Frozen -> Running at gangd (the direct cost, immune to host noise); skew = spread of the Running answers; RTT = ping node0 -> slowest compute node, p50, idle and while every compute node runs a job."
        for (j = 1; j <= nn; j++) {
            n = ns[j]
            plural = n > 1 ? "s" : ""
            scxrel = "-"
            if (((n " scx_alone 0") in A) && ((n " alone 0") in A)) scxrel = sprintf("%.4f", median(A[n " scx_alone 0"]) / median(A[n " alone 0"]))
            printf "\nN=%d node%s   U_alone: default scheduler %s units/s, under scx_gang %s of that\n", n, plural, median(A[n " alone 0"]), scxrel
            printf "   RTT: ping idle p50 %s, ping idle under scx_gang %s, ping with every node busy %s; gangd heartbeat min %s idle, %s busy\n", us(rping[n]), us(rsi[n]), us(rload[n]), us(rhbi[n]), us(rhb[n])
            na = split(A[n " alone 0"], z, " "); nb = split(A[n " scx_alone 0"], z, " ")
            sa = na > 1 ? (minmax(A[n " alone 0"], "max") - minmax(A[n " alone 0"], "min")) / median(A[n " alone 0"]) : -1
            sb = nb > 1 ? (minmax(A[n " scx_alone 0"], "max") - minmax(A[n " scx_alone 0"], "min")) / median(A[n " scx_alone 0"]) : -1
            pa = sa >= 0 ? sprintf("%.1f %%", 100 * sa) : "-"; pb = sb >= 0 ? sprintf("%.1f %%", 100 * sb) : "-"
            if (sa >= 0 || sb >= 0) printf "   noise: U_alone ranges over %s (default scheduler) and %s (scx_gang) of its median between repetitions: a per-switch figure below ~TQ x that (%.0f µs at TQ=100 ms) is not resolved\n", pa, pb, 100000 * (sa > sb ? sa : sb)
            printf "   host: other VMs (not this benchmark'"'"'s) running during %s %% of this boot\n", fvm[n]
            printf "   %-6s | %-24s %-9s %-9s %-9s | %-24s %-9s | %-24s %-7s %-11s | %-24s | %-8s | %s\n", "TQ", "strict µs/sw [min..max]", "total", "idle≈", "skew", "off µs/sw [min..max]", "total", "yield µs/sw [min..max]", "early", "strict/yld", "SIGSTOP µs/sw [min..max]", "SIG/strict", "RTT p50 idle / busy"
            for (i = 1; i <= nt[n]; i++) {
                t = tq[n, i]; ks = n " strict " t; ko = n " off " t; kg = n " sigstop " t; ky = n " yield " t
                ratio = (ks in med) && (kg in med) && med[ks] > 0 && med[kg] > 0 ? sprintf("%.2fx", med[kg] / med[ks]) : "-"
                yratio = (ks in med) && (ky in med) && med[ks] > 0 && med[ky] > 0 ? sprintf("%.2fx", med[ks] / med[ky]) : "-"
                early = (ky in ES) && ES[ky] > 0 ? sprintf("%.0f %%", 100 * EA[ky] / ES[ky]) : "-"
                printf "   %-6s | %-24s %-9s %-9s %-9s | %-24s %-9s | %-24s %-7s %-11s | %-24s | %-8s | %s\n", t " ms", ov(med[ks]) rng[ks], us(tot[ks]), us(est[ks]), us(skw[ks]), ov(med[ko]) rng[ko], us(tot[ko]), ov(med[ky]) rng[ky], early, yratio, ov(med[kg]) rng[kg], ratio, us(rping[n]) " / " us(rload[n])
            }
        }
        for (j = 1; j <= nn; j++) if (retried[ns[j]]) printf "\nnote: N=%d: %d gang run(s) needed a retry (a job failed, e.g. gangd dropped a node silent 2 s in a barrier; see n%d/node0/tries.jsonl)\n", ns[j], retried[ns[j]], ns[j]
        for (k in bad) printf "\nnote: %d run(s) of %s left out (ok 0: a job failed, a node did not report, or the starts spread more than LEAD)\n", bad[k], k
    }' >"$table"
echo
cat "$table"
step "results: $results, $runs, $table"
