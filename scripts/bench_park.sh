#!/usr/bin/env bash
# Where a park's time goes (issue 12): boots one node (1 vCPU, like the
# cluster's) with the park_bench scenario and prints `scx_gang park-bench`'s
# tables: under the kernel's scheduler, under scx_gang, and on a gang with
# a TCP socket (tests/vm/scenarios/park_bench.sh). About 3 minutes.
#
#   scripts/bench_park.sh [--out DIR] [--vcpus V] [--no-build]
#
# The VM is stopped by scripts/cluster.sh, on failure too.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

OUT=target/bench/park VCPUS=1 BUILD=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --out) OUT=$2; shift 2 ;;
        --vcpus) VCPUS=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
done
[[ $VCPUS =~ ^[1-8]$ ]] || die "--vcpus: 1 to 8"
BIN=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release
if ((BUILD)); then
    step "building scx_gang and burn"
    (export BPF_CLANG=${BPF_CLANG:-clang-19}; (cargo build --release -p scx_gang --bin scx_gang && cargo build --release -p gang-workloads --bin burn) >&2)
fi
IMG=target/vm/park_bench.cpio.gz
step "building the image"
scripts/image.sh "$IMG" --bin "$BIN/scx_gang" --bin "$BIN/burn" --scenarios tests/vm/scenarios >&2
rm -rf "$OUT"
step "booting one node ($VCPUS vCPU)"
scripts/cluster.sh --image "$IMG" --scenario park_bench --nodes 1 --vcpus "$VCPUS" --mttcg \
    --timeout 400 --out "$OUT" >&2 || die "the park_bench scenario failed (see $OUT)"
for f in eevdf gang socket; do
    echo "== $f"
    cat "$OUT/node0/$f.txt"
done
