/*
 * Eager restore: all device memory is back before the process runs.
 *
 *   1. open the image (its structure is checked) and fill new device
 *      allocations from it, chunk checksums checked as they are read;
 *   2. criu restore;
 *   3. driver restore (with gpuPairs when GPUs move: devices.c) and
 *      unlock;
 *   4. wake the tracer, which maps the allocations at their old addresses
 *      and resumes the application.
 *
 * A bad image fails at 1, before anything is started.
 */
#include <time.h>

#include "steps.h"

int restore_eager(const restore_args *a, char *err, size_t errlen)
{
	engine_progress *prog = a->prog;
	uint64_t t0 = engine_now_ns();
	restore_ctx c;
	engine_parked objs = { 0 };
	int e = restore_begin(a, &c, err, errlen);
	if (!e) {
		atomic_store(&prog->total, c.in->raw_bytes);
		engine_step(prog, STEP_FILL);
		e = engine_copy_in(c.img, &c.map, NULL, a->fill_threads, &objs, prog, err, errlen);
	}
	if (!e)
		e = restore_tree(a, &c, err, errlen);
	for (uint32_t i = 0; !e && i < c.n; i++) {
		engine_parked mine = engine_parked_of(&objs, c.m[i].pid);
		pid_t tid = restore_tracer_of(&c, i, &mine, err, errlen);
		if (tid < 0)
			e = tid;
		else if (tid > 0 && a->tracer) {
			engine_step(prog, STEP_UNPARK);
			e = engine_unpark(c.host[i], tid, a->tracer, &mine, NULL, err, errlen);
			if (!e)
				restore_served(a, c.host[i]);
		}
	}
	engine_parked_free(&objs);
	if (!e)
		restore_resumed(a, &c, t0);
	e = restore_finish(a, &c, t0, e, err, errlen);
	restore_end(&c, e);
	return e;
}
