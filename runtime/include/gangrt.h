/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * gangrt.h - the gang runtime library (libgangrt) for ranks under scx_gang.
 *
 * A rank (one process of a parallel job) uses it to see its gang's time
 * slot on this node, to yield the CPU by itself when the slot is about to
 * end, and to wait for messages with two-phase spin-block.
 *
 * Everything works without the scheduler: with no slot clock (scx_gang not
 * running, the process in no gang, or GANG_CLOCK=off) the slot is
 * "unknown", gang_yield_point() never yields, and waits spin and block as
 * their policy says (GANG_WAIT_INSLOT spins like GANG_WAIT_SPIN).
 *
 * Environment:
 *   GANG_CLOCK=off          do not ask scx_gang for the slot clock
 *   GANG_CLOCK_SOCKET=PATH  where scx_gang serves it (/run/scx_gang-clock.sock)
 *   GANG_YIELD=off          gang_yield_point() never yields
 *   GANG_WAIT=POLICY        policy of gang_wait_readable():
 *                           block | spin[:US] | adaptive | inslot[:US]
 *                           (US: spin limit in microseconds, default 200;
 *                           unset: block; malformed: block and one warning
 *                           on stderr)
 *
 * All functions are thread-safe. Link with -lgangrt (shared or static; the
 * static library also needs -lpthread -ldl -lm).
 */
#ifndef GANGRT_H
#define GANGRT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Time left in my gang's slot, in ns:
 *   -1         unknown (no slot clock)
 *    0         my gang owns no CPU in the slot in force
 *   INT64_MAX  my gang runs and no switch is due
 *   otherwise  ns until the next switch (at least 1)
 */
int64_t gang_slot_remaining_ns(void);

/* The switch generation in force (changes at every slot switch); 0: unknown. */
uint64_t gang_slot_generation(void);

/*
 * Yield point: call it between grains of work. Yields (sched_yield(); the
 * scheduler parks the caller until its gang's next slot) only if my gang
 * runs now, does not run in the next slot too, a switch is due, and it is
 * within the scheduler's lead time; at most once per slot and thread.
 * Returns 1 if it yielded, 0 if not. Cheap when it does not yield.
 */
int gang_yield_point(void);

/* Wait policies of gang_wait_readable_policy(). */
enum gang_wait_policy {
	GANG_WAIT_BLOCK = 0,	/* block at once */
	GANG_WAIT_SPIN = 1,	/* spin spin_us, then block */
	GANG_WAIT_ADAPTIVE = 2,	/* spin a time adapted per fd (10 us..2 ms), then block */
	GANG_WAIT_INSLOT = 3,	/* spin up to spin_us while my gang owns the slot, then block */
};

/*
 * Waits until fd is readable (data, or hang-up/error: the following read
 * then returns EOF or the error), with the GANG_WAIT policy.
 * timeout_ms < 0: no timeout. Returns 1 readable, 0 timed out, -1 error
 * (errno set; EBADF for a bad fd). EINTR is retried, never returned.
 */
int gang_wait_readable(int fd, int timeout_ms);

/*
 * The same with an explicit policy (enum gang_wait_policy). spin_us: spin
 * limit of GANG_WAIT_SPIN / GANG_WAIT_INSLOT (< 0: 200); ignored by the
 * others. An unknown policy returns -1 with errno EINVAL.
 */
int gang_wait_readable_policy(int fd, int policy, int64_t spin_us, int timeout_ms);

/* Per-process counters. */
struct gang_wait_stats {
	uint64_t waits;		/* waits that returned 0 or 1 */
	uint64_t spin_hits;	/* satisfied while spinning */
	uint64_t blocks;	/* went on to block (timeouts included) */
	uint64_t timeouts;	/* timed out */
	uint64_t spin_ns;	/* total time spent spinning */
	uint64_t yields;	/* gang_yield_point() calls that yielded */
};

/* Copies the process's counters to *out (NULL: does nothing). */
void gang_wait_stats(struct gang_wait_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* GANGRT_H */
