/*
 * Eager restore: all device memory is back before the process runs.
 *
 *   1. open the image (its structure is checked) and fill new device
 *      allocations from it, chunk checksums checked as they are read;
 *   2. criu restore;
 *   3. driver restore and unlock;
 *   4. wake the tracer, which maps the allocations at their old addresses
 *      and resumes the application.
 *
 * A bad image fails at 1, before anything is started.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../engine/driver.h"
#include "restore.h"

int restore_eager(const restore_args *a, char *err, size_t errlen)
{
	engine_progress *prog = a->prog;
	phosimg *img = NULL;
	int e = phosimg_open(a->image, &img);
	if (e)
		return engine_fail(e, err, errlen, "%s", *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	const phosimg_info *in = phosimg_get_info(img);
	pid_t pid = in->meta.pid;
	if (a->pid)
		*a->pid = pid;
	/* A process just killed may be a zombie for a moment: wait for it. */
	for (int i = 0; i < 50 && engine_alive(pid); i++)
		usleep(100000);
	if (engine_alive(pid)) {
		phosimg_close(img);
		return engine_fail(-EBUSY, err, errlen,
				   "process %d is running: restoring needs its pid free (end it first)", (int)pid);
	}
	e = driver_open(err, errlen);
	engine_parked objs = { 0 };
	bool restored = false;
	atomic_store(&prog->total, in->raw_bytes);
	engine_step(prog, STEP_FILL);
	if (!e)
		e = engine_copy_in(img, &objs, prog, err, errlen);
	if (!e) {
		engine_step(prog, STEP_RESTORE);
		e = criu_restore(a->criu, phosimg_criu_dir(img), a->log, err, errlen);
		restored = !e;
	}
	phosimg_close(img);
	int state = 0;
	if (!e && driver_process_state(pid, &state) == 0 && state == CU_PROCESS_STATE_CHECKPOINTED) {
		engine_step(prog, STEP_UNLOCK);
		e = driver_restore(pid, err, errlen);
		if (!e)
			e = driver_unlock(pid, err, errlen);
	}
	if (!e) {
		pid_t tid = engine_find_control_thread(pid);
		if (tid > 0 && a->tracer) {
			engine_step(prog, STEP_UNPARK);
			a->tracer->control_tid = tid;
			e = engine_unpark(pid, a->tracer, &objs, err, errlen);
		} else if (objs.n) {
			e = engine_fail(-EPROTO, err, errlen,
					"the image holds device memory but the restored process has no tracer");
		}
	}
	engine_parked_free(&objs);
	if (e && restored) {
		/* Half restored is worse than not restored: the image stays. */
		kill(pid, SIGKILL);
	}
	return e;
}
