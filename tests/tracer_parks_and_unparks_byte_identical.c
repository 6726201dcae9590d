/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Park and unpark under the test peer: the tracer hands every device
 * memory object over as an fd and releases it, the program's own VMM
 * allocation too, after which the driver's checkpoint would copy 0 device
 * bytes; the fds come back, are mapped at the same VAs, and every byte is
 * as before; twice in a row. Afterwards the program still unmaps and
 * releases its own allocation by its original handle.
 */
#include "tracer_test.h"

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	plan(10);
	traced t;
	if (traced_start(&t, argv[0], 1) || traced_hello(&t, 5000))
		bail("the traced program did not start");
	ok(traced_cmd(&t, 'l') == 'y', "the program has computed c = a + b");

	char err[160] = "";
	int e = peer_park(&t.p, err, sizeof(err));
	int app_objs = 0;
	for (int i = 0; i < t.p.nobjs; i++)
		app_objs += (t.p.objs[i].flags & WIRE_OBJ_APP) != 0;
	ok(e == 0 && t.p.nobjs >= 5 && t.p.ndevs == 1 && t.p.devs[0].ordinal == 0 && t.p.devs[0].uuid[0] == 0x51,
	   "park says the process's GPU (%d) and hands over %d device memory objects as fds (%s)", t.p.ndevs,
	   t.p.nobjs, err);
	ok(app_objs == 1, "the program's own VMM allocation is one of them");
	uint64_t bytes = 1;
	e = cuCheckpointProcessLock(t.pid, NULL) || cuCheckpointProcessCheckpoint(t.pid, NULL);
	int be = simcuda_checkpoint_bytes(t.pid, &bytes);
	ok(e == 0 && be == 0 && bytes == 0, "the driver's checkpoint of the parked process copies %llu device bytes",
	   (unsigned long long)bytes);
	e = cuCheckpointProcessRestore(t.pid, NULL) || cuCheckpointProcessUnlock(t.pid, NULL);
	ok(e == 0 && peer_unpark(&t.p) == 0, "unpark maps the same fds at the same VAs");
	ok(traced_cmd(&t, 'v') == 'y', "every byte of every buffer is as before");

	wire_buffer *v;
	size_t n;
	int present = peer_list(&t.p, &v, &n) == 0 && n == APP_LISTED;
	for (size_t i = 0; present && i < n; i++)
		present = v[i].state == WIRE_PRESENT;
	ok(present && table_matches(t.p.table, v, n, t.pid),
	   "the buffers are listed present again, and a new state table mirrors them");

	free(v);
	e = traced_cycle(&t, simcuda_checkpoint_bytes, &bytes, err, sizeof(err));
	ok(e == 0 && bytes == 0 && traced_cmd(&t, 'v') == 'y', "a second park and unpark keeps them intact too");
	ok(traced_cmd(&t, 'r') == 'y', "the program unmaps and releases its own allocation by its original handle");
	int gone = peer_list(&t.p, &v, &n) == 0 && n == APP_NBUF && !find_buffer(v, n, t.lay.vmm_va);
	free(v);
	ok(gone, "and it leaves the buffer table");
	traced_stop(&t);
	return done();
}
