#!/usr/bin/env bash
# The evaluation (issue 5): scx_gang against the schedulers people use today
# (EEVDF, scx_bpfland, signal-based gang switching, implicit coscheduling),
# on the VM cluster, side by side in one boot. tests/vm/scenarios/cluster_eval.sh
# has the method; gang-eval (eval/) turns its records into the answer.
#
#   scripts/eval.sh [--size reduced|full] [--policies "..."] [--workloads "..."]
#                   [--mpls "1 2 3"] [--reps R] [--rounds N] [--scale S] [--slot-ms MS]
#                   [--no-short] [--cap-s S] [--out DIR] [--no-build]
#                   [--report-only] [--quiet-wait S] [--probe] [--bpf-stats]
#   --size full (default): 3 repetitions, jobs 4x longer, every workload
#          including the MPI one (hours);
#          lone: each job alone (MPL 1), rt, allreduce and ep at scale 2
#          under dedicated, eevdf, bpfland and gang-strict, 4 rounds of 2
#          repetitions (8 in all), every rank under rankprobe: the lone-job
#          table (issue 15: what a job alone pays for scx_gang, and where
#          the time goes, ~25 min). NetPIPE
#          (--workloads netpipe) is not in it by default: under scx_bpfland
#          its polling rank starves the node agent of a one-vCPU node
#          (heartbeats lost, the node declared lost, the boot fails); run it
#          with --policies "dedicated eevdf gang-strict";
#          reduced: 1 repetition, half-length jobs of scale 1 (0.5-3 s
#          alone), the four SPMD workloads, MPL 1 and 3 (what the test
#          command runs, ~10 min; the MPI programs have their own cluster
#          test).
#   --rounds N: the policies' phases N times over, in turn, each with R
#          repetitions (N x R in all): a drift of the host over the boot
#          falls on every policy alike, not on the last phases (default 1;
#          4 for --size lone).
#   --cap-s S: a job still running S s after its submission is killed and
#          reported as capped (default 300): MPI ranks poll while they wait,
#          and three MPI jobs under a local scheduler can take hours.
#   --report-only: the report again from DIR's records.
#   --probe: every rank under rankprobe (on with --size lone).
#   --bpf-stats: the kernel counts the BPF schedulers' callbacks (runs and
#          time; kernel.bpf_stats_enabled, a few ns per callback): scx_gang
#          logs what each cost when it stops (boot/node*/scx_gang.*.log),
#          and each compute node lists what its scheduler's callbacks cost
#          (scx_gang's or scx_bpfland's) at each phase's end: DIR/bpf_cost.txt,
#          side by side in the lone-job table (lone.txt, bpf_cost.csv).
#
# The cluster: a head node (gangd, the front ends) and 2 compute nodes of one
# vCPU each, every node's qemu pinned to host core i % nproc (node 0 and
# node 2 share core 0 on a 2-core host; the head is idle but for gangd).
# Writes DIR (default target/eval/<size>)/{eval.log,results.csv,short.csv,
# summary.txt,*.svg}; the boot's files in DIR/boot/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

SIZE=full POLICIES= WORKLOADS= MPLS="1 2 3" REPS= ROUNDS= SCALE= WORK_PCT=100 SLOT_MS=100 SHORT=1 OUT= BUILD=1 CAP_S=300
BOOT=1 QUIET_WAIT=900 COMPUTE=2 PROBE=0 BPF_STATS=0
ALL_POLICIES="dedicated eevdf bpfland signal spinblock gang-off gang-strict gang-yield gang-timed gang-poll"
ALL_WORKLOADS="rt allreduce alltoall ep mpi_allreduce ompi_allreduce"
OTHER_WORKLOADS="mpi_ring netpipe"
while [[ $# -gt 0 ]]; do
    case $1 in
        --size) SIZE=$2; shift 2 ;;
        --policies) POLICIES=$2; shift 2 ;;
        --workloads) WORKLOADS=$2; shift 2 ;;
        --mpls) MPLS=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --scale) SCALE=$2; shift 2 ;;
        --slot-ms) SLOT_MS=$2; shift 2 ;;
        --no-short) SHORT=0; shift ;;
        --cap-s) CAP_S=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --report-only) BOOT=0; shift ;;
        --quiet-wait) QUIET_WAIT=$2; shift 2 ;;
        --probe) PROBE=1; shift ;;
        --bpf-stats) BPF_STATS=1; shift ;;
        -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
case $SIZE in
    full) : "${REPS:=3}" "${SCALE:=4}" "${WORKLOADS:=$ALL_WORKLOADS}" ;;
    reduced)
        : "${REPS:=1}" "${SCALE:=1}" "${WORKLOADS:=rt allreduce alltoall ep}"
        # Half-length jobs (0.5-3 s alone): the harness end to end, not
        # figures, inside the test command's time budget.
        WORK_PCT=50
        # MPL 2 takes the same paths as 3: left out to keep the test
        # command under its time budget.
        [[ $MPLS == "1 2 3" ]] && MPLS="1 3"
        ;;
    lone)
        : "${REPS:=2}" "${ROUNDS:=4}" "${SCALE:=2}" "${WORKLOADS:=rt allreduce ep}" "${POLICIES:=dedicated eevdf bpfland gang-strict}"
        [[ $MPLS == "1 2 3" ]] && MPLS=1
        SHORT=0 PROBE=1
        ;;
    *) die "--size: reduced, full or lone, not $SIZE" ;;
esac
: "${POLICIES:=$ALL_POLICIES}" "${WORKLOADS:=$ALL_WORKLOADS}" "${OUT:=target/eval/$SIZE}"
for p in $POLICIES; do [[ " $ALL_POLICIES " == *" $p "* ]] || die "--policies: unknown policy $p (known: $ALL_POLICIES)"; done
[[ " $POLICIES " == *" dedicated "* ]] || die "--policies must include dedicated: every slowdown is against it"
for w in $WORKLOADS; do [[ " $ALL_WORKLOADS $OTHER_WORKLOADS " == *" $w "* ]] || die "--workloads: unknown workload $w"; done
for m in $MPLS; do [[ $m =~ ^[1-4]$ ]] || die "--mpls: $m is not an MPL of 1 to 4 (gangd's mpl_max)"; done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
: "${ROUNDS:=1}"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
[[ $SCALE =~ ^[1-9][0-9]*$ ]] || die "--scale must be a positive integer"
[[ $SLOT_MS =~ ^[0-9]+$ && $SLOT_MS -ge 10 ]] || die "--slot-ms must be an integer >= 10"
[[ $CAP_S =~ ^[0-9]+$ && $CAP_S -ge 10 ]] || die "--cap-s must be an integer >= 10"
need_cmd awk

BOOTDIR=$OUT/boot IMG=$OUT/image.cpio.gz
mkdir -p "$OUT"
TAIL_PID=
trap '[[ -z $TAIL_PID ]] || kill $TAIL_PID 2>/dev/null' EXIT

if ((BOOT)); then
    if ((BUILD)) || [[ ! -f $IMG ]]; then
        BPFLAND=$("$SCRIPTS_DIR/peers.sh")
        build_image --mpi "$IMG" scx_gang gangd gang runas rt allreduce alltoall ep rankprobe "$BPFLAND"
    fi
    # Seconds the boot may take: generously, per job a launch and the jobs'
    # work at the worst slowdown expected (EEVDF on fine-grained jobs).
    np=$(wc -w <<<"$POLICIES") nw=$(wc -w <<<"$WORKLOADS") sm=0
    for m in $MPLS; do sm=$((sm + m)); done
    t=$((600 + ROUNDS * np * 90 + ROUNDS * REPS * np * (nw * (sm * 20 + 15 * sm * SCALE) + SHORT * 120 * SCALE)))
    step "evaluation ($SIZE): policies [$POLICIES], workloads [$WORKLOADS], MPL [$MPLS], $ROUNDS round(s) x $REPS rep(s), scale $SCALE, slot $SLOT_MS ms"
    step "booting a head node + $COMPUTE compute nodes x 1 vCPU, pinned to host cores i % $(nproc) (at most $((t / 60)) min; host load $(cut -d' ' -f1-3 /proc/loadavg))"
    rm -rf "$BOOTDIR"
    mkdir -p "$BOOTDIR"
    # Progress: the scenario's "eval:" lines from node 0's console.
    exec 3>&2
    tail -n +1 -F "$BOOTDIR/node0.console.log" \
        2>/dev/null > >(grep --line-buffered -a 'eval: ' | sed -u 's/^.*eval: /    /' >&3) &
    TAIL_PID=$!
    rc=0
    "$SCRIPTS_DIR/cluster.sh" --image "$IMG" --scenario cluster_eval --out "$BOOTDIR" \
        --nodes $((COMPUTE + 1)) --vcpus 1 --mem 768 --pin --timeout "$t" --wait-quiet "$QUIET_WAIT" \
        --append "scenario_timeout=$((t - 60)) env.EVAL_POLICIES=${POLICIES// /,} env.EVAL_WORKLOADS=${WORKLOADS// /,} env.EVAL_MPLS=${MPLS// /,} env.EVAL_REPS=$REPS env.EVAL_ROUNDS=$ROUNDS env.EVAL_SCALE=$SCALE env.EVAL_WORK_PCT=$WORK_PCT env.EVAL_SLOT_MS=$SLOT_MS env.EVAL_SHORT=$SHORT env.EVAL_SIZE=$SIZE env.EVAL_CAP_S=$CAP_S env.EVAL_PROBE=$PROBE env.EVAL_BPF_STATS=$BPF_STATS" ||
        rc=$?
    sleep 1
    kill "$TAIL_PID" 2>/dev/null || true
    wait "$TAIL_PID" 2>/dev/null || true
    TAIL_PID=
    [[ -f $BOOTDIR/node0/eval.log ]] || die "the boot left no eval.log (rc $rc): see $BOOTDIR/node0.console.log"
    cp "$BOOTDIR/node0/eval.log" "$OUT/eval.log"
    # --bpf-stats: the compute nodes' schedulers' own cost, per phase.
    rm -f "$OUT/bpf_cost.txt"
    for f in "$BOOTDIR"/node*/bpf_cost.txt; do
        [[ -f $f ]] && cat "$f" >>"$OUT/bpf_cost.txt"
    done
    echo "meta host_cores=$(nproc) pinned=node_i->core_i%$(nproc) host=$(uname -r)" >>"$OUT/eval.log"
    ((rc == 0)) || warn "the boot failed (rc $rc): the report shows what completed; see $BOOTDIR"
fi

[[ -f $OUT/eval.log ]] || die "no $OUT/eval.log (run without --report-only first)"
EVAL=$REPO_ROOT/target/release/gang-eval
[[ -x $EVAL ]] || (cd "$REPO_ROOT" && cargo build --release -p gang-eval)
step "report"
"$EVAL" report "$OUT/eval.log" --out "$OUT" --policies "$POLICIES" --target-metric makespan-ratio
if [[ " $MPLS " == *" 1 "* ]] && ((PROBE)); then
    step "the lone-job table (MPL 1, against eevdf and bpfland)"
    cost=()
    [[ -s $OUT/bpf_cost.txt ]] && cost=(--bpf-cost "$OUT/bpf_cost.txt")
    "$EVAL" lone "$OUT/eval.log" --out "$OUT" "${cost[@]}"
fi
step "figures and tables in $OUT: results.csv short.csv summary.txt $(cd "$OUT" && ls ./*.svg 2>/dev/null | tr '\n' ' ')"
check=(--policies "$POLICIES" --workloads "$WORKLOADS" --mpls "$MPLS" --reps "$((REPS * ROUNDS))")
((SHORT)) && check+=(--short)
if grep -q '^# FAILED' "$OUT/eval.log"; then
    grep '^# FAILED' "$OUT/eval.log" >&2
    die "jobs failed (above)"
fi
if ! "$EVAL" check "$OUT/eval.log" "${check[@]}"; then
    grep -q '^# CAPPED' "$OUT/eval.log" || die "the evaluation is incomplete: cells are missing or jobs failed (above)"
    grep '^# CAPPED' "$OUT/eval.log" >&2
    warn "jobs were killed at the cap (above): their cells are incomplete (marked ! in the summary)"
    exit 3
fi
step "every cell complete, every job verified its results"
