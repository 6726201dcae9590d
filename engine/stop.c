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

#include "copy-out.h"
#include "criu.h"
#include "driver.h"
#include "recopy.h"
#include "stop.h"
#include "tree.h"

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

/* A checkpoint under way: what engine_stop's steps share, and what
 * ckpt_free undoes, whatever step it failed at. */
typedef struct ckpt {
	const engine_stop_args *a;
	engine_progress *prog;
	bool recopy, cow;  /* the protocol, as it applies to this tree */
	bool protect;      /* recopy: what is not off the GPU at unpark is CoW */
	bool dumped;       /* CRIU dumped the tree */
	uint32_t chunk;
	phosimg_member *m; /* the tree, and what each member went through */
	member_state *ms;
	uint32_t n;
	phosimg_meta meta;
	char *cmdline;     /* meta's */
	phosimg_device devs[PHOSIMG_DEVICES_MAX];
	engine_staging staging;
	phosimg_writer *w;
	engine_parked parked;
	engine_cow tables;
	engine_recopy rc;
	engine_copy_opts co;
	engine_copy *copy;
	uint64_t t0;       /* the stall's start */
} ckpt;

/* Lets go of the device memory, the tables and the staging pool (again:
 * nothing). */
static void ckpt_release(ckpt *k)
{
	engine_cow_free(&k->tables);
	engine_recopy_free(&k->rc);
	engine_parked_free(&k->parked);
	engine_staging_free(&k->staging);
}

/* The one undo: frees what the checkpoint holds; the image is thrown
 * away unless it was published. */
static void ckpt_free(ckpt *k)
{
	ckpt_release(k);
	if (k->w)
		phosimg_writer_abort(k->w);
	free(k->cmdline);
	free(k->ms);
	free(k->m);
}

/* 0. The tree, its description, the staging pool (pinning is slow: it is
 * made before the stall) and the image's writer. */
static int ckpt_begin(ckpt *k, const engine_stop_args *a, char *err, size_t errlen)
{
	k->a = a;
	k->prog = a->prog;
	int e = driver_open(err, errlen);
	if (!e)
		e = members_of(a, &k->m, &k->ms, &k->n, err, errlen);
	if (e)
		return e;
	k->recopy = a->recopy && a->ntraced > 0;
	k->cow = a->cow && !a->kill && a->ntraced > 0 && !k->recopy;
	k->chunk = a->chunk ? a->chunk : ENGINE_CHUNK;
	int proto = k->recopy ? PHOSIMG_PROTO_RECOPY : k->cow ? PHOSIMG_PROTO_COW : PHOSIMG_PROTO_STOP;
	atomic_store(&k->prog->protocol, proto);
	k->meta = (phosimg_meta){ .pid = a->pid, .protocol = (uint32_t)proto, .members = k->m, .member_count = k->n };
	e = describe(a->pid, &k->meta, &k->cmdline);
	if (e)
		return engine_fail(e, err, errlen, "process %d is gone", (int)a->pid);
	if (driver_devices(k->devs, PHOSIMG_DEVICES_MAX, &k->meta.device_count) == 0)
		k->meta.devices = k->devs;
	if (a->ntraced)
		e = engine_staging_alloc(&k->staging, a->staging_fd, a->staging ? a->staging : ENGINE_STAGING, k->chunk,
					 err, errlen);
	atomic_store(&k->prog->staging_bytes, k->staging.bytes);
	atomic_store(&k->prog->staging_pin_ns, k->staging.pin_ns);
	if (e)
		return e;
	/* One data file per writer: a file takes one writer at a time on
	 * tmpfs (its inode lock), so one file would cap the store's speed. */
	phosimg_writer_opts wo = { .chunk_size = k->chunk, .stripes = ENGINE_WRITERS };
	e = phosimg_writer_create(a->image, &wo, &k->w);
	if (e)
		return engine_fail(e, err, errlen, "cannot start the image: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	snprintf(k->prog->data_path, sizeof(k->prog->data_path), "%s/" PHOSIMG_DATA_FILE, phosimg_writer_tmp_dir(k->w));
	atomic_store(&k->prog->data_ready, phosimg_writer_data_ready(k->w));
	atomic_store(&k->prog->data_files, wo.stripes);
	return 0;
}

/* recopy: the processes run on, their writes tracked, while what they do
 * not write is copied; the stall after this is the final one (t2). */
static int ckpt_track(ckpt *k, char *err, size_t errlen)
{
	k->meta.t1_ns = engine_clock_ns(CLOCK_REALTIME); /* tracking starts */
	engine_step(k->prog, STEP_TRACK);
	int e = engine_recopy_track(&k->rc, k->a->traced, k->a->ntraced, k->chunk, err, errlen);
	if (!e)
		e = engine_recopy_copy(&k->rc, k->staging.buf, k->staging.bytes, k->prog, err, errlen);
	if (e)
		return e;
	/* The tree may have changed while it ran: the final stall takes it as
	 * it is now. */
	free(k->ms);
	free(k->m);
	k->ms = NULL;
	k->m = NULL;
	e = members_of(k->a, &k->m, &k->ms, &k->n, err, errlen);
	k->meta.members = k->m;
	k->meta.member_count = k->n;
	return e;
}

/* 1-2. Every traced member parks, in tree order, parents first; the
 * image records the GPUs as the first that says sees them. */
static int ckpt_park(ckpt *k, char *err, size_t errlen)
{
	bool view = false;
	int e = 0;
	if (k->a->ntraced)
		engine_step(k->prog, STEP_PARK);
	for (int t = 0; !e && t < k->a->ntraced; t++) {
		int i = engine_tree_member(k->m, k->n, k->a->traced[t].pid);
		if (i < 0)
			continue; /* it left the tree (it exited) */
		engine_parked mine;
		e = engine_park(k->m[i].pid, k->a->traced[t].conn, &mine, err, errlen);
		k->ms[i].parked = !e;
		/* After a restore onto another GPU, the process's UUIDs are not
		 * the ones phosfs's ordinals have. */
		if (!e && !view && mine.ndev) {
			see_as(k->devs, k->meta.device_count, &mine);
			view = true;
		}
		if (!e && (e = engine_parked_move(&k->parked, &mine)) != 0) {
			engine_parked_free(&mine);
			engine_fail(e, err, errlen, "out of memory");
		}
	}
	if (!e && view && (e = phosimg_writer_set_meta(k->w, &k->meta)) != 0)
		engine_fail(e, err, errlen, "describing the image: %s", strerror(-e));
	uint64_t total = 0;
	for (int i = 0; i < k->parked.n; i++)
		total += k->parked.objs[i].size;
	atomic_store(&k->prog->total, total);
	return e;
}

/* stop and recopy: the parked memory is phosfs's now, and no process
 * runs on it, so its copy off the GPU starts at once and runs under the
 * driver's checkpoint and CRIU's dump. stop (and a checkpoint that kills)
 * lets the processes run again once it is off the GPU (staging holds the
 * rest meanwhile). recopy lets them run at once: what is not off the GPU
 * by then is copy-on-write, its CoW tables sent to the tracers with the
 * unpark, so its final stall does not wait for the bus or, past staging,
 * the store. */
static int ckpt_copy_start(ckpt *k, char *err, size_t errlen)
{
	k->co = (engine_copy_opts){ .chunk = k->chunk,
				    .staging = k->staging.buf,
				    .staging_bytes = k->staging.bytes,
				    .t1_ns = k->t0,
				    .recopy = k->recopy ? &k->rc : NULL };
	k->protect = k->recopy && !k->a->kill && k->parked.n;
	int e = 0;
	if (k->protect) {
		e = engine_cow_prepare(&k->tables, &k->parked, k->chunk, k->a->shadow_pool, COW_MODE_COW, err, errlen);
		if (!e)
			k->co.cow = &k->tables;
	}
	if (!e && k->parked.n && !k->cow) {
		engine_step(k->prog, STEP_COPY);
		e = engine_copy_begin(&k->parked, k->w, &k->co, k->prog, &k->copy, err, errlen);
		/* What the final stall copies: the rest came from staging. */
		if (!e && k->recopy)
			atomic_store(&k->prog->recopy_dirty,
				     atomic_load(&k->prog->total) - atomic_load(&k->prog->recopy_clean));
	}
	return e;
}

/* 3-4. Every CUDA member is locked, and only then checkpointed (no
 * member is checkpointed while another still runs on the device); then
 * CRIU dumps the tree. */
static int ckpt_freeze(ckpt *k, char *err, size_t errlen)
{
	int e = 0;
	engine_step(k->prog, STEP_LOCK);
	for (uint32_t i = 0; !e && i < k->n; i++)
		if (k->m[i].flags & PHOSIMG_MEMBER_CUDA) {
			e = driver_lock(k->m[i].pid, LOCK_TIMEOUT_MS, err, errlen);
			k->ms[i].locked = !e;
		}
	for (uint32_t i = 0; !e && i < k->n; i++)
		if (k->ms[i].locked) {
			e = driver_checkpoint(k->m[i].pid, err, errlen);
			k->ms[i].checkpointed = !e;
		}
	if (!e) {
		engine_step(k->prog, STEP_DUMP);
		e = criu_dump(k->a->criu, k->a->pid, phosimg_writer_criu_dir(k->w), k->a->kill, k->a->log, err, errlen);
		k->dumped = !e;
	}
	return e;
}

/* 5. Before the processes run again: stop waits until its memory is off
 * the GPU; cow makes the tables. */
static int ckpt_before_unpark(ckpt *k, char *err, size_t errlen)
{
	int e = 0;
	if (k->copy && !k->protect) {
		engine_step(k->prog, STEP_COPY);
		if (engine_copy_wait_off(k->copy)) {
			e = engine_copy_end(k->copy, err, errlen);
			k->copy = NULL;
		}
	}
	/* recopy: a copy that failed already is not protected. */
	if (!e && k->copy && k->protect && engine_copy_error(k->copy)) {
		e = engine_copy_end(k->copy, err, errlen);
		k->copy = NULL;
	}
	if (!e && k->cow)
		e = engine_cow_prepare(&k->tables, &k->parked, k->chunk, k->a->shadow_pool, COW_MODE_COW, err, errlen);
	return e;
}

/* 6-7. The stall ends: every live member is brought back to running,
 * whatever happened before (e). Returns the checkpoint's error; *back
 * says whether bringing them back worked. */
static int ckpt_unpark(ckpt *k, int e, bool *back, char *err, size_t errlen)
{
	/* A failed checkpoint's copy is not wanted: it stops now rather than
	 * fill the store with what is thrown away. */
	if (e && k->copy)
		engine_copy_cancel(k->copy);
	char err2[ENGINE_ERR_MAX] = "";
	const engine_cow *tables = !e && (k->cow || k->protect) ? &k->tables : NULL;
	int e2 = bring_back(k->a, k->m, k->ms, k->n, &k->parked, tables, k->dumped, err2, sizeof(err2));
	atomic_store(&k->prog->stall_ns, engine_now_ns() - k->t0);
	if (!e && e2) {
		e = e2;
		snprintf(err, errlen, "%s", err2);
		/* Its image is not wanted: the processes that run under CoW are
		 * let go at once. */
		if (k->copy && k->protect)
			engine_copy_cancel(k->copy);
	}
	*back = !e2;
	return e;
}

/* 8. The copy's end: stop's staged memory drains into the image, recopy's
 * protected copy ends; cow's copy runs now, while the processes run. */
static int ckpt_drain(ckpt *k, int e, bool back, char *err, size_t errlen)
{
	if (k->copy) {
		engine_step(k->prog, k->protect ? STEP_COPY : STEP_DRAIN);
		char cerr[ENGINE_ERR_MAX] = "";
		int ce = engine_copy_end(k->copy, cerr, sizeof(cerr));
		k->copy = NULL;
		/* A full store fails CRIU's dump as well (its files go there
		 * too, while the copy runs): then the copy says the cause,
		 * unless the processes could not be brought back, which says
		 * more. */
		if (ce && (!e || ((ce == -ENOSPC || ce == -EDQUOT) && back))) {
			e = ce;
			snprintf(err, errlen, "%s", cerr);
		}
	}
	if (!e && k->cow) {
		engine_step(k->prog, STEP_COPY);
		k->co.cow = &k->tables;
		e = engine_copy_out(&k->parked, k->w, &k->co, k->prog, err, errlen);
	}
	if (k->cow || k->protect)
		engine_cow_stats(&k->tables, k->prog);
	return e;
}

/* 9. Publish. */
static int ckpt_publish(ckpt *k, char *err, size_t errlen)
{
	engine_step(k->prog, STEP_PUBLISH);
	int e = phosimg_writer_finish(k->w);
	k->w = NULL; /* finished or failed, the writer is gone */
	if (e)
		return engine_fail(e, err, errlen, "publishing the image failed: %s",
				   *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	atomic_store(&k->prog->publish_ns, engine_now_ns() - k->t0);
	return 0;
}

int engine_stop(const engine_stop_args *a, char *err, size_t errlen)
{
	ckpt k = { 0 };
	int e = ckpt_begin(&k, a, err, errlen);
	if (!e && k.recopy)
		e = ckpt_track(&k, err, errlen);
	if (e) {
		ckpt_free(&k);
		return e;
	}
	/* The stall: from here every process is brought back, whatever
	 * fails. */
	k.t0 = engine_now_ns();
	*(k.recopy ? &k.meta.t2_ns : &k.meta.t1_ns) = engine_clock_ns(CLOCK_REALTIME);
	if ((e = phosimg_writer_set_meta(k.w, &k.meta)) != 0)
		engine_fail(e, err, errlen, "describing the image: %s", strerror(-e));
	if (!e)
		e = ckpt_park(&k, err, errlen);
	if (!e)
		e = ckpt_copy_start(&k, err, errlen);
	if (!e)
		e = ckpt_freeze(&k, err, errlen);
	if (!e)
		e = ckpt_before_unpark(&k, err, errlen);
	bool back = false;
	e = ckpt_unpark(&k, e, &back, err, errlen);
	e = ckpt_drain(&k, e, back, err, errlen);
	ckpt_release(&k);
	if (!e)
		e = ckpt_publish(&k, err, errlen);
	ckpt_free(&k);
	return e;
}
