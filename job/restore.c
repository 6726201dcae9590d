/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A restore (doc/ARCHITECTURE.md, "The restore protocols"): one flat
 * sequence of steps, restore_run at the end of this file, with eager and
 * lazy as its two variants. Lazy's own steps are in lazy.c.
 *
 *   1. begin: open the image (its structure is checked, its CRIU files
 *      against the manifest: all there, of their sizes, and the checksums
 *      of all but the page data), wait for its pids;
 *   2. beside CRIU's restore (3), in two threads: the checksums of CRIU's
 *      page data; and opening the driver, placing the GPUs (devices.c),
 *      (lazy) listing what comes back after the tree runs, and filling
 *      new device memory from the image (eager: all of it; lazy: the
 *      application's own VMM objects and those not mapped), chunk
 *      checksums checked as they are read. CRIU waits at its gate
 *      (engine/criu-gate.h) until both are done, and kills the tree
 *      before it ran where either failed;
 *   3. criu restore;
 *   4. driver restore (gpuPairs when GPUs move) and unlock;
 *   5. lazy: a LAZY table for each process (common/cow.h);
 *   6. wake each tracer with its memory (lazy: and its table), which maps
 *      it at its old addresses: the tree runs;
 *   7. lazy: fill the rest while it runs (lazy.c);
 *   8. finish: wait for CPU pages (lazy-pages), record the times;
 *   9. end: the one undo. A tree half restored is killed.
 *
 * A bad image fails at 1, before anything is started, or at 2, before
 * the tree runs.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/pidns.h"
#include "../engine/criu-gate.h"
#include "../engine/driver.h"
#include "../engine/at-once.h"
#include "../engine/sockets.h"
#include "../engine/timewait.h"
#include "lazy.h"
#include "restore-ctx.h"

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

/* Step 1 once the image is open: its members, their pids. */
static int place(const restore_args *a, restore_ctx *c, perr *er)
{
	if (a->pid)
		*a->pid = c->in->meta.pid;
	int e = members_of(c->in, &c->m, &c->n);
	c->host = e ? NULL : calloc(c->n, sizeof(*c->host));
	if (e || !c->host)
		return pr_err(er, -ENOMEM, "out of memory");
	c->own_ns = c->m[0].flags & PHOSIMG_MEMBER_NS_INIT;
	for (uint32_t i = 0; i < c->n; i++) {
		c->host[i] = c->m[i].pid;
		if (c->own_ns && c->m[i].ns_pid == 2)
			c->job = i; /* the job phos run's init started */
	}
	/* CRIU gives every process its old pid, unless the tree has a pid
	 * namespace of its own. A process just killed may be a zombie for a
	 * moment: wait for it. */
	for (uint32_t i = 0; !c->own_ns && i < c->n; i++) {
		if (engine_alive(c->m[i].pid))
			engine_step(a->prog, STEP_PIDWAIT);
		for (int t = 0; t < 500 && engine_alive(c->m[i].pid); t++)
			usleep(10000);
		pid_t zp = engine_alive(c->m[i].pid) ? engine_zombie_parent(c->m[i].pid) : 0;
		if (zp)
			return pr_err(er, -EBUSY,
				      "process %d has ended, but its parent %d has not reaped it, and a restore "
				      "needs its pid free (a job run with phos run --pid-ns has an init that reaps)",
				      (int)c->m[i].pid, (int)zp);
		if (engine_alive(c->m[i].pid))
			return pr_err(er, -EBUSY,
				      "process %d is running: restoring needs its pid free (end it first)",
				      (int)c->m[i].pid);
	}
	engine_step(a->prog, STEP_PREPARE);
	return 0;
}

/* 1. Opens the image (its structure is checked, its CRIU files against
 * the manifest, but for the checksums of the page data) and waits for its
 * pids to be free. Errors: phosimg_open's and phosimg_verify_criu's (a
 * bad image), -EBUSY (a pid is taken), -ENOMEM; nothing was started. */
static int restore_begin(const restore_args *a, restore_ctx *c, perr *er)
{
	memset(c, 0, sizeof(*c));
	engine_step(a->prog, STEP_PREPARE);
	int e = a->growing ? phosimg_open_growing(a->image, &c->img) : phosimg_open(a->image, &c->img);
	if (e)
		return pr_err(er, e, "%s", *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
	c->in = phosimg_get_info(c->img);
	/* An fd for each object it makes: the table grown now, while no other
	 * thread shares it, costs no RCU grace period (wire_fd_room). */
	wire_fd_room((int)(c->in->object_count < (1u << 24) ? c->in->object_count : 1u << 24) + 256);
	/* What CRIU reads to know what to do is checked before it starts: a
	 * damaged file can make it fail in ways that name no cause, or spin
	 * for good. The page data, most of the bytes, is only copied: its
	 * checksums are checked beside CRIU (step 2). */
	e = phosimg_verify_criu(c->img, PHOSIMG_SUMS_REST);
	if (e)
		return pr_img(er, e, "the image's CRIU files are damaged, nothing was restored");
	return place(a, c, er);
}

/* What runs beside CRIU's restore (step 2), and how it ended. */
typedef struct beside {
	const restore_args *a;
	restore_ctx *c;
	lazy *lz;            /* the lazy variant's plan, or NULL */
	engine_parked *objs; /* what the fill filled */
	criu_gate gate;      /* CRIU's, which the fill's thread opens or shuts */
	pthread_t sums, rest;
	bool sums_run, rest_run; /* threads started, not yet joined */
	atomic_bool rest_done;   /* the fill's thread is at its end */
	int sums_e, rest_e;
	perr sums_er, rest_er;
} beside;

/* The checksums of CRIU's page data. */
static void *beside_sums(void *arg)
{
	beside *b = arg;
	uint64_t t0 = engine_now_ns();
	b->sums_e = phosimg_verify_criu(b->c->img, PHOSIMG_SUMS_PAGES);
	atomic_store(&b->a->prog->beside_sums_ns, engine_now_ns() - t0);
	if (b->sums_e) {
		pr_img(&b->sums_er, b->sums_e, "the image's CRIU files are damaged, nothing was restored");
		criu_gate_say(&b->gate, false); /* at once: CRIU need not wait for the fill */
	}
	return NULL;
}

/* The driver, the GPUs, the plan and the fill; then, once the checksums
 * are in too, the word at CRIU's gate. */
static void *beside_rest(void *arg)
{
	beside *b = arg;
	const restore_args *a = b->a;
	restore_ctx *c = b->c;
	uint64_t t0 = engine_now_ns();
	int e = driver_open(&b->rest_er);
	if (!e)
		e = restore_devices(c->in, a->devices, &c->map, a->prog->devices, sizeof(a->prog->devices),
				    &b->rest_er);
	atomic_store(&a->prog->beside_driver_ns, engine_now_ns() - t0);
	if (!e && b->lz)
		e = lazy_plan(b->lz, c, a, &b->rest_er);
	if (!e) {
		atomic_store(&a->prog->total, c->in->raw_bytes);
		e = engine_copy_in(c->img, &c->map, b->lz ? b->lz->now : NULL, a->fill_threads, b->objs, a->prog,
				   &b->rest_er);
	}
	b->rest_e = e;
	if (e)
		criu_gate_say(&b->gate, false);
	if (b->sums_run) {
		pthread_join(b->sums, NULL);
		b->sums_run = false;
	}
	criu_gate_say(&b->gate, !b->rest_e && !b->sums_e);
	atomic_store(&b->rest_done, true);
	return NULL;
}

/* Waits for the threads of step 2 that still run. */
static void beside_join(beside *b)
{
	if (b->rest_run) {
		pthread_join(b->rest, NULL);
		b->rest_run = false;
	}
	if (b->sums_run) { /* beside_rest never ran */
		pthread_join(b->sums, NULL);
		b->sums_run = false;
	}
}

/* 2. Starts what runs beside CRIU, and CRIU's gate. Where the gate
 * cannot be made (its script would be on a file system mounted noexec),
 * it all runs before CRIU starts. Errors: the gate's (nothing was
 * started then), and without a gate those of step 2. */
static int beside_start(beside *b, perr *er)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%.4000s" CRIU_GATE_SUFFIX, b->a->log);
	perr ge = { 0 };
	int e = criu_gate_make(dir, b->a->timeout_s > 0 ? 10 * b->a->timeout_s : 0, &b->gate, &ge);
	if (e && e != -ENOEXEC) {
		criu_gate_end(&b->gate);
		return pr_copy(er, &ge);
	}
	if (e)
		fprintf(stderr, "phosfs: restore %s: %s: its checks run before CRIU starts\n", b->a->image, ge.msg);
	b->sums_run = pthread_create(&b->sums, NULL, beside_sums, b) == 0;
	if (!b->sums_run)
		beside_sums(b);
	b->rest_run = pthread_create(&b->rest, NULL, beside_rest, b) == 0;
	if (!b->rest_run)
		beside_rest(b);
	if (!e)
		return 0;
	beside_join(b);
	return b->sums_e ? pr_copy(er, &b->sums_er) : b->rest_e ? pr_copy(er, &b->rest_er) : 0;
}

/* Waits for what ran beside CRIU, given e, the result of CRIU's restore:
 * the checksums' error, else the driver's, the GPUs' or the fill's, else
 * e. The first two mean CRIU killed the tree at its gate. */
static int beside_end(beside *b, int e, perr *er)
{
	if (b->rest_run && !atomic_load(&b->rest_done))
		engine_step(b->a->prog, STEP_FILL); /* what is left of it */
	beside_join(b);
	criu_gate_end(&b->gate);
	if (b->sums_e)
		return pr_copy(er, &b->sums_er);
	if (b->rest_e)
		return pr_copy(er, &b->rest_er);
	return e;
}

/* One member's driver restore and unlock, beside the others'. */
typedef struct resume {
	pid_t pid;
	const engine_devmap *map;
	perr er;
	int e;
} resume;

static void *resume_one(void *arg)
{
	resume *r = arg;
	r->e = driver_restore(r->pid, r->map, &r->er);
	if (!r->e)
		r->e = driver_unlock(r->pid, &r->er);
	return NULL;
}

/* The driver restores and unlocks every member it holds checkpointed,
 * all at once. Errors: the first member's that failed. */
static int resume_all(const restore_args *a, restore_ctx *c, perr *er)
{
	resume *v = calloc(c->n ? c->n : 1, sizeof(*v));
	if (!v)
		return pr_err(er, -ENOMEM, "out of memory");
	int n = 0, e = 0;
	for (uint32_t i = 0; i < c->n; i++) {
		int state = 0;
		if (driver_process_state(c->host[i], &state) == 0 && state == DRIVER_CHECKPOINTED)
			v[n++] = (resume){ .pid = c->host[i], .map = &c->map };
	}
	if (n)
		engine_step(a->prog, STEP_UNLOCK);
	engine_at_once(v, sizeof(*v), n, resume_one);
	for (int j = 0; j < n && !e; j++)
		if (v[j].e) {
			e = v[j].e;
			pr_copy(er, &v[j].er);
		}
	free(v);
	return e;
}

/* 3. Restores the tree with CRIU, which waits at gate before it lets the
 * tree run, and finds each member's pid on this machine (c->host); *a->pid
 * is the pid of member c->job. Errors: -EIO (er says which step), -ESRCH
 * (a member CRIU restored is not there). */
static int restore_tree(const restore_args *a, restore_ctx *c, const criu_gate *gate, perr *er)
{
	engine_step(a->prog, STEP_RESTORE);
	pid_t root = 0;
	int e = 0;
	snprintf(c->pages_log, sizeof(c->pages_log), "%s.pages", a->log);
	if (a->lazy_pages) {
		atomic_store(&a->prog->lazy_pages, true);
		snprintf(c->pages_dir, sizeof(c->pages_dir), "%s.lazy", a->log);
		if (mkdir(c->pages_dir, 0700) != 0 && errno != EEXIST)
			e = pr_err(er, -errno, "cannot make %s: %s", c->pages_dir, strerror(errno));
		if (!e)
			e = criu_pages_start(a->criu, phosimg_criu_dir(c->img), c->pages_dir, c->pages_log, &c->pages, er);
	}
	/* A clone beside its original: the original's listening sockets
	 * come back under other names. */
	char folder[PATH_MAX + 32] = "";
	int renamed = 0;
	if (!e)
		e = engine_sockets(phosimg_criu_dir(c->img), a->log, folder, sizeof(folder), &renamed, er);
	if (!e && renamed)
		fprintf(stderr, "phosfs: restore %s: %d listening socket%s renamed, whose names are taken here\n",
			a->image, renamed, renamed == 1 ? "" : "s");
	/* The job's own closed connections (it was killed here) would hold
	 * its ports for a minute. Where they cannot be ended, CRIU tries
	 * anyway, and says which address is taken if it fails. */
	if (!e) {
		perr tw = { 0 };
		int ended = 0;
		int e2 = engine_timewait_end(phosimg_criu_dir(c->img), &ended, &tw);
		if (e2)
			fprintf(stderr, "phosfs: restore %s: %s\n", a->image, tw.msg);
		if (ended)
			fprintf(stderr,
				"phosfs: restore %s: ended %d closed connection%s (TIME_WAIT, FIN_WAIT2) that held the "
				"job's TCP addresses\n",
				a->image, ended, ended == 1 ? "" : "s");
	}
	criu_restore_stats st = { 0 };
	engine_cgroups cg;
	bool own_cgroups = a->cgroups && *a->cgroups;
	if (!e && own_cgroups)
		e = engine_cgroups_resolve(a->cgroups, &cg, er);
	char dropped[1024];
	int left_out = !e && own_cgroups ? engine_cgroups_keep_writable(&cg, dropped, sizeof(dropped), er) : 0;
	if (left_out < 0)
		e = left_out;
	else if (left_out)
		fprintf(stderr, "phosfs: restore %s: the tree stays out of cgroups it may not join: %s\n", a->image,
			dropped);
	if (!e)
		e = criu_restore(a->criu, *folder ? folder : phosimg_criu_dir(c->img),
				 a->lazy_pages ? c->pages_dir : NULL, gate->fd >= 0 ? gate->script : NULL, a->log,
				 own_cgroups ? &cg : NULL, &root, &st, er);
	atomic_store(&a->prog->criu_forking_us, st.forking_us);
	atomic_store(&a->prog->criu_restore_us, st.restore_us);
	atomic_store(&a->prog->criu_restored_pages, st.pages_restored);
	engine_sockets_end(folder);
	c->restored = !e;
	if (!e)
		c->host[0] = root;
	for (uint32_t i = 1; !e && c->own_ns && i < c->n; i++) {
		c->host[i] = pidns_find(root, c->m[i].ns_pid);
		if (c->host[i] < 0)
			e = pr_err(er, -ESRCH,
				   "CRIU restored process %d (pid %d in its namespace) but it is not there",
				   (int)c->m[i].pid, (int)c->m[i].ns_pid);
	}
	if (!e && a->pid)
		*a->pid = c->host[c->job];
	return e;
}

/* With a->lazy_pages: waits until every CPU page is back (the lazy-pages
 * daemon ended), and records when. Errors: criu_pages_wait's (pages that
 * never came back: the caller fails, and the tree is killed). */
static int restore_pages_wait(const restore_args *a, restore_ctx *c, uint64_t t0, perr *er)
{
	if (c->pages <= 0)
		return 0;
	int e = criu_pages_wait(c->pages, c->pages_log, er);
	c->pages = 0;
	if (!e)
		atomic_store(&a->prog->pages_ns, engine_now_ns() - t0);
	return e;
}

/* Member i's tracer control thread, for unpark; with mine its objects.
 * Returns the tid, 0 when it needs none (untraced, no memory), or
 * -EPROTO when the image holds memory of a process without a tracer
 * (er says so). */
static pid_t restore_tracer_of(restore_ctx *c, uint32_t i, const engine_parked *mine, perr *er)
{
	if (!(c->m[i].flags & PHOSIMG_MEMBER_TRACED) && !mine->n)
		return 0;
	pid_t tid = engine_find_control_thread(c->host[i]);
	if (tid > 0)
		return tid;
	if (!mine->n)
		return 0;
	return pr_err(er, -EPROTO,
		      "the image holds device memory of process %d, but the restored process has no tracer",
		      (int)c->m[i].pid);
}

/* Tells a->served (when asked) that the restore woke pid's tracer. */
static void restore_served(const restore_args *a, pid_t pid)
{
	if (!a->served || !a->nserved)
		return;
	uint32_t n = atomic_load(a->nserved);
	if (n >= ENGINE_SERVED_MAX)
		return;
	atomic_store(&a->served[n], pid);
	atomic_store(a->nserved, n + 1);
}

/* After the restore (e: its result): a tree half restored is killed,
 * since half restored is worse than not restored (the image stays); the
 * image is closed and c freed. */
static void restore_end(restore_ctx *c, int e)
{
	for (uint32_t i = 0; e && c->restored && i < c->n; i++)
		if (c->host[i] > 0)
			kill(c->host[i], SIGKILL);
	/* A daemon still running failed the restore, or was not waited for. */
	if (c->pages > 0) {
		kill(c->pages, SIGKILL);
		while (waitpid(c->pages, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (*c->pages_dir) {
		/* What CRIU leaves in its work directory. */
		static const char *const left[] = { "lazy-pages.socket", "stats-restore" };
		for (size_t i = 0; i < sizeof(left) / sizeof(*left); i++) {
			char f[sizeof(c->pages_dir) + 32];
			snprintf(f, sizeof(f), "%s/%s", c->pages_dir, left[i]);
			unlink(f);
		}
		rmdir(c->pages_dir);
	}
	if (c->img)
		phosimg_close(c->img);
	free(c->m);
	free(c->host);
	memset(c, 0, sizeof(*c));
}

/* The tree runs: records when (since t0), and tells a->resumed its pid. */
static void restore_resumed(const restore_args *a, const restore_ctx *c, uint64_t t0)
{
	atomic_store(&a->prog->resume_ns, engine_now_ns() - t0);
	if (a->resumed)
		atomic_store(a->resumed, c->host[c->job]);
}

/* The end both restores share, given e, the result so far: waits for CPU
 * pages (restore_pages_wait), records when all was back, and where it
 * failed after the tree ran, says that the tree is killed (restore_end
 * does it). Returns the restore's result. */
static int restore_finish(const restore_args *a, restore_ctx *c, uint64_t t0, int e, perr *er)
{
	if (!e)
		e = restore_pages_wait(a, c, t0, er);
	if (!e)
		atomic_store(&a->prog->full_ns, engine_now_ns() - t0);
	if (e && c->restored && atomic_load(&a->prog->resume_ns))
		pr_append(er, "; the restored process was killed, its memory incomplete");
	return e;
}

/* 6. Wakes each member's tracer with its memory (objs) and, lazy, its
 * table: the tree runs. */
static int restore_wake(const restore_args *a, restore_ctx *c, const engine_parked *objs, lazy *l, perr *er)
{
	int e = 0;
	for (uint32_t i = 0; !e && i < c->n; i++) {
		/* Its own objects, and what it maps of another member's. */
		engine_parked mine;
		e = engine_shares_restored(c->in, objs, l ? l->now : NULL, c->m[i].pid, &mine);
		if (e) {
			pr_err(er, e, "%s", e == -ENOMEM ? "out of memory"
						       : "the image shares an object that was not filled");
			break;
		}
		engine_parked any = { .n = mine.n + (l ? lazy_later(l, i) : 0) };
		pid_t tid = restore_tracer_of(c, i, &any, er);
		if (tid > 0 && a->tracer) {
			engine_step(a->prog, STEP_UNPARK);
			e = l ? lazy_unpark(l, i, tid, a->tracer, &mine, er)
			      : engine_unpark(c->host[i], tid, a->tracer, &mine, NULL, er);
			if (!e)
				restore_served(a, c->host[i]);
		} else {
			e = tid < 0 ? tid : 0;
		}
		engine_parked_drop(&mine);
	}
	return e;
}

int restore_run(const restore_args *a, perr *er)
{
	uint64_t t0 = engine_now_ns();
	restore_ctx c;
	lazy l = { 0 };
	lazy *lz = a->lazy ? &l : NULL; /* the variant */
	engine_parked objs = { 0 };
	if (lz)
		atomic_store(&a->prog->lazy, true);
	beside b = { .a = a, .c = &c, .lz = lz, .objs = &objs, .gate = { .fd = -1 } };
	int e = restore_begin(a, &c, er);
	bool started = !e && !(e = beside_start(&b, er));
	if (!e)
		e = restore_tree(a, &c, &b.gate, er);
	if (started)
		e = beside_end(&b, e, er);
	if (!e)
		e = resume_all(a, &c, er);
	if (!e && lz)
		e = lazy_tables(lz, er);
	if (!e)
		e = restore_wake(a, &c, &objs, lz, er);
	engine_parked_free(&objs);
	if (!e)
		restore_resumed(a, &c, t0);
	if (!e && lz)
		e = lazy_fill(lz, er);
	e = restore_finish(a, &c, t0, e, er);
	lazy_end(&l);
	restore_end(&c, e);
	return e;
}
