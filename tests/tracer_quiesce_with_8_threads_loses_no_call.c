/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Quiesce while 8 threads issue driver calls: it completes; calls that
 * arrive meanwhile wait at the gate and run after it opens (none fails on
 * the parked, unmapped memory, so none ran while it was closed), and none
 * is lost: each thread's last call's write is in its buffer.
 */
#include "tracer_test.h"

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	plan(3);
	traced t;
	if (traced_start(&t, argv[0], 1) || traced_hello(&t, 5000))
		bail("the traced program did not start");
	ok(traced_cmd(&t, 't') == 'y', "8 threads issue calls");
	int cycles = 0;
	char err[160] = "";
	for (int i = 0; i < 5; i++) {
		usleep(20000);
		if (peer_park(&t.p, err, sizeof(err)) != 0)
			break;
		usleep(20000); /* the threads keep knocking at the closed gate */
		if (cuCheckpointProcessLock(t.pid, NULL) || cuCheckpointProcessUnlock(t.pid, NULL) ||
		    peer_unpark(&t.p) != 0)
			break;
		cycles++;
	}
	ok(cycles == 5, "5 quiesce-park-unpark cycles complete under load (%s)", err);
	ok(traced_cmd(&t, 's') == 'y', "no call failed or was lost");
	traced_stop(&t);
	return done();
}
