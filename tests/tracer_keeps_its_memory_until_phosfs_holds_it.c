/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A park is two steps: the tracer hands its device memory over (PARKED)
 * and lets go of it only when phosfs says it holds every fd (HELD). Until
 * then, whatever phosfs does, the process keeps its memory and runs on:
 *
 *   1. phosfs declines (another process could not park): ERROR instead
 *      of HELD;
 *   2. phosfs says nothing: the tracer waits the PARK's held_ms, then
 *      runs on;
 *   3. phosfs is gone (the connection closed under the hand-over).
 *
 * After each, every byte of every buffer is as before, and the process
 * answers requests again (1, 2 on the same connection; 3 on a new one).
 * Then a park with HELD still parks: the driver's checkpoint copies no
 * device bytes.
 */
#include "tracer_test.h"

/* Sends PARK with deadlines and reads up to PARKED; the fds are closed
 * (phosfs's copies: the process's memory does not depend on them). */
static int park_until_parked(peer *p, uint32_t timeout_ms, uint32_t held_ms)
{
	wire_park wp = { timeout_ms, held_ms, 0, 0 };
	int e = wire_send(p->conn, WIRE_PARK, &wp, sizeof(wp), 1, NULL, 0);
	static uint8_t buf[WIRE_MAX_PAYLOAD];
	while (!e) {
		wire_header h;
		int fds[WIRE_MAX_FDS], nfds = 0;
		e = wire_recv(p->conn, &h, buf, sizeof(buf), fds, &nfds);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		if (!e && h.type == WIRE_PARKED)
			return 0;
		if (!e && h.type == WIRE_ERROR)
			return -EIO;
	}
	return e;
}

static int listed_present(peer *p)
{
	wire_buffer *v;
	size_t n;
	int ok = peer_list(p, &v, &n) == 0 && n == APP_LISTED;
	for (size_t i = 0; ok && i < n; i++)
		ok = v[i].state == WIRE_PRESENT;
	if (ok)
		free(v);
	return ok;
}

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	plan(4);
	traced t;
	if (traced_start(&t, argv[0], 1) || traced_hello(&t, 5000))
		bail("the traced program did not start");
	if (traced_cmd(&t, 'l') != 'y')
		bail("the program did not compute");

	int e = park_until_parked(&t.p, 2000, 5000);
	const char no[] = "the checkpoint does not go on";
	if (!e)
		e = wire_send(t.p.conn, WIRE_ERROR, no, sizeof(no), 0, NULL, 0);
	ok(e == 0 && traced_cmd(&t, 'v') == 'y' && listed_present(&t.p),
	   "declined after PARKED, it keeps its memory, runs on, and still answers");

	e = park_until_parked(&t.p, 2000, 300);
	usleep(600000); /* past held_ms */
	ok(e == 0 && traced_cmd(&t, 'v') == 'y' && listed_present(&t.p),
	   "with no HELD within held_ms, it keeps its memory and runs on");

	wire_park wp = { 2000, 5000, 0, 0 };
	e = wire_send(t.p.conn, WIRE_PARK, &wp, sizeof(wp), 1, NULL, 0);
	close(t.p.conn); /* phosfs is gone mid hand-over */
	t.p.conn = -1;
	int back = !e && traced_hello(&t, 5000) == 0;
	ok(back && traced_cmd(&t, 'v') == 'y' && listed_present(&t.p),
	   "with phosfs gone mid hand-over, it keeps its memory and connects again");

	char err[160] = "";
	uint64_t bytes = 1;
	e = peer_park(&t.p, err, sizeof(err));
	int ce = e ? e : cuCheckpointProcessLock(t.pid, NULL) || cuCheckpointProcessCheckpoint(t.pid, NULL);
	int be = simcuda_checkpoint_bytes(t.pid, &bytes);
	int re = cuCheckpointProcessRestore(t.pid, NULL) || cuCheckpointProcessUnlock(t.pid, NULL);
	ok(ce == 0 && be == 0 && bytes == 0 && re == 0 && peer_unpark(&t.p) == 0 && traced_cmd(&t, 'v') == 'y',
	   "with HELD it parks: the driver's checkpoint copies %llu device bytes, and it comes back intact (%s)",
	   (unsigned long long)bytes, err);
	traced_stop(&t);
	return done();
}
