#!/usr/bin/env bash
# Build the MPI test programs tests/mpi/*.c (-O2) twice: with MPICH's mpicc
# into target/mpi/mpi_<name> (ring.c -> target/mpi/mpi_ring) and with Open
# MPI's into target/mpi/ompi_<name>. (Compilers by name: Debian's plain
# `mpicc` is whichever MPI the alternatives chose.) Idempotent: a
# program newer than its sources is left alone. Prints nothing on stdout.
# usage: scripts/build_mpi.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"

(($# == 0)) || { echo "usage: $0" >&2; exit 2; }
SRC=$REPO_ROOT/tests/mpi
OUT=$REPO_ROOT/target/mpi
mkdir -p "$OUT"
# prefix:compiler
for pc in mpi:mpicc.mpich ompi:mpicc.openmpi; do
    prefix=${pc%%:*} cc=${pc#*:}
    command -v "$cc" >/dev/null 2>&1 ||
        die "$cc not found: the MPI programs need MPICH and Open MPI (run scripts/setup.sh)"
    for c in "$SRC"/*.c; do
        name=${prefix}_$(basename "$c" .c)
        bin=$OUT/$name
        fresh=1
        for dep in "$c" "$SRC"/*.h "$0"; do
            [[ -e $dep && $dep -nt $bin ]] && fresh=0
        done
        if [[ -x $bin ]] && ((fresh)); then
            continue
        fi
        step "$cc $c -> target/mpi/$name"
        "$cc" -O2 -Wall -Wextra -o "$bin.tmp" "$c" -lm || die "$cc failed on $c"
        mv "$bin.tmp" "$bin"
    done
done
