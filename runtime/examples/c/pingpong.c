/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * pingpong: two processes exchange numbered messages over a socketpair,
 * waiting with gang_wait_readable() and offering gang_yield_point() at
 * every iteration. Checks that every message arrives, in order.
 *
 *   cc -Iruntime/include pingpong.c -L<dir of libgangrt.so> -lgangrt -o pingpong
 *   GANG_WAIT=adaptive ./pingpong [ITERATIONS]
 *
 * Exit 0 on success, 1 on any loss, reordering, timeout or error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gangrt.h"

#define TIMEOUT_MS 10000

static int xfer_full(int fd, void *buf, size_t len, int writing)
{
	char *p = buf;

	while (len) {
		ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Waits for and reads the next message; it must be `expect`. */
static int receive(const char *who, int fd, uint32_t expect)
{
	uint32_t got;
	int r = gang_wait_readable(fd, TIMEOUT_MS);

	if (r != 1) {
		fprintf(stderr, "%s: waiting for %" PRIu32 ": %s\n", who, expect,
			r == 0 ? "timed out" : strerror(errno));
		return -1;
	}
	if (xfer_full(fd, &got, sizeof(got), 0)) {
		fprintf(stderr, "%s: reading %" PRIu32 ": %s\n", who, expect,
			errno ? strerror(errno) : "EOF");
		return -1;
	}
	if (got != expect) {
		fprintf(stderr, "%s: got %" PRIu32 ", expected %" PRIu32 "\n", who, got, expect);
		return -1;
	}
	return 0;
}

static int run(const char *who, int fd, uint32_t iterations, int first)
{
	uint32_t i;

	for (i = 0; i < iterations; i++) {
		uint32_t ping = 2 * i, pong = 2 * i + 1;

		if (first) {
			if (xfer_full(fd, &ping, sizeof(ping), 1) || receive(who, fd, pong))
				return -1;
		} else {
			if (receive(who, fd, ping) || xfer_full(fd, &pong, sizeof(pong), 1))
				return -1;
		}
		gang_yield_point();
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint32_t iterations = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 3000;
	struct gang_wait_stats st;
	int sv[2], status;
	pid_t child;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		perror("socketpair");
		return 1;
	}
	child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0) {
		close(sv[0]);
		_exit(run("pong", sv[1], iterations, 0) ? 1 : 0);
	}
	close(sv[1]);
	if (run("ping", sv[0], iterations, 1)) {
		close(sv[0]);
		waitpid(child, &status, 0);
		return 1;
	}
	close(sv[0]);
	if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "pong failed\n");
		return 1;
	}
	gang_wait_stats(&st);
	printf("%" PRIu32 " ping-pongs ok; slot remaining %" PRId64 " ns, generation %" PRIu64
	       "; ping side: %" PRIu64 " waits, %" PRIu64 " spin hits, %" PRIu64
	       " blocks, %" PRIu64 " us spun, %" PRIu64 " yields\n",
	       iterations, gang_slot_remaining_ns(), gang_slot_generation(), st.waits,
	       st.spin_hits, st.blocks, st.spin_ns / 1000, st.yields);
	return 0;
}
