/*
 * mpi_ring: a token goes around all ranks of MPI_COMM_WORLD, H times.
 *
 *   mpi_ring [--rounds H]      (default 1000)
 *
 * The token is a u64 hop count: rank 0 starts round h with h*N, every
 * rank r > 0 receives h*N + r - 1 and passes on h*N + r, and rank 0
 * receives h*N + N - 1 back from rank N-1 and starts the next round with
 * one more. Every rank checks every count it receives (and the source);
 * a wrong one is printed on stderr and aborts the job (MPI_Abort, code
 * 3). One rank alone passes the token to itself.
 *
 * At the end each rank prints one JSON line (see common.h) with
 * iter_us = the time between two tokens it received (rank 0: one trip
 * around the ring) and exits 0. Bad arguments: usage on stderr, exit 2.
 * MPI-1 calls only.
 */
#include "common.h"

#define NAME "mpi_ring"
#define TAG 7

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [--rounds H]   (H >= 1, default 1000)\n", prog);
    exit(2);
}

int main(int argc, char **argv)
{
    uint64_t rounds = 1000, h, want;
    unsigned long tok;
    int rank, size, next, prev, i;
    double t0, last, now, *samples;
    MPI_Status st;
    char check[160], extra[64];

    /* Arguments first: a bad one needs no MPI. */
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], 1, 100000000, &rounds) != 0)
                usage(argv[0]);
        } else {
            usage(argv[0]);
        }
    }

    MPI_OK(NAME, -1, MPI_Init(&argc, &argv));
    MPI_OK(NAME, -1, MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_OK(NAME, rank, MPI_Comm_size(MPI_COMM_WORLD, &size));
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;
    samples = malloc(rounds * sizeof(*samples));
    if (samples == NULL)
        CHECK_FAILED(NAME, rank, "out of memory for %llu samples", (unsigned long long)rounds);

    MPI_OK(NAME, rank, MPI_Barrier(MPI_COMM_WORLD));
    t0 = last = MPI_Wtime();
    for (h = 0; h < rounds; h++) {
        if (rank == 0) {
            tok = (unsigned long)(h * (uint64_t)size);
            if (size == 1) {
                unsigned long out = tok;
                MPI_OK(NAME, rank, MPI_Sendrecv(&out, 1, MPI_UNSIGNED_LONG, 0, TAG, &tok, 1,
                                                MPI_UNSIGNED_LONG, 0, TAG, MPI_COMM_WORLD, &st));
            } else {
                MPI_OK(NAME, rank, MPI_Send(&tok, 1, MPI_UNSIGNED_LONG, next, TAG, MPI_COMM_WORLD));
                MPI_OK(NAME, rank, MPI_Recv(&tok, 1, MPI_UNSIGNED_LONG, prev, TAG, MPI_COMM_WORLD, &st));
            }
            /* Back from rank N-1 after its hop (alone: the count sent). */
            want = h * (uint64_t)size + (uint64_t)(size - 1);
        } else {
            MPI_OK(NAME, rank, MPI_Recv(&tok, 1, MPI_UNSIGNED_LONG, prev, TAG, MPI_COMM_WORLD, &st));
            want = h * (uint64_t)size + (uint64_t)(rank - 1);
        }
        now = MPI_Wtime();
        if (st.MPI_SOURCE != prev)
            CHECK_FAILED(NAME, rank, "round %llu: token from rank %d, expected rank %d",
                         (unsigned long long)h, st.MPI_SOURCE, prev);
        if ((uint64_t)tok != want)
            CHECK_FAILED(NAME, rank, "round %llu: token count %llu, expected %llu",
                         (unsigned long long)h, (unsigned long long)tok, (unsigned long long)want);
        samples[h] = (now - last) * 1e6;
        last = now;
        if (rank != 0) {
            tok += 1;
            MPI_OK(NAME, rank, MPI_Send(&tok, 1, MPI_UNSIGNED_LONG, next, TAG, MPI_COMM_WORLD));
        }
    }
    now = MPI_Wtime();

    snprintf(check, sizeof(check),
             "%llu tokens from rank %d, each with the expected hop count", (unsigned long long)rounds,
             prev);
    snprintf(extra, sizeof(extra), ",\"rounds\":%llu", (unsigned long long)rounds);
    report(NAME, rank, size, rounds, now - t0, samples, rounds, check, extra);
    free(samples);
    MPI_OK(NAME, rank, MPI_Finalize());
    return 0;
}
