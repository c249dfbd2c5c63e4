/* Two or more MPI ranks: each sends its rank to the next and prints what
 * it got, so MPI_Init's business-card exchange (PMI put, barrier, get) and
 * MPI_Finalize are all used. Built by src/agent/tests/pmi.rs with mpicc. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, got = -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* "abort": the last rank aborts with exit code 7. */
    if (argc > 1 && rank == size - 1)
        MPI_Abort(MPI_COMM_WORLD, 7);
    MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, 0, &got, 1, MPI_INT,
                 (rank + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("rank %d of %d got %d, %s\n", rank, size, got,
           getenv("PMI_PORT") || getenv("PMI_ID") ? "PMI_PORT or PMI_ID set" : "no PMI port");
    MPI_Finalize();
    return 0;
}
