/*
 * The stop-the-world protocol (DESIGN.md, "Protocols: Stop"):
 *
 *   1-2. quiesce and park (traced processes only)
 *   3.   driver lock and checkpoint (CUDA processes only)
 *   4.   criu dump, --leave-running unless kill
 *   5.   copy the parked memory into the image
 *   6.   driver restore and unlock
 *   7.   unpark; then the image is published
 *
 * Whatever fails, a process that is still alive is brought back to
 * running before the error is returned, and nothing is published.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

#define LOCK_TIMEOUT_MS 10000

const char *engine_step_name(int step)
{
	static const char *const names[] = { "idle",   "park",    "driver-checkpoint", "criu-dump",
					     "copy",   "driver-restore", "unpark", "publish",
					     "fill",   "criu-restore",   "done" };
	return step >= 0 && step <= STEP_DONE ? names[step] : "?";
}

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The process's argv, uid and gid, for the manifest. */
static int describe(pid_t pid, phosimg_meta *m, char **cmdline)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -ESRCH;
	char *buf = malloc(PHOSIMG_CMDLINE_MAX);
	size_t n = buf ? fread(buf, 1, PHOSIMG_CMDLINE_MAX, f) : 0;
	fclose(f);
	if (!buf)
		return -ENOMEM;
	if (n == PHOSIMG_CMDLINE_MAX)
		buf[n - 1] = 0;
	*cmdline = buf;
	m->cmdline = buf;
	m->cmdline_len = n;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	char line[256];
	while (f && fgets(line, sizeof(line), f)) {
		unsigned a;
		if (sscanf(line, "Uid: %u", &a) == 1)
			m->uid = a;
		else if (sscanf(line, "Gid: %u", &a) == 1)
			m->gid = a;
	}
	if (f)
		fclose(f);
	return 0;
}

void engine_step(engine_progress *p, int step)
{
	uint64_t now = now_ns(CLOCK_MONOTONIC);
	int was = atomic_exchange(&p->step, step);
	uint64_t at = atomic_exchange(&p->step_at, now);
	if (at && was > STEP_IDLE && was < STEP_DONE)
		atomic_fetch_add(&p->step_ns[was], now - at);
}

bool engine_alive(pid_t pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

int engine_stop(const engine_stop_args *a, char *err, size_t errlen)
{
	engine_progress *prog = a->prog;
	int e = driver_open(err, errlen);
	if (e)
		return e;
	phosimg_meta meta = { .pid = a->pid, .protocol = PHOSIMG_PROTO_STOP };
	char *cmdline = NULL;
	phosimg_device devs[PHOSIMG_DEVICES_MAX];
	e = describe(a->pid, &meta, &cmdline);
	if (e)
		return engine_fail(e, err, errlen, "process %d is gone", (int)a->pid);
	if (driver_devices(devs, PHOSIMG_DEVICES_MAX, &meta.device_count) == 0)
		meta.devices = devs;
	phosimg_writer *w = NULL;
	phosimg_writer_opts wo = { .chunk_size = ENGINE_CHUNK };
	e = phosimg_writer_create(a->image, &wo, &w);
	if (e) {
		free(cmdline);
		return engine_fail(e, err, errlen, "cannot start the image: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	}

	snprintf(prog->data_path, sizeof(prog->data_path), "%s/" PHOSIMG_DATA_FILE,
		 phosimg_writer_tmp_dir(w));
	atomic_store(&prog->data_ready, phosimg_writer_data_ready(w));

	engine_parked parked = { 0 };
	bool is_parked = false, locked = false, checkpointed = false, dumped = false;
	int cstate = 0;
	bool cuda = driver_process_state(a->pid, &cstate) == 0;
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	meta.t1_ns = now_ns(CLOCK_REALTIME);
	e = phosimg_writer_set_meta(w, &meta);
	free(cmdline);
	if (e)
		engine_fail(e, err, errlen, "describing the image: %s", strerror(-e));

	if (!e && a->tracer) {
		engine_step(prog, STEP_PARK);
		e = engine_park(a->tracer->conn, &parked, err, errlen);
		is_parked = !e;
		uint64_t total = 0;
		for (int i = 0; i < parked.n; i++)
			total += parked.objs[i].size;
		atomic_store(&prog->total, total);
	}
	if (!e && cuda) {
		engine_step(prog, STEP_LOCK);
		e = driver_lock(a->pid, LOCK_TIMEOUT_MS, err, errlen);
		locked = !e;
		if (!e)
			e = driver_checkpoint(a->pid, err, errlen);
		checkpointed = locked && !e;
	}
	if (!e) {
		engine_step(prog, STEP_DUMP);
		e = criu_dump(a->criu, a->pid, phosimg_writer_criu_dir(w), a->kill, a->log, err, errlen);
		dumped = !e;
	}
	if (!e && a->tracer) {
		engine_step(prog, STEP_COPY);
		e = engine_copy_out(&parked, w, prog, err, errlen);
	}

	/* Bring a live process back, whatever happened above. */
	char err2[ENGINE_ERR_MAX] = "";
	int e2 = 0;
	bool running = engine_alive(a->pid) && !(dumped && a->kill);
	if (running && locked) {
		engine_step(prog, STEP_UNLOCK);
		if (checkpointed)
			e2 = driver_restore(a->pid, err2, sizeof(err2));
		if (!e2)
			e2 = driver_unlock(a->pid, err2, sizeof(err2));
	}
	if (running && is_parked) {
		engine_step(prog, STEP_UNPARK);
		int e3 = engine_unpark(a->pid, a->tracer, &parked, e2 ? NULL : err2, sizeof(err2));
		e2 = e2 ? e2 : e3;
	}
	engine_parked_free(&parked);
	atomic_store(&prog->stall_ns, now_ns(CLOCK_MONOTONIC) - t0);
	if (!e && e2) {
		e = e2;
		snprintf(err, errlen, "%s", err2);
	}
	if (e) {
		phosimg_writer_abort(w);
		return e;
	}
	engine_step(prog, STEP_PUBLISH);
	e = phosimg_writer_finish(w);
	if (e)
		return engine_fail(e, err, errlen, "publishing the image failed: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	return 0;
}
