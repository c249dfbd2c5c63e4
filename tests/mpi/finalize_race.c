/*
 * mpi_finalize_race: reproduces, with no scheduler and no gangd, the
 * MPI_Finalize deadlock of Debian 12's MPICH 4.0.2 (ch4:ucx) over UCX
 * 1.13's tcp transport (see tests/vm/scenarios/cluster_mpi.sh).
 *
 *   mpi_finalize_race [--skew-ms S]      (2 ranks or more; default 1000)
 *
 * Rank 0 sends one message to rank 1, then keeps progressing MPI (MPI_Iprobe
 * in a loop) for S ms before it calls MPI_Finalize; every other rank calls
 * MPI_Finalize at once. MPICH's finalize first closes every UCX endpoint,
 * progressing UCX until the closes completed, and then waits in the PMI
 * barrier, a blocking read. Rank 1's closes complete while rank 0 still
 * progresses, so rank 1 ends up in the barrier; rank 0's endpoint to rank 1
 * has sent data since its last flush, so UCX's tcp transport closes it with
 * a flush request that only rank 1 can acknowledge, and rank 1 no longer
 * progresses UCX: rank 0 spins in MPI_Finalize, rank 1 waits in the barrier,
 * forever. Each rank says on stderr when it enters and leaves MPI_Finalize.
 *
 * On the host, forcing the ranks of one machine through UCX's tcp:
 *   timeout 20 mpiexec -n 2 env UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1 target/mpi/mpi_finalize_race
 * hangs (exit 124 from timeout); with UCX_TLS=sm,self (shared memory, whose
 * flush needs no answer) it ends. Bad arguments: usage on stderr, exit 2.
 */
#include "common.h"

#define NAME "mpi_finalize_race"

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [--skew-ms S]   (S >= 0, default 1000)\n", prog);
    exit(2);
}

int main(int argc, char **argv)
{
    uint64_t skew_ms = 1000;
    int rank, size, flag, v = 42, k;
    double t0;
    MPI_Status st;

    for (k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--skew-ms") == 0 && k + 1 < argc) {
            if (parse_u64(argv[++k], 0, 3600000, &skew_ms) != 0)
                usage(argv[0]);
        } else {
            usage(argv[0]);
        }
    }
    MPI_OK(NAME, -1, MPI_Init(&argc, &argv));
    MPI_OK(NAME, -1, MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_OK(NAME, rank, MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size < 2)
        CHECK_FAILED(NAME, rank, "needs 2 ranks or more, has %d", size);
    if (rank == 0) {
        MPI_OK(NAME, rank, MPI_Send(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD));
        t0 = MPI_Wtime();
        while (MPI_Wtime() - t0 < (double)skew_ms / 1000.0)
            MPI_OK(NAME, rank, MPI_Iprobe(1, 1, MPI_COMM_WORLD, &flag, &st));
    } else if (rank == 1) {
        MPI_OK(NAME, rank, MPI_Recv(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &st));
    }
    fprintf(stderr, "%s: rank %d: entering MPI_Finalize\n", NAME, rank);
    MPI_OK(NAME, rank, MPI_Finalize());
    fprintf(stderr, "%s: rank %d: left MPI_Finalize\n", NAME, rank);
    return 0;
}
