#!/usr/bin/env bash
# The peer schedulers the evaluation compares scx_gang with, installed from
# crates.io into the cache (outside the repo, so a rerun or a fresh clone
# reuses them): scx_bpfland, a modern general-purpose sched_ext scheduler.
# Idempotent; a cold `cargo install` takes about 10 minutes.
#
#   scripts/peers.sh            install what is missing, print the binary's path
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# Pinned: the figures name the version they were measured with.
BPFLAND_VERSION=1.1.4
ROOT=$CACHE/peers/scx_bpfland-$BPFLAND_VERSION
BIN=$ROOT/bin/scx_bpfland

if [[ -x $BIN ]]; then
    step "scx_bpfland $BPFLAND_VERSION already installed in $ROOT"
else
    need_cmd cargo
    export BPF_CLANG=${BPF_CLANG:-clang-19}
    step "installing scx_bpfland $BPFLAND_VERSION from crates.io into $ROOT (cold: ~10 min)"
    # A build directory of its own in the cache: a rerun after an interruption
    # does not start from scratch.
    CARGO_TARGET_DIR=$CACHE/peers/build nice -n 10 cargo install --locked --quiet \
        --root "$ROOT.tmp" --version "=$BPFLAND_VERSION" scx_bpfland ||
        die "cargo install scx_bpfland $BPFLAND_VERSION failed (needs clang-19 and libelf-dev: scripts/setup.sh)"
    rm -rf "$ROOT"
    mv "$ROOT.tmp" "$ROOT"
    rm -rf "$CACHE/peers/build"
    step "scx_bpfland installed: $BIN"
fi
echo "$BIN"
