/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The tracer interposes NCCL, here a stub libnccl.so.2 the program
 * dlopens RTLD_LOCAL and reaches only through dlsym (tests/tracer_app.h,
 * command 'n'), and counts the operations each communicator issued:
 *   - a communicator made from a unique id counts each all-reduce, a
 *     group once, and ncclBcast once (not again for the ncclBroadcast
 *     NCCL calls from inside it);
 *   - a split counts its own, and one that was destroyed is gone;
 *   - a split with no colour makes no communicator;
 *   - two communicators from one unique id have one name, a split
 *     another; the names are the same in another process that does the
 *     same (they are what every rank agrees on);
 *   - the program's calls all succeed through the wrappers.
 */
#include "tracer_test.h"

/* The communicators the tracer lists, into v (up to max); how many. */
static int list(traced *t, wire_nccl_comm *v, int max)
{
	uint8_t *raw = NULL;
	size_t len = 0;
	uint32_t count = 0;
	if (wire_request(t->p.conn, WIRE_NCCL, WIRE_NCCL, 5000, &raw, &len, &count))
		return -1;
	int n = (int)(len / sizeof(*v));
	if (n > max)
		n = max;
	memcpy(v, raw, (size_t)n * sizeof(*v));
	free(raw);
	return n;
}

/* Runs the program's NCCL sequence in a fresh traced process and lists. */
static int run(const char *argv0, wire_nccl_comm *v, int max, int *said)
{
	traced t;
	if (traced_start(&t, argv0, 1) || traced_hello(&t, 5000))
		bail("the traced program did not start");
	*said = traced_cmd(&t, 'n');
	int n = list(&t, v, max);
	traced_stop(&t);
	return n;
}

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	tracer_nccl_stub();
	plan(5);
	wire_nccl_comm v[8], w[8];
	int said = 0, said2 = 0;
	int n = run(argv[0], v, 8, &said);
	ok(said == 'y' && n == 3, "every NCCL call of the program succeeds through the tracer, which lists 3 communicators (%d)",
	   n);
	const wire_nccl_comm *a = NULL, *b = NULL, *s2 = NULL;
	for (int i = 0; i < n; i++) {
		if (v[i].count == 5)
			a = &v[i];
		else if (v[i].count == 1)
			s2 = &v[i];
		else if (v[i].count == 0)
			b = &v[i];
	}
	ok(a && a->rank == 0 && a->nranks == 1 && !(a->flags & WIRE_NCCL_UNNAMED),
	   "A counts 3 all-reduces, one group and one broadcast: 5, with its rank and size");
	ok(s2 && b, "the live split counts its one all-reduce, B from A's unique id none; the destroyed split is gone");
	ok(a && b && s2 && a->id == b->id && s2->id != a->id && s2->id != 0 && !(s2->flags & WIRE_NCCL_UNNAMED),
	   "A and B, made from one unique id, have one name; the split has its own");
	int m = run(argv[0], w, 8, &said2);
	int same = said2 == 'y' && m == n;
	for (int i = 0; same && i < n; i++)
		same = w[i].id == v[i].id && w[i].count == v[i].count;
	ok(same, "another process doing the same names and counts its communicators alike");
	return done();
}
