#!/usr/bin/env bash
# The node benchmark, two boots:
#  1. overhead: one node with ONE vCPU pinned to its own host core, guest
#     time counted in instructions (qemu -icount: timings do not depend on
#     host load, so differences of a fraction of a percent are real),
#     measuring side by side scx_gang's per-switch overhead against
#     SIGSTOP/SIGCONT and cgroup-freezer gang switching (seed 000, Table 4);
#  2. latency: one node with two vCPUs, scx_gang's switch latency (switch to
#     last CPU running its new owner) and overlap at each slot length.
# Prints both tables; results in target/bench/.
#
#   scripts/bench.sh [--seconds D] [--reps N] [--slots "10 50 200"]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

args=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --seconds) args+=("env.BENCH_SECONDS=$2"); shift 2 ;;
        --reps) args+=("env.BENCH_REPS=$2"); shift 2 ;;
        --slots) args+=("env.BENCH_SLOTS=${2// /,}"); shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done

build_image target/bench/image.cpio.gz

step "overhead: 1 vCPU pinned to host core 0, instruction-counted time (several minutes)"
"$SCRIPTS_DIR/cluster.sh" --image target/bench/image.cpio.gz --scenario bench --out target/bench/overhead \
    --vcpus 1 --pin --icount 0 --timeout 1500 --append "env.BENCH_MODE=overhead ${args[*]:-}"
step "latency: 2 vCPUs"
"$SCRIPTS_DIR/cluster.sh" --image target/bench/image.cpio.gz --scenario bench --out target/bench/latency \
    --vcpus 2 --mttcg --timeout 600 --append "env.BENCH_MODE=latency ${args[*]:-}"

echo
cat target/bench/overhead/node0/bench.txt
cat target/bench/latency/node0/latency.txt
