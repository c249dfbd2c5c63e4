#!/usr/bin/env bash
# Runs the cargo-fuzz targets of every decoder that reads untrusted bytes
# (docs/fuzzing.md lists them and what each checks).
#
#   scripts/fuzz.sh [--runs N | --time S] [TARGET...]
#
# Two fuzz crates, each its own workspace: coordinator/fuzz (gangd's wire,
# knobs, PMI and trace decoders) and fuzz/ (the node daemon's and the
# runtime library's). Both build with the stable toolchain through
# RUSTC_BOOTSTRAP (cargo-fuzz needs nightly flags); cargo-fuzz is installed
# if missing. Each target runs once, on one core (no -jobs/-workers), for N
# inputs (default 20000) or S seconds, from its committed seeds plus the
# corpus earlier runs grew, kept outside the repo in $FUZZ_CACHE
# (~/.cache/scx_gang/fuzz): reruns build on them. Per target it prints
# inputs executed, exec/s, corpus size and crashes; a crash (or an input
# over the memory limits) makes the script exit 1 after the other targets,
# with the reproducer's path in the output.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

FUZZ_CACHE=${FUZZ_CACHE:-$CACHE/fuzz}
CRATES=(coordinator/fuzz fuzz)
# One input may allocate at most this much at once (a decoder that sizes a
# buffer from the input fails here), and a run this much in all.
MALLOC_LIMIT_MB=256
RSS_LIMIT_MB=2048

limit=(-runs=20000)
wanted=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --runs) limit=("-runs=${2:?--runs needs a number}"); shift 2 ;;
        --time) limit=("-max_total_time=${2:?--time needs seconds}"); shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) die "unknown option $1 (scripts/fuzz.sh [--runs N | --time S] [TARGET...])" ;;
        *) wanted+=("$1"); shift ;;
    esac
done

export RUSTC_BOOTSTRAP=1 BPF_CLANG=${BPF_CLANG:-clang-19}
# The fuzz crates have their own target dirs (fuzz flags differ), kept in
# the cache so that a fresh clone on this machine rebuilds only our crates
# (a cold build of both, BPF toolchain crates included, takes 10-20 min).
unset CARGO_TARGET_DIR
target_dir() { echo "$FUZZ_CACHE/target/${1//\//-}"; }

if ! cargo fuzz --version >/dev/null 2>&1; then
    step "installing cargo-fuzz (cargo install, a few minutes once)"
    cargo install cargo-fuzz
fi

targets_of() { sed -n 's/^name = "\(.*\)"$/\1/p' "$1/Cargo.toml" | tail -n +2; }

# Which crate each wanted target lives in; all targets if none named.
declare -A crate_of
for crate in "${CRATES[@]}"; do
    for t in $(targets_of "$crate"); do crate_of[$t]=$crate; done
done
if [[ ${#wanted[@]} -eq 0 ]]; then
    for crate in "${CRATES[@]}"; do wanted+=($(targets_of "$crate")); done
fi
for t in "${wanted[@]}"; do
    [[ -n ${crate_of[$t]:-} ]] || die "no fuzz target $t (known: ${!crate_of[*]})"
done

for crate in "${CRATES[@]}"; do
    needed=0
    for t in "${wanted[@]}"; do [[ ${crate_of[$t]} == "$crate" ]] && needed=1; done
    [[ $needed == 1 ]] || continue
    step "building the fuzz targets of $crate (cargo fuzz build; a cold build takes minutes)"
    (cd "$crate" && cargo fuzz build --target-dir "$(target_dir "$crate")")
done

failed=()
for t in "${wanted[@]}"; do
    crate=${crate_of[$t]}
    bin=$(target_dir "$crate")/x86_64-unknown-linux-gnu/release/$t
    corpus=$FUZZ_CACHE/corpus/$t
    artifacts=$FUZZ_CACHE/artifacts/$t
    log=$FUZZ_CACHE/logs/$t.log
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    step "fuzzing $t (${limit[*]}; corpus $corpus)"
    start=$SECONDS
    rc=0
    "$bin" "${limit[@]}" -print_final_stats=1 -timeout=10 \
        -malloc_limit_mb=$MALLOC_LIMIT_MB -rss_limit_mb=$RSS_LIMIT_MB \
        -artifact_prefix="$artifacts/" "$corpus" "$crate/seeds/$t" >"$log" 2>&1 || rc=$?
    stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    rate=$(stat average_exec_per_sec)
    [[ $rate != 0 ]] || rate="(<1s)" # libFuzzer divides by whole seconds
    printf '%-14s inputs %-10s exec/s %-8s time %4ss corpus %-6s crashes %s\n' \
        "$t" "$(stat number_of_executed_units)" "$rate" \
        "$((SECONDS - start))" "$(find "$corpus" -type f | wc -l)" \
        "$([[ $rc == 0 ]] && echo 0 || echo 1)"
    if [[ $rc != 0 ]]; then
        failed+=("$t")
        grep -E '^==[0-9]+==|panicked at|SUMMARY|Test unit written to' "$log" | head -8 >&2 || true
        warn "$t failed (exit $rc); full log $log"
        warn "reproduce: (cd $crate && RUSTC_BOOTSTRAP=1 cargo fuzz run --target-dir $(target_dir "$crate") $t $(sed -n 's/.*Test unit written to //p' "$log" | tail -1))"
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    die "fuzzing found crashes in: ${failed[*]}"
fi
step "fuzzing: no crash in ${#wanted[@]} targets"
