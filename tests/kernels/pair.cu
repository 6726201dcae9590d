/* SPDX-License-Identifier: GPL-2.0-only */
// The kernel of tests/apps/pair_app: two processes meet, as the ranks of
// an all-reduce do, through memory both map. simcuda runs the host
// implementation in pair_app.c; on a GPU the pointers would be mapped
// host memory.

// meet: publishes this rank's value for step, waits for the peer's, and
// writes their sum to out.
extern "C" __global__ void meet(volatile unsigned *slots, volatile unsigned *vals, unsigned rank, unsigned step,
				unsigned *out)
{
	unsigned me = rank & 1, peer = me ^ 1, at = (step & 1) * 2;
	vals[at + me] = step * 3 + rank * 7;
	__threadfence_system();
	slots[me] = step;
	while (slots[peer] < step)
		;
	__threadfence_system();
	*out = vals[at] + vals[at + 1];
}
