/*
 * mpi_allreduce: CG-like compute and global sums over MPI_COMM_WORLD.
 *
 *   mpi_allreduce [--grain-us G] [--iters N]     (defaults 1000 and 1000)
 *
 * Each iteration: a grain of G µs of CPU work, a fixed number of steps of a
 * busy loop calibrated once at start against CLOCK_THREAD_CPUTIME_ID (like
 * the Rust workloads' spmd::Spinner: a descheduled rank takes longer, it
 * does not skip work), then MPI_Allreduce of a u64 sum (MPI_SUM on
 * MPI_UNSIGNED_LONG: wrapping, exact in any order). Rank r contributes
 * mix64((r << 40) ^ i) in iteration i; every rank computes the expected
 * total itself and checks every sum. A wrong one is printed on stderr and
 * aborts the job (MPI_Abort, code 3).
 *
 * Test flags (not in the usage): --fault-rank R makes rank R add one to its
 * contribution from iteration 1 on, so every rank's check fails there and
 * the job must end through MPI_Abort (code 3); --abort-rank R makes rank R
 * call MPI_Abort(MPI_COMM_WORLD, 4) in iteration 1 before the allreduce,
 * while the other ranks wait in it for its value.
 *
 * At the end each rank prints one JSON line (see common.h), iter_us being
 * the time of one iteration (grain + allreduce), and exits 0. Bad
 * arguments: usage on stderr, exit 2. MPI-1 calls only.
 */
#include "common.h"

#define NAME "mpi_allreduce"

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [--grain-us G] [--iters N]   (G >= 0, default 1000; N >= 1, default 1000)\n",
            prog);
    exit(2);
}

static uint64_t contribution(int rank, uint64_t iter)
{
    return mix64(((uint64_t)rank << 40) ^ iter);
}

int main(int argc, char **argv)
{
    uint64_t grain_us = 1000, iters = 1000, fault = UINT64_MAX, abort_rank = UINT64_MAX, loops, i, want;
    unsigned long mine, sum;
    int rank, size, r, k;
    double lpu, t0, t, *samples;
    char check[160], extra[128];

    for (k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--grain-us") == 0 && k + 1 < argc) {
            if (parse_u64(argv[++k], 0, 10000000, &grain_us) != 0)
                usage(argv[0]);
        } else if (strcmp(argv[k], "--iters") == 0 && k + 1 < argc) {
            if (parse_u64(argv[++k], 1, 100000000, &iters) != 0)
                usage(argv[0]);
        } else if (strcmp(argv[k], "--fault-rank") == 0 && k + 1 < argc) {
            if (parse_u64(argv[++k], 0, 1000000, &fault) != 0)
                usage(argv[0]);
        } else if (strcmp(argv[k], "--abort-rank") == 0 && k + 1 < argc) {
            if (parse_u64(argv[++k], 0, 1000000, &abort_rank) != 0)
                usage(argv[0]);
        } else {
            usage(argv[0]);
        }
    }

    MPI_OK(NAME, -1, MPI_Init(&argc, &argv));
    MPI_OK(NAME, -1, MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_OK(NAME, rank, MPI_Comm_size(MPI_COMM_WORLD, &size));
    samples = malloc(iters * sizeof(*samples));
    if (samples == NULL)
        CHECK_FAILED(NAME, rank, "out of memory for %llu samples", (unsigned long long)iters);
    lpu = calibrate_loops_per_us();
    loops = grain_us == 0 ? 0 : (uint64_t)(lpu * (double)grain_us + 0.5);
    if (grain_us > 0 && loops == 0)
        loops = 1;

    MPI_OK(NAME, rank, MPI_Barrier(MPI_COMM_WORLD));
    t0 = MPI_Wtime();
    for (i = 0; i < iters; i++) {
        t = MPI_Wtime();
        spin_sink = spin_loops(loops);
        mine = (unsigned long)contribution(rank, i);
        if ((uint64_t)rank == fault && i >= 1)
            mine += 1;
        if ((uint64_t)rank == abort_rank && i == 1) {
            fprintf(stderr, "%s: rank %d: --abort-rank: calling MPI_Abort(MPI_COMM_WORLD, 4)\n", NAME,
                    rank);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 4);
            exit(4);
        }
        MPI_OK(NAME, rank, MPI_Allreduce(&mine, &sum, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD));
        want = 0;
        for (r = 0; r < size; r++)
            want += contribution(r, i);
        if ((uint64_t)sum != want)
            CHECK_FAILED(NAME, rank, "iteration %llu: wrong allreduce sum %#llx, expected %#llx",
                         (unsigned long long)i, (unsigned long long)sum, (unsigned long long)want);
        samples[i] = (MPI_Wtime() - t) * 1e6;
    }
    t = MPI_Wtime();

    snprintf(check, sizeof(check),
             "allreduce sum over all ranks equal to the expected total in every iteration");
    snprintf(extra, sizeof(extra), ",\"grain_us\":%llu,\"grain_loops\":%llu",
             (unsigned long long)grain_us, (unsigned long long)loops);
    report(NAME, rank, size, iters, t - t0, samples, iters, check, extra);
    free(samples);
    MPI_OK(NAME, rank, MPI_Finalize());
    return 0;
}
