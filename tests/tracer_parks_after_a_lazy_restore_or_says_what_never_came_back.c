/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * After a lazy restore, the next checkpoint parks the process again:
 *   1. the application frees a buffer whose object the restore has not
 *      brought back yet (the job then never sends it); once the rest has
 *      come and the restore ends, the process parks, unparks, and every
 *      buffer it still has is intact and listed present;
 *   2. a restore that ends with an object still missing leaves the process
 *      running, and a park says which memory is not back, rather than
 *      dropping the connection.
 */
#include "tracer_test.h"

/* Lazily unparks t (parked by peer_park), sends every object but skip
 * back, and, once the tracer has mapped them, runs cmd (0: none), then
 * ends the restore. Returns cmd's answer. */
static char restore_without(traced *t, int skip, char cmd)
{
	cow_header *tab = NULL;
	uint64_t bytes = 0;
	if (peer_unpark_lazy(&t->p, &tab, &bytes))
		return 0;
	int e = 0;
	uint64_t sent = 0;
	for (int i = 0; !e && i < t->p.nobjs; i++)
		if (i != skip && !(t->p.objs[i].flags & WIRE_OBJ_APP)) {
			e = peer_lazy_send(&t->p, i);
			sent++;
		}
	/* cmd runs once the tracer has mapped all that was sent. */
	for (int ms = 0; !e && atomic_load(&tab->off) < sent; ms++)
		e = ms < 5000 ? usleep(1000) : -ETIMEDOUT;
	char r = e ? 0 : cmd ? traced_cmd(t, cmd) : 'y';
	/* The tracer takes what was sent before END: one connection, in order. */
	if (peer_lazy_end(&t->p))
		r = 0;
	munmap(tab, bytes);
	return r;
}

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	plan(7);
	alarm(120); /* a call that waits for memory that never comes */
	traced t;
	if (traced_start(&t, argv[0], 1) || traced_hello(&t, 5000))
		bail("the traced program did not start");
	ok(traced_cmd(&t, 'l') == 'y', "the program has computed c = a + b");

	char err[200] = "";
	int e = peer_park(&t.p, err, sizeof(err));
	int big = e ? -1 : peer_object_at(&t.p, t.lay.va[BUF_BIG]);
	int before = t.p.nobjs;
	ok(e == 0 && big >= 0, "parked: %d objects handed over, the big buffer's among them (%s)", before, err);

	char r = big >= 0 ? restore_without(&t, big, 'f') : 0;
	ok(r == 'y' && traced_hello(&t, 5000) == 0,
	   "restored lazily, it frees its big buffer before that comes back; the rest comes, the restore ends, "
	   "and the tracer is back");

	e = peer_park(&t.p, err, sizeof(err));
	ok(e == 0 && t.p.nobjs == before - 1, "it parks again: %d objects, the freed one not among them (%s)",
	   t.p.nobjs, e ? err : "ok");
	e = e ? e : peer_unpark(&t.p);
	wire_buffer *v = NULL;
	size_t n = 0;
	int present = e == 0 && traced_cmd(&t, 'v') == 'y' && peer_list(&t.p, &v, &n) == 0 && n == APP_LISTED - 1;
	for (size_t i = 0; present && i < n; i++)
		present = v[i].state == WIRE_PRESENT;
	free(v);
	ok(present, "unparked, every buffer it still has is intact, and listed present (%zu)", n);

	/* 2. An object that never comes back. */
	e = peer_park(&t.p, err, sizeof(err));
	int a = e ? -1 : peer_object_at(&t.p, t.lay.va[BUF_A]);
	r = a >= 0 ? restore_without(&t, a, 0) : 0;
	ok(r == 'y' && traced_hello(&t, 5000) == 0, "restored lazily once more, without the object of buffer a");
	e = peer_park(&t.p, err, sizeof(err));
	ok(e == -EIO && strstr(err, "cannot park: device memory of its restore is not back (its object of ") &&
		   traced_cmd(&t, 'K') != 0,
	   "a park says what is missing, and the process runs on (%s)", err);
	traced_stop(&t);
	return done();
}
