/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A park lowers every context's stack limit (CU_LIMIT_STACK_SIZE) to 0, so
 * that the driver's checkpoint saves none of the local memory it sizes
 * (1 GiB at the program's 4096 bytes on 132 x 2048 threads); unpark sets
 * the program's limit back. With PHOS_STACK_SHRINK=0 the limit stays and
 * the checkpoint saves it. Either way the program reads its own limit and
 * every byte of its buffers as before.
 */
#include "tracer_test.h"

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	plan(7);
	const uint64_t want = (uint64_t)APP_STACK * 132 * 2048;
	char err[160] = "";
	uint64_t local;
	for (int keep = 0; keep <= 1; keep++) {
		if (keep)
			setenv("PHOS_STACK_SHRINK", "0", 1);
		traced t;
		if (traced_start(&t, argv[0], 1) || traced_hello(&t, 5000))
			bail("the traced program did not start");
		int set = traced_cmd(&t, 'k') == 'y' && traced_cmd(&t, 'l') == 'y';
		int e = traced_cycle(&t, simcuda_checkpoint_local_bytes, &local, err, sizeof(err));
		if (!keep) {
			ok(set && e == 0 && local == 0,
			   "with its stack limit at %d bytes, the driver's checkpoint of the parked program saves "
			   "%llu bytes of local memory (%s)",
			   APP_STACK, (unsigned long long)local, err);
			ok(traced_cmd(&t, 'K') == 'y' && traced_cmd(&t, 'v') == 'y',
			   "after unpark its limit is %d bytes again and its buffers are intact", APP_STACK);
			e = traced_cycle(&t, simcuda_checkpoint_local_bytes, &local, err, sizeof(err));
			ok(e == 0 && local == 0 && traced_cmd(&t, 'K') == 'y', "so too at a second park");
		} else {
			ok(set && e == 0 && local == want,
			   "with PHOS_STACK_SHRINK=0 the checkpoint saves its %llu bytes of local memory (%llu expected)",
			   (unsigned long long)local, (unsigned long long)want);
			ok(traced_cmd(&t, 'K') == 'y' && traced_cmd(&t, 'v') == 'y',
			   "and the limit and buffers are as before");
		}
		ok(traced_stop(&t) == 0, "the program ends cleanly");
		if (keep)
			break;
	}
	unsetenv("PHOS_STACK_SHRINK");
	return done();
}
