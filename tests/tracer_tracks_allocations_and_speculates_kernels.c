/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Under the tracer, a driver-API program registers at its first cuInit;
 * its allocations appear in the buffer table with their VA, size and state;
 * small ones share slab objects; a launch of _Z3addPKfS0_Pfi reads a and b
 * and writes c; the program's results are right; and PHOS_TRACE=0 turns
 * the tracer off.
 */
#include "tracer_test.h"

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	plan(11);
	traced t;
	if (traced_start(&t, argv[0], 1))
		bail("the traced program did not start");
	int he = traced_hello(&t, 5000);
	ok(he == 0 && t.p.hello.pid == t.pid && t.p.hello.control_tid > 0,
	   "the program registers at its first cuInit (pid %d)", t.p.hello.pid);

	wire_buffer *v = NULL, *w = NULL;
	size_t n = 0, m = 0;
	int e = peer_list(&t.p, &v, &n);
	int all = e == 0 && n == APP_LISTED;
	for (int b = 0; all && b < APP_NBUF; b++) {
		const wire_buffer *x = find_buffer(v, n, t.lay.va[b]);
		all = x && x->size == t.lay.size[b] && x->state == WIRE_PRESENT && x->device == 0;
	}
	const wire_buffer *own = find_buffer(v, n, t.lay.vmm_va);
	ok(all && own && own->size == APP_VMM_BYTES,
	   "its %d allocations, and the VMM allocation it mapped itself, are listed with their VA, size and state",
	   APP_NBUF);
	ok(table_matches(t.p.table, v, n, t.pid), "the state table it shared mirrors the buffer table");
	uint64_t s1 = t.lay.va[BUF_S1], s2 = t.lay.va[BUF_S2];
	ok(s1 % 256 == 0 && s2 % 256 == 0 && (s1 >> 21) != (t.lay.va[BUF_A] >> 21),
	   "small allocations are 256-byte aligned blocks of slabs");

	ok(traced_cmd(&t, 'l') == 'y', "a kernel launch goes through");
	e = peer_list(&t.p, &w, &m);
	int64_t d[APP_NBUF][2];
	for (int b = 0; b < APP_NBUF; b++) {
		const wire_buffer *x = find_buffer(v, n, t.lay.va[b]), *y = find_buffer(w, m, t.lay.va[b]);
		d[b][0] = x && y ? (int64_t)(y->reads - x->reads) : -1;
		d[b][1] = x && y ? (int64_t)(y->writes - x->writes) : -1;
	}
	ok(e == 0 && d[BUF_A][0] == 1 && d[BUF_A][1] == 0 && d[BUF_B][0] == 1 && d[BUF_B][1] == 0,
	   "add(const float *a, const float *b, …) reads a and b and writes neither");
	ok(d[BUF_C][1] == 1 && d[BUF_S1][0] == 0 && d[BUF_BIG][0] == 0 && d[BUF_BIG][1] == 0,
	   "it writes c, and touches no other buffer");
	wire_kernel k = { 0 };
	e = peer_kernel(&t.p, "_Z3addPKfS0_Pfi", &k);
	ok(e == 0 && k.launches == 1 && k.nparams == 4 && k.reads == 3 && k.writes == 1 &&
		   k.bytes_written == APP_N * 4,
	   "its kernel counters say 1 launch of 4 parameters, 3 buffers read, 1 written (%llu bytes)",
	   (unsigned long long)k.bytes_written);
	ok(traced_cmd(&t, 'v') == 'y', "the program computes the right results under the tracer");
	ok(traced_cmd(&t, 'm') == 'y', "100000 small allocations share slabs instead of costing a VMM object each");
	free(v);
	free(w);
	int st = traced_stop(&t);

	traced off;
	int started = traced_start(&off, argv[0], 0) == 0;
	ok(st == 0 && started && traced_hello(&off, 1500) == -ETIMEDOUT && traced_cmd(&off, 'v') == 'y',
	   "with PHOS_TRACE=0 the program runs without registering");
	if (started)
		traced_stop(&off);
	return done();
}
