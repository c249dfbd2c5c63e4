#!/usr/bin/env bash
# The trace-driven simulator (sim/, docs/simulator.md): builds gang-sim and
# sweeps offered load 50-90 % over the Lublin-Feitelson workload (or an SWF
# trace), FCFS and EASY against gang scheduling on gangd's allocator under
# every allocation policy. Results in target/sim/ (results.csv, table.md,
# response.svg, slowdown.svg); any other argument goes to gang-sim, where a
# flag given again overrides these defaults.
#
#   scripts/sim.sh [--nodes 256] [--jobs 10000] [--mpl 2,4,6] [--swf trace.swf] ...
#
# At 4096 nodes x 4 CPUs, 100,000 jobs take 10-50 s per gang policy
# (docs/simulator.md, "Performance").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

step "building gang-sim"
BPF_CLANG=${BPF_CLANG:-clang-19} cargo build --release -p gang-sim
bin="${CARGO_TARGET_DIR:-target}/release/gang-sim"
step "simulating (progress below; the table at the end)"
"$bin" --jobs 10000 --mpl 2,4,6 --out target/sim "$@"
