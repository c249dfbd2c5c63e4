/* An Open MPI program for gang-pmix's tests: a ring and an allreduce with
 * checked results. Started without mpirun, each rank with the PMIx
 * server's fork environment.
 *
 *   mpi_ring          one round: a token around the ring 3 times (each rank
 *                     adds its rank), then MPI_Allreduce of rank+1; checks
 *                     both.
 *   mpi_ring long N   N rounds, 1 ms apart: long enough to be stopped and
 *                     continued in the middle.
 *   mpi_ring abort S  MPI_Init, then rank 0 calls MPI_Abort(COMM_WORLD, S);
 *                     the others wait in a barrier.
 *
 * Prints "ok rank R of N" and exits 0 when every result was right; a
 * wrong one is an MPI_Abort(.., 1).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void round_once(int rank, int size)
{
    long token = 0;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int lap = 0; lap < 3; lap++) {
        if (rank == 0) {
            token += rank;
            MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank;
            MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
        }
    }
    long ring_want = 3L * size * (size - 1) / 2;
    if (rank == 0 && token != ring_want) {
        fprintf(stderr, "ring: token %ld, want %ld\n", token, ring_want);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long mine = rank + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    long want = (long)size * (size + 1) / 2;
    if (sum != want) {
        fprintf(stderr, "rank %d: allreduce %ld, want %ld\n", rank, sum, want);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 2 && strcmp(argv[1], "abort") == 0) {
        if (rank == 0)
            MPI_Abort(MPI_COMM_WORLD, atoi(argv[2]));
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
    }
    int rounds = argc > 2 && strcmp(argv[1], "long") == 0 ? atoi(argv[2]) : 1;
    for (int r = 0; r < rounds; r++) {
        if (r > 0) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        round_once(rank, size);
    }
    MPI_Finalize();
    printf("ok rank %d of %d\n", rank, size);
    return 0;
}
