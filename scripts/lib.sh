# shellcheck shell=bash
# Shared helpers for the scx_gang VM test bed scripts. Source it, do not run it.

SCRIPTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPTS_DIR/.." && pwd)
CACHE=${SCX_GANG_CACHE:-$HOME/.cache/scx_gang}
KERNEL_DIR=$CACHE/kernel/current

# Progress to stderr so stdout stays usable for data.
_ts() { date +%H:%M:%S; }
step() { printf '[%s] %s\n' "$(_ts)" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$(_ts)" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$(_ts)" "$*" >&2; exit 1; }

need_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "missing command '$c' (run scripts/setup.sh)"
    done
}

# The kernel the VMs boot, as set up by setup.sh.
need_kernel() {
    [[ -f $KERNEL_DIR/vmlinuz && -f $KERNEL_DIR/config && -f $KERNEL_DIR/version ]] ||
        die "no kernel in $KERNEL_DIR (run scripts/setup.sh)"
}

# build_image [--mpi] OUT [BIN...]: installs the test bed, builds the
# workspace and packs the VM image with the scenarios and the project's
# binaries BIN (default: scx_gang burn sigswitch; the cluster benchmarks add
# gangd, gang, runas, ring; a BIN with a '/' is a path, e.g. a peer
# scheduler from scripts/peers.sh). With --mpi it also builds the MPI test programs
# (scripts/build_mpi.sh) and adds them (target/mpi/mpi_* with MPICH,
# target/mpi/ompi_* with Open MPI), Debian's NetPIPE (NPmpich2) and hpcc (Open
# MPI), the PMIx server (gang-pmix-server) and what both MPIs load at run
# time (image.sh --mpi --openmpi).
build_image() {
    local out b bins=() mpi=()
    if [[ ${1:-} == --mpi ]]; then
        mpi=(--mpi --openmpi)
        shift
    fi
    out=$1
    shift
    (($#)) || set -- scx_gang burn sigswitch
    export BPF_CLANG=${BPF_CLANG:-clang-19}
    "$SCRIPTS_DIR/setup.sh"
    step "building"
    # Run from a cargo test (tests/vm_eval.rs), the environment carries the
    # test's package variables (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...);
    # ring's build script reruns when they change, which rebuilt ring,
    # rustls and the workspace (2 min) and again at the next plain build.
    (
        cd "$REPO_ROOT"
        for v in $(compgen -e); do
            [[ $v =~ ^(CARGO_(MANIFEST_|PKG_|CRATE_|BIN_|PRIMARY_PACKAGE|TARGET_TMPDIR)|OUT_DIR$) ]] && unset "$v"
        done
        cargo build --release --workspace
    )
    for b in "$@"; do
        if [[ $b == */* ]]; then   # a path: a binary from elsewhere (a peer scheduler)
            [[ -x $b ]] || die "$b is not an executable file"
            bins+=(--bin "$b")
            continue
        fi
        [[ -x $REPO_ROOT/target/release/$b ]] || die "target/release/$b missing after the build"
        bins+=(--bin "$REPO_ROOT/target/release/$b")
    done
    if ((${#mpi[@]})); then
        "$SCRIPTS_DIR/build_mpi.sh"
        for b in "$REPO_ROOT"/target/mpi/mpi_* "$REPO_ROOT"/target/mpi/ompi_*; do
            [[ $b == *.tmp ]] || bins+=(--bin "$b")
        done
        for b in /usr/bin/NPmpich2 /usr/bin/hpcc; do
            [[ -x $b ]] || die "$b missing (run scripts/setup.sh)"
            bins+=(--bin "$b")
        done
        bins+=(--bin "$REPO_ROOT/target/release/gang-pmix-server")
    fi
    mkdir -p "$(dirname "$out")"
    "$SCRIPTS_DIR/image.sh" "$out" "${bins[@]}" "${mpi[@]}" --scenarios "$REPO_ROOT/tests/vm/scenarios"
}
