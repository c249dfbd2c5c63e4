#!/usr/bin/env bash
# Build the MPI test programs tests/mpi/*.c with MPICH's mpicc (-O2) into
# (mpicc.mpich by name: with Open MPI installed too, Debian's plain
# `mpicc` may be Open MPI's, whose programs cannot use PMI-1)
# target/mpi/mpi_<name> (ring.c -> target/mpi/mpi_ring). Idempotent: a
# program newer than its sources is left alone. Prints nothing on stdout.
# usage: scripts/build_mpi.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"

(($# == 0)) || { echo "usage: $0" >&2; exit 2; }
command -v mpicc.mpich >/dev/null 2>&1 ||
    die "mpicc.mpich not found: the MPI programs need MPICH (run scripts/setup.sh)"
SRC=$REPO_ROOT/tests/mpi
OUT=$REPO_ROOT/target/mpi
mkdir -p "$OUT"
for c in "$SRC"/*.c; do
    name=mpi_$(basename "$c" .c)
    bin=$OUT/$name
    fresh=1
    for dep in "$c" "$SRC"/*.h "$0"; do
        [[ -e $dep && $dep -nt $bin ]] && fresh=0
    done
    if [[ -x $bin ]] && ((fresh)); then
        continue
    fi
    step "mpicc.mpich $c -> target/mpi/$name"
    mpicc.mpich -O2 -Wall -Wextra -o "$bin.tmp" "$c" -lm || die "mpicc.mpich failed on $c"
    mv "$bin.tmp" "$bin"
done
