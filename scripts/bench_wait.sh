#!/usr/bin/env bash
# The wait-policy benchmark (issue 4; seed 003's question): a ring job of one
# rank per compute node passes a 64-byte token while a CPU-bound process
# competes for every node's one CPU, under EEVDF (no sched_ext scheduler:
# implicit co-scheduling) and under scx_gang (gangd, both jobs in their own
# slots), for each wait policy of the gang runtime library (ring --wait):
# block, spin, adaptive, inslot. Everything in one boot, side by side
# (tests/vm/scenarios/cluster_waitbench.sh has the method). A head node 0
# runs gangd and the front ends; nodes 1..N compute; 1 vCPU each, qemu pinned
# to host core i % nproc.
#
#   scripts/bench_wait.sh [--nodes 2] [--policies "block spin:200 adaptive inslot:200"]
#                         [--seconds 6] [--slot-ms 50] [--reps 2] [--out DIR] [--no-build]
#                         [--tables-only]   (the table again from DIR's boot)
#
# Writes DIR (default target/bench/wait)/{wait.csv,table.txt}.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

NC=2 POLICIES="block spin:200 adaptive inslot:200" SECS=6 SLOT=50 REPS=2 OUT=target/bench/wait BUILD=1 BOOT=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --nodes) NC=$2; shift 2 ;;
        --policies) POLICIES=$2; shift 2 ;;
        --seconds) SECS=$2; shift 2 ;;
        --slot-ms) SLOT=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --tables-only) BOOT=0; shift ;;
        -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
done
[[ $NC =~ ^[2-8]$ ]] || die "--nodes: 2 to 8 compute nodes (a ring needs two)"
[[ $SECS =~ ^[1-9][0-9]*$ ]] || die "--seconds must be a positive integer"
[[ $SLOT =~ ^[1-9][0-9]*$ ]] || die "--slot-ms must be a positive integer"
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
for p in $POLICIES; do [[ $p =~ ^(block|adaptive|spin(:[0-9]+)?|inslot(:[0-9]+)?)$ ]] || die "--policies: $p is not a wait policy"; done

IMG=$OUT/image.cpio.gz
mkdir -p "$OUT"
if ((BOOT == 0)); then
    :
elif ((BUILD)) || [[ ! -f $IMG ]]; then
    build_image "$IMG" scx_gang burn ring gangd gang runas
fi

np=$(wc -w <<<"$POLICIES")
timeout=$((300 + REPS * np * 2 * (SECS + 25)))
if ((BOOT)); then
step "booting $((NC + 1)) node(s) x 1 vCPU (head + $NC computing), pinned; $REPS x $np policies x 2 schedulers of $SECS s (at most $((timeout / 60)) min)"
rm -rf "$OUT/run"
# Progress: the scenario's "waitbench:" lines from node 0's console.
exec 3>&2   # the tail's 2>/dev/null must not reach the filter's stderr
tail -n +1 -F "$OUT/run/node0.console.log" \
    2>/dev/null > >(grep --line-buffered -a 'waitbench: ' | sed -u 's/^.*waitbench: /    /' >&3) &
TAIL_PID=$!   # tail's own PID: when it ends, grep and sed see EOF
trap 'kill $TAIL_PID 2>/dev/null || true' EXIT
rc=0
"$SCRIPTS_DIR/cluster.sh" --image "$IMG" --scenario cluster_waitbench --out "$OUT/run" \
    --nodes $((NC + 1)) --vcpus 1 --mem 768 --pin --timeout "$timeout" \
    --append "env.WAIT_POLICIES=${POLICIES// /,} env.WAIT_SECONDS=$SECS env.WAIT_SLOT_MS=$SLOT env.WAIT_REPS=$REPS" || rc=$?
sleep 1
((rc == 0)) || warn "the boot failed (rc $rc); the runs that completed are still counted (see $OUT/run)"
fi

res=$OUT/run/node0/wait.jsonl
[[ -s $res ]] || die "no results in $res"
csv=$OUT/wait.csv table=$OUT/table.txt
echo "sched,policy,rep,rounds_per_s,rounds,waits,spin_hits,blocks,spin_ms" >"$csv"
LC_ALL=C awk '
    function f(name,   v) { v = $0; if (index(v, "\"" name "\":") == 0) return ""; sub(".*\"" name "\":\"?", "", v); sub("[\",}].*", "", v); return v }
    { printf "%s,%s,%s,%s,%s,%s,%s,%s,%.1f\n", f("sched"), f("policy"), f("rep"), f("rate"), f("rounds"), f("waits"), f("spin_hits"), f("blocks"), f("spin_ns") / 1e6 }' "$res" >>"$csv"
tail -n +2 "$csv" | LC_ALL=C awk -F, -v nc="$NC" -v secs="$SECS" -v slot="$SLOT" '
    function median(list,   n, a, i, j, t) {
        n = split(list, a, " "); if (n == 0) return 0
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { k = $1 SUBSEP $2; R[k] = R[k] " " $4; W[k] += $6; H[k] += $7; if (!($2 in seenp)) { seenp[$2] = 1; pol[++np] = $2 } }
    END {
        printf "Wait-policy benchmark: a ring of %d ranks (one per compute node, 64-byte token) against a CPU-bound competitor on the one vCPU of every node; %d s per run, medians over repetitions.\n", nc, secs
        printf "eevdf: no sched_ext scheduler (implicit co-scheduling); scx_gang: gangd, ring and competitor in their own slots (slot_ms %d, barrier strict).\n", slot
        printf "Emulated VMs (TCG), qemu pinned to host cores: absolute rates are not native; compare the rows.\n\n"
        printf "%-12s | %-22s %-10s | %-22s %-10s | %s\n", "policy", "eevdf rounds/s", "spin hits", "scx_gang rounds/s", "spin hits", "scx_gang / eevdf"
        for (i = 1; i <= np; i++) {
            p = pol[i]; e = median(R["eevdf" SUBSEP p]); g = median(R["scx_gang" SUBSEP p])
            he = W["eevdf" SUBSEP p] ? sprintf("%.0f %%", 100 * H["eevdf" SUBSEP p] / W["eevdf" SUBSEP p]) : "-"
            hg = W["scx_gang" SUBSEP p] ? sprintf("%.0f %%", 100 * H["scx_gang" SUBSEP p] / W["scx_gang" SUBSEP p]) : "-"
            printf "%-12s | %-22s %-10s | %-22s %-10s | %s\n", p, sprintf("%.1f", e), he, sprintf("%.1f", g), hg, (e > 0 ? sprintf("%.2fx", g / e) : "-")
        }
    }' >"$table"
echo
cat "$table"
step "results: $csv, $table"
