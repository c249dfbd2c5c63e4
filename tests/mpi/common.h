/*
 * Shared bits of the MPI test programs (tests/mpi/ring.c, allreduce.c): argument parsing,
 * nearest-rank percentiles, the calibrated busy loop and the JSON result
 * line, in the format of the Rust workloads (tests/workloads/src/spmd,
 * Report::line): workload, rank, size, iters, elapsed_s, iter_us
 * {p50,p90,p99,max}, ok, check, then extra fields and the node.
 * MPI-1 calls only.
 */
#ifndef GANG_MPI_COMMON_H
#define GANG_MPI_COMMON_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

/* The u64 values travel as MPI_UNSIGNED_LONG (an MPI-1 type). */
_Static_assert(sizeof(unsigned long) == sizeof(uint64_t), "unsigned long must be 64 bits");

/* Parses a decimal number in [min, max]; 0 on success. */
static inline int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentiles p50, p90, p99 and max of n samples (sorted in
 * place); all zero when there are none. */
static inline void percentiles(double *s, size_t n, double out[4])
{
    static const double ps[3] = { 50.0, 90.0, 99.0 };
    size_t i, k;

    if (n == 0) {
        out[0] = out[1] = out[2] = out[3] = 0.0;
        return;
    }
    qsort(s, n, sizeof(*s), cmp_double);
    for (i = 0; i < 3; i++) {
        k = (size_t)ceil(ps[i] / 100.0 * (double)n);
        if (k < 1)
            k = 1;
        if (k > n)
            k = n;
        out[i] = s[k - 1];
    }
    out[3] = s[n - 1];
}

/* splitmix64's finalizer: a well-mixed 64-bit value of x. */
static inline uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* ---- CPU work in fixed grains (like spmd::Spinner) ---------------------- */

/* A loop of `loops` steps of a 64-bit LCG the compiler cannot drop. */
static __attribute__((noinline, unused)) uint64_t spin_loops(uint64_t loops)
{
    uint64_t x = 0x2545f4914f6cdd1dULL, i;

    for (i = 0; i < loops; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* This thread's CPU time in seconds: stands still while it is descheduled. */
static inline double thread_cpu_s(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile uint64_t spin_sink __attribute__((unused));

/* Loop steps per microsecond of CPU time: runs of at least 2 ms, timed five
 * times, the fastest kept. A grain is then a fixed number of steps: a rank
 * descheduled mid-grain takes longer, it does not skip work. */
static inline double calibrate_loops_per_us(void)
{
    uint64_t n = 10000;
    double t, us, best = 0.0;
    int i;

    for (;;) {
        t = thread_cpu_s();
        spin_sink = spin_loops(n);
        if (thread_cpu_s() - t >= 0.002 || n >= (1ULL << 40))
            break;
        n *= 2;
    }
    for (i = 0; i < 5; i++) {
        t = thread_cpu_s();
        spin_sink = spin_loops(n);
        us = (thread_cpu_s() - t) * 1e6;
        if (us < 1e-3)
            us = 1e-3;
        if ((double)n / us > best)
            best = (double)n / us;
    }
    return best;
}

/* ---- the result line ------------------------------------------------------ */

/* Prints s as a JSON string literal (s holds no characters below 0x20 but
 * for those escaped). */
static inline void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* One JSON line on stdout: the common fields, then `extra` (already JSON:
 * ",\"k\":v..." or ""), then the node (MPI_Get_processor_name). */
static inline void report(const char *workload, int rank, int size, uint64_t iters, double elapsed_s,
                   double *iter_us, size_t n, const char *check, const char *extra)
{
    char node[MPI_MAX_PROCESSOR_NAME + 1] = "";
    int len = 0;
    double p[4];

    percentiles(iter_us, n, p);
    if (MPI_Get_processor_name(node, &len) != MPI_SUCCESS)
        len = 0;
    node[len < 0 ? 0 : len] = '\0';
    printf("{\"workload\":");
    json_str(stdout, workload);
    printf(",\"rank\":%d,\"size\":%d,\"iters\":%llu,\"elapsed_s\":%.6f,"
           "\"iter_us\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},\"ok\":true,\"check\":",
           rank, size, (unsigned long long)iters, elapsed_s, p[0], p[1], p[2], p[3]);
    json_str(stdout, check);
    printf("%s,\"node\":", extra);
    json_str(stdout, node);
    printf("}\n");
    fflush(stdout);
}

/* A failed check: the message on stderr, then the whole job aborts. */
#define CHECK_FAILED(name, rank, ...)                                                    \
    do {                                                                                 \
        fprintf(stderr, "%s: rank %d: ", (name), (rank));                                \
        fprintf(stderr, __VA_ARGS__);                                                    \
        fputc('\n', stderr);                                                             \
        fflush(stderr);                                                                  \
        MPI_Abort(MPI_COMM_WORLD, 3);                                                    \
        exit(3);                                                                         \
    } while (0)

/* An MPI call that failed (the default error handler aborts first; this is
 * for completeness). */
#define MPI_OK(name, rank, call)                                                         \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != MPI_SUCCESS)                                                          \
            CHECK_FAILED((name), (rank), "%s failed (error %d)", #call, rc_);            \
    } while (0)

#endif
