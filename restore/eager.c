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
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../engine/driver.h"
#include "restore.h"

/* The processes of the image: its members, or (an image of one process
 * from before format 1.2) the process alone. */
static int members_of(const phosimg_info *in, phosimg_member **out, uint32_t *n)
{
	uint32_t k = in->meta.member_count ? in->meta.member_count : 1;
	phosimg_member *m = calloc(k, sizeof(*m));
	if (!m)
		return -ENOMEM;
	if (in->meta.member_count)
		memcpy(m, in->meta.members, k * sizeof(*m));
	else
		m[0] = (phosimg_member){ .pid = in->meta.pid, .flags = PHOSIMG_MEMBER_CUDA | PHOSIMG_MEMBER_TRACED };
	*out = m;
	*n = k;
	return 0;
}

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
	phosimg_member *m = NULL;
	uint32_t n = 0;
	e = members_of(in, &m, &n);
	if (e) {
		phosimg_close(img);
		return engine_fail(e, err, errlen, "out of memory");
	}
	/* CRIU gives every process its old pid. A process just killed may
	 * be a zombie for a moment: wait for it. */
	for (uint32_t i = 0; i < n; i++) {
		for (int t = 0; t < 50 && engine_alive(m[i].pid); t++)
			usleep(100000);
		if (engine_alive(m[i].pid)) {
			e = engine_fail(-EBUSY, err, errlen,
					"process %d is running: restoring needs its pid free (end it first)",
					(int)m[i].pid);
			break;
		}
	}
	if (e) {
		free(m);
		phosimg_close(img);
		return e;
	}
	e = driver_open(err, errlen);
	engine_devmap map;
	if (!e)
		e = restore_devices(in, a->devices, &map, prog->devices, sizeof(prog->devices), err, errlen);
	engine_parked objs = { 0 };
	bool restored = false;
	atomic_store(&prog->total, in->raw_bytes);
	engine_step(prog, STEP_FILL);
	if (!e)
		e = engine_copy_in(img, &map, &objs, prog, err, errlen);
	if (!e) {
		engine_step(prog, STEP_RESTORE);
		e = criu_restore(a->criu, phosimg_criu_dir(img), a->log, err, errlen);
		restored = !e;
	}
	phosimg_close(img);
	for (uint32_t i = 0; !e && i < n; i++) {
		int state = 0;
		if (driver_process_state(m[i].pid, &state) == 0 && state == CU_PROCESS_STATE_CHECKPOINTED) {
			engine_step(prog, STEP_UNLOCK);
			e = driver_restore(m[i].pid, &map, err, errlen);
			if (!e)
				e = driver_unlock(m[i].pid, err, errlen);
		}
	}
	for (uint32_t i = 0; !e && i < n; i++) {
		engine_parked mine = engine_parked_of(&objs, m[i].pid);
		if (!(m[i].flags & PHOSIMG_MEMBER_TRACED) && !mine.n)
			continue;
		pid_t tid = engine_find_control_thread(m[i].pid);
		if (tid > 0 && a->tracer) {
			engine_step(prog, STEP_UNPARK);
			e = engine_unpark(m[i].pid, tid, a->tracer, &mine, NULL, err, errlen);
		} else if (mine.n) {
			e = engine_fail(-EPROTO, err, errlen,
					"the image holds device memory of process %d, but the restored process has no tracer",
					(int)m[i].pid);
		}
	}
	engine_parked_free(&objs);
	if (e && restored) {
		/* Half restored is worse than not restored: the image stays. */
		for (uint32_t i = 0; i < n; i++)
			kill(m[i].pid, SIGKILL);
	}
	free(m);
	return e;
}
