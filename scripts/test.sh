#!/usr/bin/env bash
# The one test command: installs what the tests need (Debian packages, the
# sched_ext kernel), builds everything, runs the host tests and then the
# acceptance tests inside VMs booting the sched_ext kernel, and last a short
# fuzz pass over the decoders of untrusted bytes (scripts/fuzz.sh).
#
#   scripts/test.sh            everything
#   scripts/test.sh --host     host tests only (no VM)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

export BPF_CLANG=${BPF_CLANG:-clang-19}
short_fuzz() {
    step "short fuzz pass: 20k inputs per decoder target (docs/fuzzing.md; the cold build of the fuzz crates is the long part)"
    "$SCRIPTS_DIR/fuzz.sh" --runs 20000
}

step "setting up the test bed (packages, sched_ext kernel)"
"$SCRIPTS_DIR/setup.sh"

step "building the workspace (a cold build of the BPF toolchain crates takes minutes)"
cargo build --release --workspace --all-targets

if [[ ${1:-} == --host ]]; then
    step "host tests"
    cargo test --release --workspace
    short_fuzz
    exit
fi

step "peer schedulers for the evaluation (scx_bpfland from crates.io, cached; cold ~10 min)"
"$SCRIPTS_DIR/peers.sh" >/dev/null

# Host tests and VM tests in one cargo run, so its summary covers both. The
# VM tests are #[ignore]d for plain `cargo test`; they run one at a time:
# tests/vm.rs boots one node per test, tests/vm_cluster.rs a cluster of four
# (a head node running gangd and three compute nodes, ~2 min per test),
# tests/vm_eval.rs the evaluation at its reduced size (scripts/eval.sh).
step "host tests, then VM acceptance tests (each boots one VM, the cluster tests four)"
cargo test --release --workspace --no-fail-fast -- --include-ignored --test-threads=1

short_fuzz
