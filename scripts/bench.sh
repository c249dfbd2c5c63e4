#!/usr/bin/env bash
# The node benchmark: boots one 2-vCPU node and measures, side by side in
# that one boot, scx_gang's per-switch overhead against SIGSTOP/SIGCONT and
# cgroup-freezer gang switching (seed 000, Table 4 method) and scx_gang's
# switch latency. Prints the table; results in target/bench/node/.
#
#   scripts/bench.sh [--work UNITS] [--reps N] [--slots "10 50 200"]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

args=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --work) args+=("env.BENCH_WORK=$2"); shift 2 ;;
        --reps) args+=("env.BENCH_REPS=$2"); shift 2 ;;
        --slots) args+=("env.BENCH_SLOTS=${2// /,}"); shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done

export BPF_CLANG=${BPF_CLANG:-clang-19}
"$SCRIPTS_DIR/setup.sh"
step "building"
cargo build --release --workspace
out=target/bench/node
mkdir -p target/bench
"$SCRIPTS_DIR/image.sh" target/bench/image.cpio.gz \
    --bin target/release/scx_gang --bin target/release/burn --bin target/release/sigswitch \
    --scenarios tests/vm/scenarios
step "running the benchmark in a VM (several minutes under emulation)"
"$SCRIPTS_DIR/cluster.sh" --image target/bench/image.cpio.gz --scenario bench --out "$out" \
    --vcpus 2 --mttcg --timeout 900 --append "${args[*]:-}"
cat "$out/node0/bench.txt"
