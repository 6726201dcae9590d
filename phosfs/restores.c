/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Restores. A write to /ctl submits one and returns at once: a thread of
 * the restore's own starts its job process (job/main.c) when its turn
 * comes, and watches it to its end. Up to phosfs_restores run side by
 * side; more wait, in the order they were asked for, in a queue of up to
 * phosfs_restore_queue; past that a restore is refused with EBUSY.
 * /restores/<id> and /status show them (fs.c).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "phosfs.h"

/* How long the end of a restore waits for its processes' tracers to
 * register again. */
#define REGISTER_WAIT_MS 2000
/* Ended restores that status still shows. */
#define KEEP_ENDED 64

typedef struct restore_job {
	restore_view v;     /* what status shows */
	ctl_cmd cmd;        /* what was asked */
	char cgroups[ENGINE_CGROUPS_TEXT_MAX]; /* where the tree goes (restore_submit) */
	job_shared *sh;  /* the job's progress, while it runs */
	struct restore_job *next;
} restore_job;

/* Guards the list and every field of every restore in it. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Broadcast whenever a restore changes state; changes counts them, so
 * that a waiter misses none that came before its wait. */
static pthread_cond_t change = PTHREAD_COND_INITIALIZER;
static unsigned changes;
static restore_job *list; /* newest first */
static unsigned next_id = 1;
static int running; /* restores whose job process runs */

static bool ended(const restore_job *j)
{
	return j->v.state == RESTORE_DONE || j->v.state == RESTORE_FAILED;
}

/* Restores queued ahead of j (the lock held). */
static int ahead_of(const restore_job *j)
{
	int k = 0;
	for (const restore_job *o = list; o; o = o->next)
		k += o->v.state == RESTORE_QUEUED && o->v.id < j->v.id;
	return k;
}

/* Forgets the oldest ended restores beyond KEEP_ENDED (the lock held). */
static void prune(void)
{
	int kept = 0;
	for (restore_job **pp = &list; *pp;) {
		restore_job *j = *pp;
		if (ended(j) && ++kept > KEEP_ENDED) {
			*pp = j->next;
			free(j);
		} else {
			pp = &j->next;
		}
	}
}

/* Moves j to state s and tells whoever waits (the lock held). */
static void set_state(restore_job *j, enum restore_state s)
{
	j->v.state = s;
	changes++;
	pthread_cond_broadcast(&change);
}

/* Waits until the job's tree runs or the job ends; the root pid that
 * runs, or 0. */
static pid_t await_resume(const spawn *s)
{
	for (;;) {
		pid_t pid = atomic_load(&s->sh->resumed);
		if (pid > 0 || atomic_load(&s->sh->finished))
			return pid;
		siginfo_t si = { 0 };
		if (waitid(P_PID, (id_t)s->child, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == s->child)
			return atomic_load(&s->sh->resumed);
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
}

/* The pids whose tracers restore job sh woke, up to max into out; their
 * number. */
static int served_of(const job_shared *sh, pid_t *out, int max)
{
	uint32_t n = atomic_load(&sh->nserved);
	int k = 0;
	for (uint32_t i = 0; i < n && i < ENGINE_SERVED_MAX && k < max; i++)
		out[k++] = atomic_load(&sh->served[i]);
	return k;
}

/* After a restore's job ended: waits, up to ms in all, until each process
 * whose tracer it served (and that still runs) has registered again, so
 * that once the restore is over, its processes are seen traced. */
static void await_registered(const pid_t *served, int k, int ms)
{
	uint64_t until = engine_now_ns() + (uint64_t)ms * 1000000u;
	for (int i = 0; i < k; i++)
		while (engine_alive(served[i]) && engine_now_ns() < until) {
			proc *p = registry_get(served[i]);
			if (p) {
				registry_put(p);
				break;
			}
			struct timespec ts = { 0, 10000000 };
			nanosleep(&ts, NULL);
		}
}

/* Records in the target of the restored pid that a restore brought it,
 * and how that ended (result, error; 0 and NULL while it goes on). */
static void mark_restored(pid_t pid, const char *dir, int result, const char *error)
{
	target *t = pid > 0 ? target_get(pid, true) : NULL;
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->uid = engine_proc_owner(pid, phosfs_store);
	snprintf(t->error, sizeof(t->error), "%s", error ? error : "");
	snprintf(t->job, sizeof(t->job), "restore %.80s", dir);
	t->result = result;
	pthread_mutex_unlock(&t->lock);
}

/* Emits restore j's event: its id, image, mode, and what it knows now
 * (pid, times, error). */
static void restore_event(const restore_job *j, const char *event, const engine_progress *p)
{
	json_t *f = json_pack("{s:i,s:o,s:s}", "restore_id", (int)j->v.id, "dir", text_json(j->cmd.dir), "mode",
			      j->cmd.lazy ? "lazy" : "eager");
	if (p && atomic_load(&p->resume_ns))
		json_object_set_new(f, "resume_ms", json_real(atomic_load(&p->resume_ns) / 1e6));
	if (p && atomic_load(&p->full_ns))
		json_object_set_new(f, "full_ms", json_real(atomic_load(&p->full_ns) / 1e6));
	if (j->v.state == RESTORE_FAILED)
		json_object_set_new(f, "error", text_json(j->v.error));
	events_emit(event, j->v.pid, f);
}

static void finish(restore_job *j, spawn *sp, pid_t runs);

/* Runs restore j's job process to its end (its turn has come). */
static void run(restore_job *j)
{
	const ctl_cmd *c = &j->cmd;
	perr er = { 0 };
	spawn s;
	/* Room in the logs folder for this restore's, made here rather than
	 * on the ctl write, which must not wait for a folder's scan. */
	char logs[PATH_MAX];
	snprintf(logs, sizeof(logs), "%s/.logs", phosfs_store);
	logs_make_room(logs);
	job_request *req = malloc(sizeof(*req));
	int e = req ? 0 : pr_err(&er, -ENOMEM, "out of memory");
	if (!e) {
		job_restore_req *rr = &req->restore;
		if (job_request_init(req, JOB_RESTORE, c->dir, phosfs_criu, j->v.log, phosfs_criu_plugins) ||
		    job_request_set(rr->devices, sizeof(rr->devices), c->devices) ||
		    job_request_set(rr->cgroups, sizeof(rr->cgroups), j->cgroups))
			e = pr_err(&er, -ENAMETOOLONG, "a path of the restore is too long");
		rr->fill_threads = phosfs_fill_threads;
		rr->timeout_s = phosfs_restore_timeout;
		rr->lazy = c->lazy;
		rr->lazy_pages = c->lazy_pages;
		rr->growing = c->growing;
	}
	if (!e)
		e = spawn_job(req, &s, &er);
	free(req);
	if (e) {
		pthread_mutex_lock(&lock);
		j->v.result = e;
		snprintf(j->v.error, sizeof(j->v.error), "%s failed: %s", j->v.job, pr_msg(&er));
		running--;
		set_state(j, RESTORE_FAILED);
		restore_event(j, "restore.failed", NULL);
		metrics_restore(c->lazy, e, &j->v.prog);
		pthread_mutex_unlock(&lock);
		syslog(LOG_WARNING, "restore %u: %s", j->v.id, j->v.error);
		return;
	}
	pthread_mutex_lock(&lock);
	j->sh = s.sh;
	restore_event(j, "restore.started", NULL);
	pthread_mutex_unlock(&lock);
	pid_t runs = await_resume(&s);
	if (runs > 0 && !atomic_load(&s.sh->finished)) {
		mark_restored(runs, c->dir, 0, NULL);
		pthread_mutex_lock(&lock);
		j->v.pid = runs;
		set_state(j, RESTORE_RESUMED);
		restore_event(j, "restore.resumed", &s.sh->prog);
		pthread_mutex_unlock(&lock);
	}
	finish(j, &s, runs);
}

/* After restore j's job process started (its tree ran as runs, or 0):
 * waits for it to end and records how it ended. */
static void finish(restore_job *j, spawn *sp, pid_t runs)
{
	const ctl_cmd *c = &j->cmd;
	spawn s = *sp;
	int st = 0;
	while (waitpid(s.child, &st, 0) < 0 && errno == EINTR)
		;
	pid_t served[ENGINE_SERVED_MAX];
	await_registered(served, served_of(s.sh, served, ENGINE_SERVED_MAX), REGISTER_WAIT_MS);
	pthread_mutex_lock(&lock);
	restore_view *v = &j->v;
	memcpy(&v->prog, &s.sh->prog, sizeof(v->prog));
	pid_t pid = atomic_load(&s.sh->pid);
	if (atomic_load(&s.sh->finished)) {
		v->result = s.sh->result;
		if (v->result)
			snprintf(v->error, sizeof(v->error), "%s failed: %s", v->job, s.sh->err);
	} else {
		v->result = -EIO;
		snprintf(v->error, sizeof(v->error), "%s failed: the job process %s %d (its log: %.400s)", v->job,
			 WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), v->log);
	}
	if (pid > 0 && !v->result)
		v->pid = pid;
	j->sh = NULL;
	running--;
	set_state(j, v->result ? RESTORE_FAILED : RESTORE_DONE);
	restore_event(j, v->result ? "restore.failed" : "restore.done", &v->prog);
	metrics_restore(c->lazy, v->result, &v->prog);
	if (v->result)
		syslog(LOG_WARNING, "restore %u%s%.0d: %s", v->id, v->pid > 0 ? " of process " : "", (int)v->pid,
		       v->error);
	else
		syslog(LOG_INFO, "restore %u: %s done: process %d runs%s%.*s", v->id, v->job, (int)v->pid,
		       *v->prog.devices ? "; GPUs moved: " : "", (int)sizeof(v->prog.devices), v->prog.devices);
	prune();
	pthread_mutex_unlock(&lock);
	if (pid > 0 && runs <= 0 && !v->result)
		mark_restored(pid, c->dir, 0, NULL);
	/* A tree that ran before the restore failed (a lazy fill's bad
	 * chunk): its own status says so too, as /status and /events do. */
	if (runs > 0 && v->result)
		mark_restored(runs, c->dir, v->result, v->error);
	munmap(s.sh, sizeof(*s.sh));
}

/* A restore's own thread: waits for its turn if it is queued, then runs
 * it. */
static void *restore_main(void *arg)
{
	restore_job *j = arg;
	pthread_mutex_lock(&lock);
	if (j->v.state == RESTORE_QUEUED) {
		while (running >= phosfs_restores || ahead_of(j) > 0)
			pthread_cond_wait(&change, &lock);
		running++;
		set_state(j, RESTORE_RUNNING);
	}
	pthread_mutex_unlock(&lock);
	run(j);
	return NULL;
}

/* A new log's name for restore id, in the store's .logs. */
static void log_name(const char *dir, unsigned id, char *out, size_t len)
{
	char when[32];
	time_t now = time(NULL);
	struct tm tm;
	strftime(when, sizeof(when), "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
	/* phosfs's pid and the restore's id: unique across phosfs's runs. */
	snprintf(out, len, "%.3900s/restore-%s-%d-%u.log", dir, when, (int)getpid(), id);
}

int restore_submit(const ctl_cmd *c, const char *cgroups, unsigned *id, perr *er)
{
	restore_job *j = calloc(1, sizeof(*j));
	if (!j)
		return pr_err(er, -ENOMEM, "out of memory");
	j->cmd = *c;
	snprintf(j->cgroups, sizeof(j->cgroups), "%s", cgroups);
	snprintf(j->v.job, sizeof(j->v.job), "restore %.80s%s%s%s", c->dir, c->lazy ? " lazy" : " eager",
		 c->lazy_pages ? " lazy-pages" : "", c->growing ? " growing" : "");
	char logs[PATH_MAX];
	snprintf(logs, sizeof(logs), "%s/.logs", phosfs_store);
	pthread_mutex_lock(&lock);
	/* Every restore not ended counts: one just submitted is queued until
	 * its thread takes its turn. */
	int pending = 0;
	for (restore_job *o = list; o; o = o->next)
		pending += !ended(o);
	if (pending >= phosfs_restores + phosfs_restore_queue) {
		pthread_mutex_unlock(&lock);
		free(j);
		return pr_err(er, -EBUSY,
			      "%d restores run or wait, as many as phosfs takes (--restores %d, --restore-queue "
			      "%d): try again once one has ended",
			      pending, phosfs_restores, phosfs_restore_queue);
	}
	j->v.id = next_id++;
	/* It runs at once where there is room and no one waits ahead. */
	bool now = running < phosfs_restores && pending == running;
	j->v.state = now ? RESTORE_RUNNING : RESTORE_QUEUED;
	running += now;
	log_name(logs, j->v.id, j->v.log, sizeof(j->v.log));
	j->next = list;
	list = j;
	pthread_t th;
	int e = pthread_create(&th, NULL, restore_main, j);
	if (e) {
		list = j->next;
		running -= now;
		pthread_mutex_unlock(&lock);
		free(j);
		return pr_err(er, -e, "cannot start the restore's thread: %s", strerror(e));
	}
	pthread_detach(th);
	*id = j->v.id;
	pthread_mutex_unlock(&lock);
	syslog(LOG_INFO, "restore %u: %s asked", *id, c->dir);
	return 0;
}

/* Fills out with j's view as it is now (the lock held). */
static void view_of(const restore_job *j, restore_view *out)
{
	*out = j->v;
	if (j->sh)
		memcpy(&out->prog, &j->sh->prog, sizeof(out->prog));
	out->position = j->v.state == RESTORE_QUEUED ? ahead_of(j) + 1 : 0;
}

int restore_views(restore_view **out, size_t *n, int *nrunning, int *nqueued)
{
	pthread_mutex_lock(&lock);
	size_t k = 0;
	int q = 0;
	for (restore_job *j = list; j; j = j->next) {
		k++;
		q += j->v.state == RESTORE_QUEUED;
	}
	restore_view *v = calloc(k ? k : 1, sizeof(*v));
	size_t i = 0;
	for (restore_job *j = list; v && j; j = j->next)
		view_of(j, &v[i++]);
	*nrunning = running;
	*nqueued = q;
	pthread_mutex_unlock(&lock);
	*out = v;
	*n = v ? k : 0;
	return v ? 0 : -ENOMEM;
}

int restore_view_get(unsigned id, restore_view *out)
{
	pthread_mutex_lock(&lock);
	restore_job *j = list;
	while (j && j->v.id != id)
		j = j->next;
	if (j)
		view_of(j, out);
	pthread_mutex_unlock(&lock);
	return j ? 0 : -ENOENT;
}

int job_served(pid_t *out, int max)
{
	pthread_mutex_lock(&lock);
	int k = 0;
	for (restore_job *j = list; j; j = j->next)
		if (j->sh)
			k += served_of(j->sh, out + k, max - k);
	pthread_mutex_unlock(&lock);
	return k;
}

unsigned restores_changes(void)
{
	pthread_mutex_lock(&lock);
	unsigned n = changes;
	pthread_mutex_unlock(&lock);
	return n;
}

void restores_await_change(unsigned seen, int ms)
{
	struct timespec until = engine_deadline(ms);
	pthread_mutex_lock(&lock);
	while (changes == seen && pthread_cond_timedwait(&change, &lock, &until) == 0)
		;
	pthread_mutex_unlock(&lock);
}

void restores_free(void)
{
	pthread_mutex_lock(&lock);
	for (restore_job **pp = &list; *pp;) {
		restore_job *j = *pp;
		if (ended(j)) {
			*pp = j->next;
			free(j);
		} else {
			pp = &j->next; /* its thread still runs */
		}
	}
	pthread_mutex_unlock(&lock);
}
