#!/usr/bin/env bash
# The node benchmark, three boots:
#  1. overhead: one node with ONE vCPU pinned to its own host core, guest
#     time counted in instructions (qemu -icount: timings do not depend on
#     host load, so differences of a fraction of a percent are real),
#     measuring side by side scx_gang's per-switch overhead against
#     SIGSTOP/SIGCONT and cgroup-freezer gang switching (seed 000, Table 4);
#  2. latency: one node with two vCPUs, scx_gang's switch latency (switch to
#     last CPU running its new owner) and overlap at each slot length;
#  3. lone: one node with two vCPUs, instruction-counted time, a job alone
#     (rt, allreduce, ep over loopback) under EEVDF, scx_bpfland and
#     scx_gang in turn, and each scheduler's BPF cost (issue 15;
#     tests/vm/scenarios/lone_bench.sh). gang-eval lone makes its table.
#  4. netpipe: the same on one node of two vCPUs in real time (multi-threaded
#     TCG): NetPIPE alone (NPmpich2, MPICH's launcher starting its two
#     ranks, TCP over lo), 50 times the cluster evaluation's repetitions
#     so that MPI's start-up is not most of the job; the BPF cost over one
#     more NetPIPE job per sched_ext phase. Its ranks poll, which
#     instruction-counted time cannot show (lone_bench.sh says why). A
#     boot the emulator's text-patching fault ends is booted again (3 at
#     most).
# Prints the tables; results in target/bench/.
#
#   scripts/bench.sh [--only overhead|latency|lone|netpipe]... [--seconds D] [--reps N]
#                    [--slots "10 50 200"] [--lone-rounds R] [--lone-vcpus V]
#                    [--netpipe-rounds R]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

args=() only=() lone_rounds=3 lone_vcpus=2 netpipe_rounds=5
while [[ $# -gt 0 ]]; do
    case $1 in
        --only)
            [[ ${2:-} =~ ^(overhead|latency|lone|netpipe)$ ]] || die "--only takes overhead, latency, lone or netpipe"
            only+=("$2"); shift 2 ;;
        --lone-rounds)
            [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--lone-rounds takes a whole number >= 1"
            lone_rounds=$2; shift 2 ;;
        --lone-vcpus)
            [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--lone-vcpus takes a whole number >= 1"
            lone_vcpus=$2; shift 2 ;;
        --netpipe-rounds)
            [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--netpipe-rounds takes a whole number >= 1"
            netpipe_rounds=$2; shift 2 ;;
        --seconds) args+=("env.BENCH_SECONDS=$2"); shift 2 ;;
        --reps) args+=("env.BENCH_REPS=$2"); shift 2 ;;
        --slots) args+=("env.BENCH_SLOTS=${2// /,}"); shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done

((${#only[@]})) || only=(overhead latency lone netpipe)
want() { [[ " ${only[*]} " == *" $1 "* ]]; }

BPFLAND=$("$SCRIPTS_DIR/peers.sh")
# --mpi and MPICH's launcher (hydra: mpiexec and its proxy) for the lone
# boot's NetPIPE.
build_image --mpi target/bench/image.cpio.gz scx_gang burn sigswitch rt allreduce ep rankprobe "$BPFLAND" \
    /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy

if want overhead; then
    step "overhead: 1 vCPU pinned to host core 0, instruction-counted time (several minutes)"
    "$SCRIPTS_DIR/cluster.sh" --image target/bench/image.cpio.gz --scenario bench --out target/bench/overhead \
        --vcpus 1 --pin --icount 0 --timeout 1500 --append "env.BENCH_MODE=overhead ${args[*]:-}"
fi
if want latency; then
    step "latency: 2 vCPUs"
    "$SCRIPTS_DIR/cluster.sh" --image target/bench/image.cpio.gz --scenario bench --out target/bench/latency \
        --vcpus 2 --mttcg --timeout 600 --append "env.BENCH_MODE=latency ${args[*]:-}"
fi
if want lone; then
    step "lone: $lone_vcpus vCPU(s), instruction-counted time, $lone_rounds rounds of 4 phases (about $((lone_rounds * 2 + 1)) minutes)"
    "$SCRIPTS_DIR/cluster.sh" --image target/bench/image.cpio.gz --scenario lone_bench --out target/bench/lone \
        --vcpus "$lone_vcpus" --pin --icount 0 --timeout $((900 + lone_rounds * 900)) --append "env.LONE_ROUNDS=$lone_rounds"
    target/release/gang-eval lone target/bench/lone/node0/records.txt --out target/bench/lone \
        --policy gang --bpf-cost target/bench/lone/node0/bpf_cost.txt > /dev/null
fi
if want netpipe; then
    step "netpipe: 2 vCPUs in real time, $netpipe_rounds rounds of 4 phases (about $((netpipe_rounds + 2)) minutes)"
    for boot in 1 2 3; do
        rc=0
        "$SCRIPTS_DIR/cluster.sh" --image target/bench/image.cpio.gz --scenario lone_bench --out target/bench/netpipe \
            --vcpus 2 --mttcg --timeout $((600 + netpipe_rounds * 300)) \
            --append "env.LONE_ROUNDS=$netpipe_rounds env.LONE_WORKLOADS=netpipe env.LONE_SCALE=50 env.LONE_COST=netpipe env.LONE_COST_SCALE=50" || rc=$?
        ((rc == 0)) && break
        grep -qE 'Oops: int3|text_poke' target/bench/netpipe/node0.console.log ||
            die "the netpipe boot failed (not the emulator's text-patching fault): target/bench/netpipe/node0.console.log"
        ((boot < 3)) || die "the netpipe boot hit the emulator's text-patching fault 3 times"
        step "the netpipe boot hit the emulator's text-patching fault; booting again"
    done
    target/release/gang-eval lone target/bench/netpipe/node0/records.txt --out target/bench/netpipe \
        --policy gang --bpf-cost target/bench/netpipe/node0/bpf_cost.txt > /dev/null
fi

echo
if want overhead; then cat target/bench/overhead/node0/bench.txt; fi
if want latency; then cat target/bench/latency/node0/latency.txt; fi
if want lone; then cat target/bench/lone/lone.txt; fi
if want netpipe; then cat target/bench/netpipe/lone.txt; fi
