/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The stall every checkpoint protocol shares (stall.h;
 * doc/ARCHITECTURE.md, "The checkpoint protocols"):
 *
 *   0.   stall_begin: the tree, staging, the image's writer
 *   1-2. stall_enter: quiesce and park (traced processes only)
 *   3-4. stall_freeze: CRIU started (it readies itself), driver lock and
 *        checkpoint (CUDA processes only), then CRIU told to dump,
 *        --leave-running unless kill
 *   6-7. stall_leave: driver restore and unlock, unpark (with the CoW
 *        table when the protocol made one); the stall ends here
 *   9.   stall_publish
 *
 * stall_leave brings back whatever stall_enter and stall_freeze did,
 * failed or not; stall_free is the one undo of the rest. Step 5 and 8
 * are each protocol's own (checkpoint.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/procstatus.h"
#include "../engine/criu-image.h"
#include "stall.h"


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
	/* The real ids: the first of each line. */
	char id[128];
	if (!proc_status_field(pid, "Uid", id, sizeof(id)))
		m->uid = (uint32_t)strtoul(id, NULL, 10);
	if (!proc_status_field(pid, "Gid", id, sizeof(id)))
		m->gid = (uint32_t)strtoul(id, NULL, 10);
	return 0;
}

/* Which members a step is for. */
static bool is_cuda(const ckpt *k, uint32_t i)
{
	return k->m[i].flags & PHOSIMG_MEMBER_CUDA;
}

static bool is_locked(const ckpt *k, uint32_t i)
{
	return k->ms[i].locked;
}

/* Whether the checkpoint ended the tree: CRIU killed it, or holds it
 * stopped and no release has let it run on yet. */
static bool ended(const ckpt *k)
{
	return k->dumped && k->a->kill && !k->resumed;
}

/* Those to bring back live, and the checkpoint did not end them. */
static bool to_unlock(const ckpt *k, uint32_t i)
{
	return k->ms[i].locked && engine_alive(k->m[i].pid) && !ended(k);
}

static bool to_unpark(const ckpt *k, uint32_t i)
{
	return k->ms[i].parked && engine_alive(k->m[i].pid) && !ended(k);
}

/* Runs fn on every member that want names, at once or (!together) one
 * after another (step: the step it is, or -1); its first failure into
 * er, if er is still empty. */
static int on_members(ckpt *k, bool (*want)(const ckpt *, uint32_t), int step, const engine_cow *cow, bool together,
		      void *(*fn)(void *), perr *er)
{
	part *v = calloc(k->n ? k->n : 1, sizeof(*v));
	if (!v)
		return *er->msg ? -ENOMEM : pr_err(er, -ENOMEM, "out of memory");
	int n = 0;
	for (uint32_t i = 0; i < k->n; i++)
		if (want(k, i))
			v[n++] = (part){ .k = k, .i = (int)i, .cow = cow };
	if (n && step >= 0)
		engine_step(k->prog, step);
	if (together)
		stall_at_once(v, n, fn);
	else
		for (int j = 0; j < n; j++)
			fn(&v[j]);
	perr msg = { 0 };
	int e = stall_first_failure(v, n, &msg);
	if (e && !*er->msg)
		pr_copy(er, &msg);
	free(v);
	return e;
}

static void *resume_one(void *arg)
{
	part *p = arg;
	pid_t pid = p->k->m[p->i].pid;
	p->e = p->k->ms[p->i].checkpointed ? driver_restore(pid, NULL, &p->er) : 0;
	if (!p->e)
		p->e = driver_unlock(pid, &p->er);
	return NULL;
}

static void *unpark_one(void *arg)
{
	part *p = arg;
	ckpt *k = p->k;
	pid_t pid = k->m[p->i].pid;
	engine_parked mine;
	p->e = engine_shares_view(&k->parked, &k->shares, pid, &mine);
	if (p->e)
		pr_err(&p->er, p->e, "out of memory");
	else
		p->e = engine_unpark(pid, k->ms[p->i].tid, k->a->tracer, &mine, engine_cow_of(p->cow, pid), &p->er);
	engine_parked_drop(&mine);
	return NULL;
}

/* Brings every live member back to running: driver restore and unlock,
 * all at once, then unpark, one after another (the job waits for one
 * tracer to come back at a time: job/main.c's rendezvous). The first
 * error goes to er (if it is still empty). */
static int bring_back(ckpt *k, const engine_cow *cow, perr *er)
{
	int e = on_members(k, to_unlock, STEP_UNLOCK, NULL, true, resume_one, er);
	int e2 = on_members(k, to_unpark, STEP_UNPARK, cow, false, unpark_one, er);
	return e ? e : e2;
}

/* An untraced CUDA process that maps memory of another process (CUDA
 * IPC, NCCL's buffers) is checkpointed by the driver, which cannot
 * restore it (CUDA_ERROR_NOT_SUPPORTED for a VMM import,
 * CUDA_ERROR_INVALID_VALUE for legacy IPC: the process is lost). Nothing
 * outside the process shows such a mapping (its maps and fds do not,
 * measured on an H200), so a tree with an untraced CUDA process and
 * another CUDA process is refused: one of them may map the other's. An
 * untraced process alone is checkpointed as cuda-checkpoint does. Errors:
 * -EOPNOTSUPP naming the two processes of m (n). */
static int untraced_shared(const phosimg_member *m, uint32_t n, perr *er)
{
	int untraced = -1, other = -1;
	for (uint32_t i = 0; i < n; i++) {
		if (!(m[i].flags & PHOSIMG_MEMBER_CUDA))
			continue;
		if (untraced < 0 && !(m[i].flags & PHOSIMG_MEMBER_TRACED))
			untraced = (int)i;
		else if (other < 0)
			other = (int)i;
	}
	if (untraced < 0 || other < 0)
		return 0;
	return pr_err(er, -EOPNOTSUPP,
		      "processes %d and %d use CUDA, and %d untraced: if one maps the other's device memory (CUDA "
		      "IPC, NCCL), the driver checkpoints it but cannot restore it; run the job under `phos run`, "
		      "which traces each of its processes",
		      (int)m[untraced].pid, (int)m[other].pid, (int)m[untraced].pid);
}

/* The processes of the tree now, which are traced, and which use CUDA. */
static int members_of(const checkpoint_args *a, phosimg_member **mp, member_state **msp, uint32_t *np, perr *er)
{
	phosimg_member *m = NULL;
	uint32_t n = 0;
	int e = engine_tree(a->pid, &m, &n);
	if (e)
		return pr_err(er, e, "process %d is gone", (int)a->pid);
	char tcp[256];
	e = engine_tcp_outside(m, n, tcp, sizeof(tcp));
	if (e) {
		free(m);
		return e < 0 ? pr_perror(er, e, "cannot list the job's TCP connections")
			     : pr_err(er, -EOPNOTSUPP,
				      "%s; phos checkpoints TCP connections between the job's own processes "
				      "only (data its peer sent during the dump would be lost): close it, or "
				      "checkpoint when none is open",
				      tcp);
	}
	member_state *ms = calloc(n, sizeof(*ms));
	if (!ms) {
		free(m);
		return pr_err(er, -ENOMEM, "out of memory");
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
	e = untraced_shared(m, n, er);
	if (e) {
		free(ms);
		free(m);
		return e;
	}
	*mp = m;
	*msp = ms;
	*np = n;
	return 0;
}

/* How the hold ends: the release phosfs was told, or the deadline's. */
static int held(ckpt *k)
{
	engine_step(k->prog, STEP_HOLD);
	uint64_t until = engine_now_ns() + (uint64_t)k->a->hold_ms * 1000000u;
	while (engine_now_ns() < until && !atomic_load(&k->prog->cancel)) {
		int r = atomic_load(&k->prog->release);
		if (r)
			return r;
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
	return ENGINE_RELEASE_DEADLINE;
}

int stall_hold(ckpt *k, int e, perr *er)
{
	if (!k->a->hold_ms || !k->dumped)
		return e;
	int how = e ? ENGINE_RELEASE_RESUME : held(k);
	bool end = how == ENGINE_RELEASE_KILL;
	for (uint32_t i = 0; i < k->n; i++)
		kill(k->m[i].pid, end ? SIGKILL : SIGCONT);
	atomic_store(&k->prog->released, how);
	if (end)
		return e;
	k->resumed = true;
	perr err2 = { 0 };
	int e2 = bring_back(k, NULL, &err2);
	if (!e && e2) {
		pr_copy(er, &err2);
		return e2;
	}
	return e;
}

void stall_release(ckpt *k)
{
	engine_cow_free(&k->tables);
	engine_recopy_free(&k->rc);
	engine_parked_free(&k->parked);
	engine_shares_free(&k->shares);
	engine_staging_free(&k->staging);
}

void stall_free(ckpt *k)
{
	/* A failed checkpoint's CRIU still ends its snapshots before the
	 * image goes. */
	perr ignored = { 0 };
	criu_dump_wait(&k->tail, &ignored);
	stall_release(k);
	if (k->w)
		phosimg_writer_abort(k->w);
	free(k->cmdline);
	free(k->ms);
	free(k->m);
}

/* What the stall would otherwise pay for, made before it:
 *   - this process's own context on every GPU the traced members hold
 *     memory on (the CoW pools and the copy use them): the driver took
 *     190 ms to make one on an H200 (bench/ddp);
 *   - room in its fd table for every object the members hand over: grown
 *     as they arrive, each doubling waits an RCU grace period.
 * What fails here fails where it is used, with its error there. */
static void ready_for_stall(const checkpoint_args *a)
{
	uint64_t devs = 0, fds = 256;
	for (int t = 0; t < a->ntraced; t++) {
		devs |= a->traced[t].devices;
		fds += a->traced[t].buffers;
	}
	wire_fd_room(fds < INT_MAX ? (int)fds : INT_MAX);
	for (int d = 1; d < 64; d++)
		if (devs >> d & 1)
			driver_use(d, NULL);
	if (devs > 1)
		driver_use(0, NULL);
}

int stall_begin(ckpt *k, const checkpoint_args *a, perr *er)
{
	k->a = a;
	k->prog = a->prog;
	int e = driver_open(er);
	if (!e)
		e = members_of(a, &k->m, &k->ms, &k->n, er);
	if (e)
		return e;
	ready_for_stall(a);
	criu_parallel_pages(a->criu); /* asked now (--help, and so --snapshot-pages), not in the stall */
	k->recopy = a->recopy && a->ntraced > 0;
	k->cow = a->cow && !a->kill && a->ntraced > 0 && !k->recopy;
	k->chunk = a->chunk ? a->chunk : ENGINE_CHUNK;
	k->timeout_ms = a->timeout_ms > 0 ? a->timeout_ms : CHECKPOINT_TIMEOUT_MS;
	k->dump_timeout_s = a->dump_timeout_s > 0 ? a->dump_timeout_s : CHECKPOINT_DUMP_TIMEOUT_S;
	int proto = k->recopy ? PHOSIMG_PROTO_RECOPY : k->cow ? PHOSIMG_PROTO_COW : PHOSIMG_PROTO_STOP;
	atomic_store(&k->prog->protocol, proto);
	k->meta = (phosimg_meta){ .pid = a->pid, .protocol = (uint32_t)proto, .members = k->m, .member_count = k->n };
	e = describe(a->pid, &k->meta, &k->cmdline);
	if (e)
		return pr_err(er, e, "process %d is gone", (int)a->pid);
	if (driver_devices(k->devs, PHOSIMG_DEVICES_MAX, &k->meta.device_count) == 0)
		k->meta.devices = k->devs;
	if (a->ntraced)
		e = engine_staging_alloc(&k->staging, a->staging_fd, a->staging ? a->staging : ENGINE_STAGING, k->chunk,
					 er);
	atomic_store(&k->prog->staging_bytes, k->staging.bytes);
	atomic_store(&k->prog->staging_pin_ns, k->staging.pin_ns);
	if (e)
		return e;
	/* One data file per writer: a file takes one writer at a time on
	 * tmpfs (its inode lock), so one file would cap the store's speed. */
	phosimg_writer_opts wo = { .chunk_size = k->chunk, .stripes = ENGINE_WRITERS };
	e = phosimg_writer_create(a->image, &wo, &k->w);
	if (e)
		return pr_img(er, e, "cannot start the image");
	snprintf(k->prog->data_path, sizeof(k->prog->data_path), "%s/" PHOSIMG_DATA_FILE, phosimg_writer_tmp_dir(k->w));
	atomic_store(&k->prog->data_ready, phosimg_writer_data_ready(k->w));
	atomic_store(&k->prog->data_files, wo.stripes);
	return 0;
}

int stall_retree(ckpt *k, perr *er)
{
	free(k->ms);
	free(k->m);
	k->ms = NULL;
	k->m = NULL;
	int e = members_of(k->a, &k->m, &k->ms, &k->n, er);
	k->meta.members = k->m;
	k->meta.member_count = k->n;
	return e;
}

void stall_at_once(part *v, int n, void *(*fn)(void *))
{
	engine_at_once(v, sizeof(*v), n, fn);
}

int stall_first_failure(const part *v, int n, perr *er)
{
	int e = 0, more = 0;
	for (int j = 0; j < n; j++)
		if (v[j].e && !e) {
			e = v[j].e;
			pr_copy(er, &v[j].er);
		} else if (v[j].e) {
			more++;
		}
	if (more)
		pr_append(er, " (and %d more process%s)", more, more > 1 ? "es" : "");
	return e;
}

static void *hold_one(void *arg)
{
	part *p = arg;
	bool sent = false;
	p->e = engine_hold(p->k->m[p->i].pid, p->conn, &sent, &p->er);
	/* Told, it let go of its memory, or may yet: it is brought back. */
	p->k->ms[p->i].parked = sent;
	return NULL;
}

static void *park_one(void *arg)
{
	part *p = arg;
	p->e = engine_park(p->k->m[p->i].pid, p->conn, p->k->timeout_ms, p->keep, &p->got, &p->er);
	p->done_ns = engine_now_ns();
	return NULL;
}

/* Takes what member p handed over into k->parked; the image records the
 * GPUs as the first member that says sees them (*view). */
static int keep(ckpt *k, part *p, bool *view, perr *er)
{
	/* After a restore onto another GPU, the process's UUIDs are not the
	 * ones phosfs's ordinals have. */
	if (!*view && p->got.ndev) {
		see_as(k->devs, k->meta.device_count, &p->got);
		*view = true;
	}
	int e = engine_parked_move(&k->parked, &p->got);
	return e ? pr_err(er, e, "out of memory") : 0;
}

/* 1-2. Every traced member is asked to quiesce and park at once, so that
 * none waits for a peer that is already stopped. Only when all of them
 * answered does each let go of its memory (HELD); if any could not, the
 * others keep theirs and run on, and nothing needs unparking. */
static int park(ckpt *k, perr *er)
{
	int n = 0, e = 0;
	part *v = calloc(k->a->ntraced ? (size_t)k->a->ntraced : 1, sizeof(*v));
	if (!v)
		return pr_err(er, -ENOMEM, "out of memory");
	for (int t = 0; t < k->a->ntraced; t++) {
		int i = engine_tree_member(k->m, k->n, k->a->traced[t].pid);
		if (i >= 0) /* else it left the tree (it exited) */
			v[n++] = (part){ .k = k, .i = i, .conn = k->a->traced[t].conn, .keep = k->a->traced[t].keep };
	}
	if (n)
		engine_step(k->prog, STEP_PARK);
	uint64_t t0 = engine_now_ns();
	stall_at_once(v, n, park_one);
	uint64_t handed = engine_now_ns();
	e = stall_first_failure(v, n, er);
	for (int j = 0; e && j < n; j++)
		if (!v[j].e)
			engine_decline(v[j].conn, "the checkpoint does not go on: another process could not park");
	if (!e) {
		stall_at_once(v, n, hold_one);
		e = stall_first_failure(v, n, er);
	}
	uint64_t released = engine_now_ns();
	if (getenv("PHOS_DEBUG"))
		for (int j = 0; j < n; j++)
			fprintf(stderr, "phosfs job %d: park: asked process %d at %.3f s (CLOCK_MONOTONIC), its answer in at "
					"%.1f ms, all at %.1f ms, released at %.1f ms\n",
				(int)getpid(), (int)k->m[v[j].i].pid, (double)t0 / 1e9,
				(double)(v[j].done_ns - t0) / 1e6, (double)(handed - t0) / 1e6,
				(double)(released - t0) / 1e6);
	bool view = false;
	for (int j = 0; j < n; j++) {
		if (!e && k->ms[v[j].i].parked)
			e = keep(k, &v[j], &view, er);
		engine_parked_free(&v[j].got);
	}
	free(v);
	if (!e && view && (e = phosimg_writer_set_meta(k->w, &k->meta)) != 0)
		pr_perror(er, e, "describing the image");
	/* What one member imported of another's is the owner's object. */
	if (!e)
		e = engine_shares_take(&k->parked, &k->shares, er);
	uint64_t total = 0;
	for (int i = 0; i < k->parked.n; i++)
		total += k->parked.objs[i].size;
	atomic_store(&k->prog->total, total);
	atomic_store(&k->prog->park_handed_ns, handed - t0);
	atomic_store(&k->prog->park_released_ns, released - handed);
	atomic_store(&k->prog->park_kept_ns, engine_now_ns() - released);
	atomic_store(&k->prog->park_objects, (uint64_t)k->parked.n);
	return e;
}

int stall_enter(ckpt *k, perr *er)
{
	k->t0 = engine_now_ns();
	*(k->recopy ? &k->meta.t2_ns : &k->meta.t1_ns) = engine_clock_ns(CLOCK_REALTIME);
	int e = phosimg_writer_set_meta(k->w, &k->meta);
	if (e)
		return pr_perror(er, e, "describing the image");
	e = cut_run(k, er);
	if (!e)
		e = park(k, er);
	if (e)
		cut_end(k); /* the members that did not park run on */
	return e;
}

static void *lock_one(void *arg)
{
	part *p = arg;
	p->e = driver_lock(p->k->m[p->i].pid, (unsigned)p->k->timeout_ms, &p->er);
	p->k->ms[p->i].locked = !p->e;
	return NULL;
}

static void *checkpoint_one(void *arg)
{
	part *p = arg;
	p->e = driver_checkpoint(p->k->m[p->i].pid, &p->er);
	p->k->ms[p->i].checkpointed = !p->e;
	return NULL;
}

/* What CRIU's dump measured, for status; none if it wrote no stats. */
static void dump_stats(ckpt *k)
{
	criu_dump_stats cs;
	if (criu_dump_stats_read(phosimg_writer_criu_dir(k->w), &cs))
		return;
	atomic_store(&k->prog->criu_freezing_us, cs.freezing_us);
	atomic_store(&k->prog->criu_frozen_us, cs.frozen_us);
	atomic_store(&k->prog->criu_memdump_us, cs.memdump_us);
	atomic_store(&k->prog->criu_memwrite_us, cs.memwrite_us);
	atomic_store(&k->prog->criu_pages, cs.pages_written);
	atomic_store(&k->prog->criu_shpages, cs.shpages_written);
}

/* No member is checkpointed while another still runs on the device. */
int stall_freeze(ckpt *k, perr *er)
{
	engine_step(k->prog, STEP_LOCK);
	/* CRIU readies itself (--start-fd) while the driver works: it seizes
	 * the tree at criu_dump_go. */
	criu_dumper d;
	int leave = k->a->hold_ms ? CRIU_LEAVE_STOPPED : k->a->kill ? CRIU_LEAVE_KILLED : CRIU_LEAVE_RUNNING;
	int e = criu_dump_ready(k->a->criu, k->a->pid, phosimg_writer_criu_dir(k->w), leave, k->dump_timeout_s,
				k->a->log, true, &d, er);
	criu_dump_cancel_on(&d, &k->prog->cancel); /* ctl's cancel stops CRIU too */
	/* Every CUDA member is locked at once, each within the checkpoint's
	 * timeout (one that waits for a locked peer would wait for ever);
	 * then the driver checkpoints them at once. */
	if (!e)
		e = on_members(k, is_cuda, -1, NULL, true, lock_one, er);
	if (!e)
		e = on_members(k, is_locked, -1, NULL, true, checkpoint_one, er);
	if (!e) {
		engine_step(k->prog, STEP_DUMP);
		e = criu_dump_go(&d, &k->tail, er);
		k->dumped = !e;
		if (!e && !k->tail.pid)
			dump_stats(k);
	}
	criu_dump_drop(&d);
	return e;
}

int stall_pages(ckpt *k, perr *er)
{
	if (!k->tail.pid)
		return 0;
	engine_step(k->prog, STEP_PAGES);
	int e = criu_dump_wait(&k->tail, er);
	if (!e)
		dump_stats(k);
	return e;
}

int stall_leave(ckpt *k, int e, bool *back, perr *er)
{
	/* A failed checkpoint's copy is not wanted: it stops now rather than
	 * fill the store with what is thrown away. */
	if (e && k->copy)
		engine_copy_cancel(k->copy);
	perr err2 = { 0 };
	const engine_cow *tables = !e && (k->cow || k->protect) ? &k->tables : NULL;
	int e2 = bring_back(k, tables, &err2);
	cut_end(k);
	atomic_store(&k->prog->stall_ns, engine_now_ns() - k->t0);
	if (!e && e2) {
		e = e2;
		pr_copy(er, &err2);
		/* Its image is not wanted: the processes that run under CoW are
		 * let go at once. */
		if (k->copy && k->protect)
			engine_copy_cancel(k->copy);
	}
	*back = !e2;
	return e;
}

/* The progress's fields an image keeps as its stats (FORMAT.md, "STATS"),
 * and when each applies: always, where the tree parked, where CRIU wrote
 * its statistics, under cow or recopy, under recopy, or where it is set. */
enum { ST_ALWAYS, ST_PARKED, ST_CRIU, ST_COW, ST_RECOPY, ST_SET };
#define ST(name, field, when) { name, offsetof(engine_progress, field), when }
static const struct image_stat {
	const char *name;
	size_t at;
	int when;
} image_stats[] = {
	ST("stall_ns", stall_ns, ST_ALWAYS),
	ST("device_bytes", total, ST_ALWAYS),
	ST("off_gpu_ns", off_ns, ST_SET),
	ST("staging_bytes", staging_bytes, ST_ALWAYS),
	ST("staging_pin_ns", staging_pin_ns, ST_ALWAYS),
	ST("park_handed_ns", park_handed_ns, ST_PARKED),
	ST("park_released_ns", park_released_ns, ST_PARKED),
	ST("park_kept_ns", park_kept_ns, ST_PARKED),
	ST("park_objects", park_objects, ST_PARKED),
	ST("criu_freezing_us", criu_freezing_us, ST_CRIU),
	ST("criu_frozen_us", criu_frozen_us, ST_CRIU),
	ST("criu_memdump_us", criu_memdump_us, ST_CRIU),
	ST("criu_memwrite_us", criu_memwrite_us, ST_CRIU),
	ST("criu_pages", criu_pages, ST_CRIU),
	ST("criu_shpages", criu_shpages, ST_CRIU),
	ST("cow_prepare_ns", cow_prepare_ns, ST_COW),
	ST("cow_shadows", shadows, ST_COW),
	ST("cow_shadow_bytes", shadow_bytes, ST_COW),
	ST("cow_waits", waits, ST_COW),
	ST("cow_wait_ns", wait_ns, ST_COW),
	ST("safety_net_waits", net_waits, ST_COW),
	ST("safety_net_wait_ns", net_wait_ns, ST_COW),
	ST("recopy_clean_bytes", recopy_clean, ST_RECOPY),
	ST("recopy_dirty_bytes", recopy_dirty, ST_RECOPY),
};
#undef ST

/* Gives the image what the checkpoint cost so far: the stall, each step's
 * time (publish's own is not known yet) and the counters. They are for
 * people and schedulers: one the writer cannot keep (out of memory) does
 * not fail the checkpoint. */
static void set_image_stats(ckpt *k)
{
	engine_progress *p = k->prog;
	int proto = atomic_load(&p->protocol);
	bool when[] = { [ST_ALWAYS] = true,
			[ST_PARKED] = atomic_load(&p->park_handed_ns) != 0,
			[ST_CRIU] = atomic_load(&p->criu_frozen_us) != 0,
			[ST_COW] = proto == PHOSIMG_PROTO_COW || proto == PHOSIMG_PROTO_RECOPY,
			[ST_RECOPY] = proto == PHOSIMG_PROTO_RECOPY };
	for (size_t i = 0; i < sizeof(image_stats) / sizeof(*image_stats); i++) {
		const struct image_stat *s = &image_stats[i];
		uint64_t v = atomic_load((_Atomic uint64_t *)((char *)p + s->at));
		if (s->when == ST_SET ? v != 0 : when[s->when])
			(void)phosimg_writer_set_stat(k->w, s->name, v);
	}
	for (int st = STEP_PARK; st < STEP_DONE; st++) {
		char name[PHOSIMG_STAT_NAME_MAX + 1];
		uint64_t v = atomic_load(&p->step_ns[st]);
		snprintf(name, sizeof(name), "step_ns.%s", engine_step_name(st));
		if (v && st != STEP_PUBLISH)
			(void)phosimg_writer_set_stat(k->w, name, v);
	}
}

int stall_publish(ckpt *k, perr *er)
{
	engine_step(k->prog, STEP_PUBLISH);
	set_image_stats(k);
	int e = phosimg_writer_finish(k->w);
	k->w = NULL; /* finished or failed, the writer is gone */
	if (e)
		return pr_img(er, e, "publishing the image failed");
	atomic_store(&k->prog->publish_ns, engine_now_ns() - k->t0);
	return 0;
}
