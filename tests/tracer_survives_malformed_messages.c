/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The tracer's control thread gets 3000 malformed or unexpected messages
 * on its socket (random bytes; valid headers with wrong versions, types or
 * lengths; stray fds): it answers what it can, refuses the rest, and keeps
 * serving; the program goes on with the right results.
 */
#include "tracer_test.h"

static void drain(int sock)
{
	uint8_t buf[WIRE_MAX_PAYLOAD + 64];
	struct pollfd pf = { sock, POLLIN, 0 };
	while (poll(&pf, 1, 0) == 1 && (pf.revents & POLLIN)) {
		if (recv(sock, buf, sizeof(buf), MSG_DONTWAIT) <= 0)
			break;
	}
}

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	plan(3);
	traced t;
	if (traced_start(&t, argv[0], 1) || traced_hello(&t, 5000))
		bail("the traced program did not start");
	unsigned seed = 42;
	int sent = 0;
	for (int i = 0; i < 3000; i++) {
		uint8_t msg[512];
		/* At least a byte: an empty datagram reads as the end of the connection. */
		size_t n = 1 + (size_t)(rand_r(&seed) % (int)(sizeof(msg) - 1));
		for (size_t k = 0; k < n; k++)
			msg[k] = (uint8_t)rand_r(&seed);
		if (i % 2 && n >= sizeof(wire_header)) {
			/* A plausible header with one thing wrong, or a harmless request. */
			wire_header h = { WIRE_MAGIC, WIRE_VERSION, (uint16_t)(rand_r(&seed) % 16),
					  (uint32_t)(n - sizeof(wire_header)), (uint32_t)rand_r(&seed) };
			switch (rand_r(&seed) % 4) {
			case 0: h.version++; break;
			case 1: h.length += 1 + (uint32_t)(rand_r(&seed) % 100); break;
			case 2: h.magic ^= 1; break;
			default: break;
			}
			if (h.type == WIRE_PARK)
				h.type = WIRE_UNPARK; /* not a park: that is a real request */
			memcpy(msg, &h, sizeof(h));
		}
		if (i % 7 == 0) {
			int fd = open("/dev/null", O_RDONLY);
			wire_header h = { WIRE_MAGIC, WIRE_VERSION, WIRE_OBJECTS, 0, 1 };
			wire_send(t.p.conn, (uint16_t)h.type, NULL, 0, 1, &fd, 1); /* objects when not parked */
			close(fd);
		} else if (send(t.p.conn, msg, n, MSG_NOSIGNAL) >= 0) {
			sent++;
		}
		drain(t.p.conn);
	}
	ok(sent > 2000, "%d malformed messages were sent", sent);
	wire_buffer *v = NULL;
	size_t n = 0;
	/* Skip answers still in flight; then the table must come. */
	int e = -1;
	for (int tries = 0; tries < 3 && e; tries++) {
		drain(t.p.conn);
		usleep(100000);
		drain(t.p.conn);
		e = peer_list(&t.p, &v, &n);
	}
	ok(e == 0 && n == APP_LISTED, "the control thread still serves the buffer table");
	free(v);
	ok(traced_cmd(&t, 'l') == 'y' && traced_cmd(&t, 'v') == 'y' && traced_stop(&t) == 0,
	   "the program runs on, with the right results, and exits cleanly");
	return done();
}
