/*
 * The stop-the-world and copy-on-write protocols, and recopy's final
 * stall (doc/ARCHITECTURE.md, "The checkpoint protocols"):
 *
 *   1-2. quiesce and park (traced processes only)
 *   3.   driver lock and checkpoint (CUDA processes only)
 *   4.   criu dump, --leave-running unless kill
 *   5.   stop: copy the parked memory off the GPU, into staging
 *        cow:  make each traced process's CoW table and shadow pool
 *   6.   driver restore and unlock
 *   7.   unpark (cow: with the table); the stall ends here
 *   8.   stop: the staged memory is written into the image
 *        cow: the parked memory is copied while the processes run
 *   9.   publish the image
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

/* Makes devs (n, by ordinal) the GPUs process p sees: each of its ordinals
 * becomes the description of the GPU with its UUID. */
static void see_as(phosimg_device *devs, uint32_t n, const engine_parked *p)
{
	phosimg_device here[PHOSIMG_DEVICES_MAX];
	memcpy(here, devs, n * sizeof(*devs));
	for (uint32_t d = 0; d < p->ndev && d < n; d++) {
		for (uint32_t j = 0; j < n; j++)
			if (!memcmp(here[j].uuid, p->dev_uuid[d], 16))
				devs[d] = here[j];
		devs[d].ordinal = d;
		memcpy(devs[d].uuid, p->dev_uuid[d], 16);
	}
}

const char *engine_step_name(int step)
{
	static const char *const names[] = { "idle",   "park",    "driver-checkpoint", "criu-dump",
					     "copy",   "driver-restore", "unpark", "publish",
					     "fill",   "criu-restore",   "drain",  "track", "lazy-fill", "prepare",
					     "pid-wait", "done" };
	return step >= 0 && step <= STEP_DONE ? names[step] : "?";
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
	uint64_t now = engine_now_ns();
	int was = atomic_exchange(&p->step, step);
	uint64_t at = atomic_exchange(&p->step_at, now);
	if (at && was > STEP_IDLE && was < STEP_DONE)
		atomic_fetch_add(&p->step_ns[was], now - at);
}

bool engine_alive(pid_t pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

/* What each member of the tree went through, so that exactly that is
 * undone. */
typedef struct member_state {
	bool locked, checkpointed, parked;
	pid_t tid; /* a traced member's control thread */
} member_state;

/* Brings every live member back to running: driver restore and unlock,
 * then unpark. The first error goes to err (if it is still empty). */
static int bring_back(const engine_stop_args *a, const phosimg_member *m, member_state *ms, uint32_t n,
		      const engine_parked *parked, const engine_cow *cow, bool dumped, char *err, size_t errlen)
{
	engine_progress *prog = a->prog;
	int first = 0;
	char msg[ENGINE_ERR_MAX];
	for (uint32_t i = 0; i < n; i++) {
		if (!ms[i].locked || !engine_alive(m[i].pid) || (dumped && a->kill))
			continue;
		engine_step(prog, STEP_UNLOCK);
		int e = ms[i].checkpointed ? driver_restore(m[i].pid, NULL, msg, sizeof(msg)) : 0;
		if (!e)
			e = driver_unlock(m[i].pid, msg, sizeof(msg));
		if (e && !first) {
			first = e;
			if (!*err)
				snprintf(err, errlen, "%s", msg);
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		if (!ms[i].parked || !engine_alive(m[i].pid) || (dumped && a->kill))
			continue;
		engine_step(prog, STEP_UNPARK);
		engine_parked mine = engine_parked_of(parked, m[i].pid);
		int e = engine_unpark(m[i].pid, ms[i].tid, a->tracer, &mine, engine_cow_of(cow, m[i].pid), msg,
				      sizeof(msg));
		if (e && !first) {
			first = e;
			if (!*err)
				snprintf(err, errlen, "%s", msg);
		}
	}
	return first;
}

/* The processes of the tree now, which are traced, and which use CUDA. */
static int members_of(const engine_stop_args *a, phosimg_member **mp, member_state **msp, uint32_t *np, char *err,
		      size_t errlen)
{
	phosimg_member *m = NULL;
	uint32_t n = 0;
	int e = engine_tree(a->pid, &m, &n);
	if (e)
		return engine_fail(e, err, errlen, "process %d is gone", (int)a->pid);
	char tcp[256];
	e = engine_tcp_outside(m, n, tcp, sizeof(tcp));
	if (e) {
		free(m);
		return e < 0 ? engine_fail(e, err, errlen, "cannot list the job's TCP connections: %s", strerror(-e))
			     : engine_fail(-EOPNOTSUPP, err, errlen,
					   "%s; phos checkpoints TCP connections between the job's own processes "
					   "only (data its peer sent during the dump would be lost): close it, or "
					   "checkpoint when none is open",
					   tcp);
	}
	member_state *ms = calloc(n, sizeof(*ms));
	if (!ms) {
		free(m);
		return engine_fail(-ENOMEM, err, errlen, "out of memory");
	}
	for (int t = 0; t < a->ntraced; t++) {
		int i = engine_tree_member(m, n, a->traced[t].pid);
		if (i >= 0) {
			m[i].flags |= PHOSIMG_MEMBER_TRACED;
			ms[i].tid = a->traced[t].control_tid;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		int cstate = 0;
		if (driver_process_state(m[i].pid, &cstate) == 0)
			m[i].flags |= PHOSIMG_MEMBER_CUDA;
	}
	*mp = m;
	*msp = ms;
	*np = n;
	return 0;
}

int engine_stop(const engine_stop_args *a, char *err, size_t errlen)
{
	engine_progress *prog = a->prog;
	int e = driver_open(err, errlen);
	if (e)
		return e;
	phosimg_member *m = NULL;
	member_state *ms = NULL;
	uint32_t n = 0;
	e = members_of(a, &m, &ms, &n, err, errlen);
	if (e)
		return e;

	bool recopy = a->recopy && a->ntraced > 0;
	bool cow = a->cow && !a->kill && a->ntraced > 0 && !recopy;
	uint32_t chunk = a->chunk ? a->chunk : ENGINE_CHUNK;
	int proto = recopy ? PHOSIMG_PROTO_RECOPY : cow ? PHOSIMG_PROTO_COW : PHOSIMG_PROTO_STOP;
	atomic_store(&prog->protocol, proto);
	phosimg_meta meta = { .pid = a->pid, .protocol = (uint32_t)proto, .members = m, .member_count = n };
	char *cmdline = NULL;
	phosimg_device devs[PHOSIMG_DEVICES_MAX];
	e = describe(a->pid, &meta, &cmdline);
	if (e) {
		free(ms);
		free(m);
		return engine_fail(e, err, errlen, "process %d is gone", (int)a->pid);
	}
	if (driver_devices(devs, PHOSIMG_DEVICES_MAX, &meta.device_count) == 0)
		meta.devices = devs;
	/* Pinning is slow: the staging pool is made before the stall. */
	engine_staging staging = { 0 };
	if (a->ntraced)
		e = engine_staging_alloc(&staging, a->staging_fd, a->staging ? a->staging : ENGINE_STAGING, chunk, err,
					 errlen);
	atomic_store(&prog->staging_bytes, staging.bytes);
	atomic_store(&prog->staging_pin_ns, staging.pin_ns);
	phosimg_writer *w = NULL;
	/* One data file per writer: a file takes one writer at a time on
	 * tmpfs (its inode lock), so one file would cap the store's speed. */
	phosimg_writer_opts wo = { .chunk_size = chunk, .stripes = ENGINE_WRITERS };
	if (!e) {
		e = phosimg_writer_create(a->image, &wo, &w);
		if (e)
			engine_fail(e, err, errlen, "cannot start the image: %s",
				    *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	}
	if (e) {
		engine_staging_free(&staging);
		free(cmdline);
		free(ms);
		free(m);
		return e;
	}

	snprintf(prog->data_path, sizeof(prog->data_path), "%s/" PHOSIMG_DATA_FILE,
		 phosimg_writer_tmp_dir(w));
	atomic_store(&prog->data_ready, phosimg_writer_data_ready(w));
	atomic_store(&prog->data_files, wo.stripes);

	engine_parked parked = { 0 };
	engine_cow tables = { 0 };
	bool dumped = false;
	/* Recopy: the processes run on, their writes tracked, while what they
	 * do not write is copied; the stall below is the final one (t2). */
	engine_recopy rc = { 0 };
	if (recopy) {
		meta.t1_ns = engine_clock_ns(CLOCK_REALTIME); /* tracking starts */
		engine_step(prog, STEP_TRACK);
		e = engine_recopy_track(&rc, a->traced, a->ntraced, chunk, err, errlen);
		if (!e)
			e = engine_recopy_copy(&rc, staging.buf, staging.bytes, prog, err, errlen);
		/* The tree may have changed while it ran: the final stall takes
		 * it as it is now. */
		if (!e) {
			free(ms);
			free(m);
			ms = NULL;
			m = NULL;
			e = members_of(a, &m, &ms, &n, err, errlen);
			meta.members = m;
			meta.member_count = n;
		}
		if (e) {
			engine_recopy_free(&rc);
			phosimg_writer_abort(w);
			engine_staging_free(&staging);
			free(cmdline);
			free(ms);
			free(m);
			return e;
		}
	}
	uint64_t t0 = engine_now_ns();
	*(recopy ? &meta.t2_ns : &meta.t1_ns) = engine_clock_ns(CLOCK_REALTIME);
	e = phosimg_writer_set_meta(w, &meta);
	if (e)
		engine_fail(e, err, errlen, "describing the image: %s", strerror(-e));

	/* Every traced member parks, in tree order, parents first. */
	bool view = false;
	if (!e && a->ntraced)
		engine_step(prog, STEP_PARK);
	for (int t = 0; !e && t < a->ntraced; t++) {
		int i = engine_tree_member(m, n, a->traced[t].pid);
		if (i < 0)
			continue; /* it left the tree (it exited) */
		engine_parked mine;
		e = engine_park(m[i].pid, a->traced[t].conn, &mine, err, errlen);
		ms[i].parked = !e;
		/* The image records the GPUs the first process that says sees:
		 * after a restore onto another GPU, their UUIDs are not the
		 * ones phosfs's ordinals have. */
		if (!e && !view && mine.ndev) {
			see_as(devs, meta.device_count, &mine);
			view = true;
		}
		if (!e) {
			e = engine_parked_move(&parked, &mine);
			if (e) {
				engine_parked_free(&mine);
				engine_fail(e, err, errlen, "out of memory");
			}
		}
	}
	if (!e && view) {
		e = phosimg_writer_set_meta(w, &meta);
		if (e)
			engine_fail(e, err, errlen, "describing the image: %s", strerror(-e));
	}
	free(cmdline);
	cmdline = NULL;
	uint64_t total = 0;
	for (int i = 0; i < parked.n; i++)
		total += parked.objs[i].size;
	atomic_store(&prog->total, total);
	engine_copy_opts co = { .chunk = chunk, .staging = staging.buf, .staging_bytes = staging.bytes, .t1_ns = t0,
				.recopy = recopy ? &rc : NULL };
	/* stop and recopy: the parked memory is phosfs's now, and no process
	 * runs on it, so its copy off the GPU starts at once and runs under
	 * the driver's checkpoint and CRIU's dump. stop (and a checkpoint
	 * that kills) lets the processes run again once it is off the GPU
	 * (staging holds the rest meanwhile). recopy lets them run at once:
	 * what is not off the GPU by then is copy-on-write, its CoW tables
	 * sent to the tracers with the unpark, so its final stall does not
	 * wait for the bus or, past staging, the store. */
	bool protect = recopy && !a->kill && parked.n;
	if (!e && protect) {
		e = engine_cow_prepare(&tables, &parked, chunk, a->shadow_pool, COW_MODE_COW, err, errlen);
		if (!e)
			co.cow = &tables;
	}
	engine_copy *copy = NULL;
	if (!e && parked.n && !cow) {
		engine_step(prog, STEP_COPY);
		e = engine_copy_begin(&parked, w, &co, prog, &copy, err, errlen);
		/* What the final stall copies: the rest came from staging. */
		if (!e && recopy)
			atomic_store(&prog->recopy_dirty, total - atomic_load(&prog->recopy_clean));
	}
	/* Then every CUDA member is locked, and only then checkpointed: no
	 * member is checkpointed while another still runs on the device. */
	if (!e)
		engine_step(prog, STEP_LOCK);
	for (uint32_t i = 0; !e && i < n; i++)
		if (m[i].flags & PHOSIMG_MEMBER_CUDA) {
			e = driver_lock(m[i].pid, LOCK_TIMEOUT_MS, err, errlen);
			ms[i].locked = !e;
		}
	for (uint32_t i = 0; !e && i < n; i++)
		if (ms[i].locked) {
			e = driver_checkpoint(m[i].pid, err, errlen);
			ms[i].checkpointed = !e;
		}
	if (!e) {
		engine_step(prog, STEP_DUMP);
		e = criu_dump(a->criu, a->pid, phosimg_writer_criu_dir(w), a->kill, a->log, err, errlen);
		dumped = !e;
	}
	if (!e && copy && !protect) {
		engine_step(prog, STEP_COPY);
		if (engine_copy_wait_off(copy)) {
			e = engine_copy_end(copy, err, errlen);
			copy = NULL;
		}
	}
	/* recopy: a copy that failed already is not protected. */
	if (!e && copy && protect && engine_copy_error(copy)) {
		e = engine_copy_end(copy, err, errlen);
		copy = NULL;
	}
	if (!e && cow)
		e = engine_cow_prepare(&tables, &parked, chunk, a->shadow_pool, COW_MODE_COW, err, errlen);

	/* A failed checkpoint's copy is not wanted: it stops now rather than
	 * fill the store with what is thrown away. */
	if (e && copy)
		engine_copy_cancel(copy);

	/* Bring the live processes back, whatever happened above. */
	char err2[ENGINE_ERR_MAX] = "";
	int e2 = bring_back(a, m, ms, n, &parked, !e && (cow || protect) ? &tables : NULL, dumped, err2, sizeof(err2));
	free(ms);
	free(m);
	atomic_store(&prog->stall_ns, engine_now_ns() - t0);
	if (!e && e2) {
		e = e2;
		snprintf(err, errlen, "%s", err2);
		/* Its image is not wanted: the processes that run under CoW
		 * are let go at once. */
		if (copy && protect)
			engine_copy_cancel(copy);
	}
	if (copy) {
		engine_step(prog, protect ? STEP_COPY : STEP_DRAIN);
		char cerr[ENGINE_ERR_MAX] = "";
		int ce = engine_copy_end(copy, cerr, sizeof(cerr));
		/* A full store fails CRIU's dump as well (its files go there
		 * too, while the copy runs): then the copy says the cause,
		 * unless the processes could not be brought back, which says
		 * more. */
		if (ce && (!e || ((ce == -ENOSPC || ce == -EDQUOT) && !e2))) {
			e = ce;
			snprintf(err, errlen, "%s", cerr);
		}
	}
	/* CoW: the processes run; their t1 memory is copied now. */
	if (!e && cow) {
		engine_step(prog, STEP_COPY);
		co.cow = &tables;
		e = engine_copy_out(&parked, w, &co, prog, err, errlen);
	}
	if (cow || protect)
		engine_cow_stats(&tables, prog);
	engine_cow_free(&tables);
	engine_recopy_free(&rc);
	engine_parked_free(&parked);
	engine_staging_free(&staging);
	if (e) {
		phosimg_writer_abort(w);
		return e;
	}
	engine_step(prog, STEP_PUBLISH);
	e = phosimg_writer_finish(w);
	if (e)
		return engine_fail(e, err, errlen, "publishing the image failed: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	atomic_store(&prog->publish_ns, engine_now_ns() - t0);
	return 0;
}
