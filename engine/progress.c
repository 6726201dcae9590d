/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job's progress and errors (progress.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "progress.h"

const char *engine_step_name(int step)
{
	static const char *const names[] = { "idle",   "park",    "driver-checkpoint", "criu-dump",
					     "copy",   "driver-restore", "unpark", "publish",
					     "fill",   "criu-restore",   "drain",  "track", "lazy-fill", "prepare",
					     "pid-wait", "cut", "criu-pages", "hold", "done" };
	return step >= 0 && step <= STEP_DONE ? names[step] : "?";
}

void engine_step(engine_progress *p, int step)
{
	uint64_t now = engine_now_ns();
	int was = atomic_exchange(&p->step, step);
	uint64_t at = atomic_exchange(&p->step_at, now);
	if (at && was > STEP_IDLE && was < STEP_DONE)
		atomic_fetch_add(&p->step_ns[was], now - at);
}
