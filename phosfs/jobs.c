/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Targets and their jobs. A target is a pid that phosfs has been asked
 * about: it keeps the job in progress, the last error and the last
 * checkpoint, across the moments when the process is not registered (a
 * parked process has no connection).
 *
 * Each job runs in a process of its own (job/main.c), started here and
 * watched by a thread that waits for it to end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "../common/pidns.h"
#include "phosfs.h"

#define WATCH_POLL_US 2000 /* how often a checkpoint's watcher looks at its progress */

/* Guards targets (the list, not the targets' fields). */
static pthread_mutex_t targets_lock = PTHREAD_MUTEX_INITIALIZER;
static target *targets;

/* Whether the environment pid started with holds PHOS_JOB=pid, pid as the
 * process sees itself: the mark `phos run` leaves on the root of a job
 * (PHOS_JOB=1 on the init of the job's own pid namespace, the job's pid
 * where it has none). A restored job keeps its mark, whatever its host
 * pid is now. */
static bool marked_job(pid_t pid)
{
	char path[64], want[40];
	pid_t self = pidns_inner(pid);
	if (self <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	int n = snprintf(want, sizeof(want), "PHOS_JOB=%d", (int)self);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool found = false;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	while (!found && (len = getdelim(&line, &cap, 0, f)) > 0)
		found = len == n + 1 && !memcmp(line, want, (size_t)n + 1);
	free(line);
	fclose(f);
	return found;
}

/* pid's parent, or 0. */
static pid_t parent_of(pid_t pid)
{
	pid_t pp;
	char comm[PHOSIMG_COMM_MAX];
	return engine_proc_stat(pid, &pp, comm) ? 0 : pp;
}

pid_t job_root(pid_t pid)
{
	pid_t sid = getsid(pid);
	if (sid <= 0 || sid == pid || !marked_job(sid))
		return pid;
	/* Only a descendant of the root is in its tree. */
	for (pid_t p = parent_of(pid), hops = 0; p > 1 && hops < 4096; p = parent_of(p), hops++)
		if (p == sid)
			return sid;
	return pid;
}

pid_t job_name(pid_t pid)
{
	pid_t root = job_root(pid);
	if (!pidns_is_init(root))
		return root;
	pid_t job = pidns_find(root, 2);
	return job > 0 ? job : root;
}

target *target_get(pid_t pid, bool create)
{
	pthread_mutex_lock(&targets_lock);
	target *t = targets;
	while (t && t->pid != pid)
		t = t->next;
	if (!t && create) {
		t = calloc(1, sizeof(*t));
		if (t) {
			t->pid = pid;
			t->uid = engine_proc_owner(pid, phosfs_store);
			pthread_mutex_init(&t->lock, NULL);
			pthread_cond_init(&t->done, NULL);
			t->next = targets;
			targets = t;
		}
	}
	pthread_mutex_unlock(&targets_lock);
	return t;
}

int target_pids(pid_t **out, size_t *n)
{
	pthread_mutex_lock(&targets_lock);
	size_t k = 0;
	for (target *t = targets; t; t = t->next)
		k++;
	pid_t *v = malloc((k ? k : 1) * sizeof(*v));
	k = 0;
	for (target *t = targets; v && t; t = t->next)
		v[k++] = t->pid;
	pthread_mutex_unlock(&targets_lock);
	*out = v;
	*n = k;
	return v ? 0 : -ENOMEM;
}

void targets_free(void)
{
	pthread_mutex_lock(&targets_lock);
	while (targets) {
		target *t = targets;
		targets = t->next;
		pthread_mutex_destroy(&t->lock);
		pthread_cond_destroy(&t->done);
		free(t);
	}
	pthread_mutex_unlock(&targets_lock);
}

void target_error(target *t, const char *fmt, ...)
{
	char msg[sizeof(t->error)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&t->lock);
	memcpy(t->error, msg, sizeof(msg));
	pthread_mutex_unlock(&t->lock);
	if (t->pid)
		syslog(LOG_WARNING, "process %d: %s", (int)t->pid, msg);
	else
		syslog(LOG_WARNING, "%s", msg);
}

/* Whether t's running job writes checkpoint name. Call with t->lock. */
static bool writing(const target *t, const char *name)
{
	/* A held checkpoint is written once it is published. */
	return t->busy && t->kind == CTL_CHECKPOINT && !strcmp(t->name, name) &&
	       !(t->sh && atomic_load(&t->sh->prog.publish_ns));
}

bool target_in_progress(target *t, const char *name)
{
	pthread_mutex_lock(&t->lock);
	bool busy = writing(t, name);
	pthread_mutex_unlock(&t->lock);
	return busy;
}

bool target_wait_written(target *t, const char *name, int ms)
{
	struct timespec until = engine_deadline(ms);
	pthread_mutex_lock(&t->lock);
	while (writing(t, name) && pthread_cond_timedwait(&t->done, &t->lock, &until) != ETIMEDOUT)
		;
	bool busy = writing(t, name);
	pthread_mutex_unlock(&t->lock);
	return busy;
}

uint32_t target_data_files(target *t)
{
	pthread_mutex_lock(&t->lock);
	/* Before the job has made the image, it is known to make this many. */
	uint32_t n = t->busy && t->sh ? atomic_load(&t->sh->prog.data_files) : 0;
	if (t->busy && t->kind == CTL_CHECKPOINT && !n)
		n = ENGINE_WRITERS;
	pthread_mutex_unlock(&t->lock);
	return n;
}

int target_stream(target *t, const char *name, char *path, size_t len, uint64_t *ready)
{
	pthread_mutex_lock(&t->lock);
	int r = writing(t, name) && t->sh;
	*ready = r ? atomic_load(&t->sh->prog.data_ready) : 0;
	if (path && *ready)
		snprintf(path, len, "%s", t->sh->prog.data_path);
	pthread_mutex_unlock(&t->lock);
	return r;
}

/* The next free number among STORE/<pid>'s checkpoints. */
static void next_name(const char *dir, char *name, size_t len)
{
	unsigned long max = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		const char *s = de->d_name;
		if (*s == '.')
			s += strspn(s, "."); /* an image still being written: .N.tmp-… */
		char *end;
		unsigned long v = strtoul(s, &end, 10);
		if (end != s && (*end == 0 || *end == '.') && v > max)
			max = v;
	}
	if (d)
		closedir(d);
	snprintf(name, len, "%lu", max + 1);
}

/* Whether a restore serves a process of pid's tree: until all its device
 * memory is back, its tracers are the restore's, and a checkpoint would
 * find them unregistered while the driver copies memory still being
 * filled. */
static bool tree_restoring(pid_t pid)
{
	pid_t served[ENGINE_SERVED_MAX];
	int k = job_served(served, ENGINE_SERVED_MAX);
	if (!k)
		return false; /* no restore serves a tracer: no tree to look through */
	phosimg_member *m = NULL;
	uint32_t n = 0;
	if (engine_tree(job_root(pid), &m, &n))
		return false; /* gone: the checkpoint says so */
	bool any = false;
	for (uint32_t i = 0; i < n && !any; i++)
		for (int j = 0; j < k && !any; j++)
			any = m[i].pid == served[j];
	free(m);
	return any;
}

/* Waits, up to ms, until no restore serves a process of pid's tree. 0, or
 * -EBUSY. */
static int await_restored(pid_t pid, int ms, perr *er)
{
	uint64_t until = engine_now_ns() + (uint64_t)ms * 1000000u;
	for (;;) {
		/* Read before the look: a restore that ends after it wakes the wait. */
		unsigned seen = restores_changes();
		if (!tree_restoring(pid))
			break;
		uint64_t now = engine_now_ns();
		if (now >= until)
			return pr_err(er, -EBUSY,
				      "process %d was still being restored (its device memory coming "
				      "back) after %d s (phosfs --checkpoint-wait); it runs on",
				      (int)pid, ms / 1000);
		restores_await_change(seen, (int)((until - now) / 1000000u) + 1);
	}
	return 0;
}

typedef struct watch {
	target *t;
	spawn s;
	bool staging; /* the job has the staging pool */
	const char *proto; /* "cow", "recopy" or "stop" */
	char name[CTL_NAME_MAX + 1];
} watch;

/* The fields of a checkpoint's events, with stall_ms when it is known. */
static json_t *ckpt_fields(const watch *w, uint64_t stall_ns)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/%d/%s", phosfs_store, (int)w->t->pid, w->name);
	json_t *f = json_pack("{s:s,s:s,s:o}", "name", w->name, "protocol", w->proto, "dir", text_json(dir));
	if (f && stall_ns)
		json_object_set_new(f, "stall_ms", json_real(stall_ns / 1e6));
	return f;
}

/* Waits for a checkpoint's job process and records how it ended in t. A
 * job that died leaves its half image: it goes. */
static void finish_job(const watch *w)
{
	target *t = w->t;
	const spawn *s = &w->s;
	int st = 0;
	while (waitpid(s->child, &st, 0) < 0 && errno == EINTR)
		;
	job_shared *sh = s->sh;
	bool finished = atomic_load(&sh->finished);
	/* Before the job shows as ended: the next checkpoint's number must
	 * not see the half image (a failed job whose copy hung leaves one). */
	if (!finished || sh->result) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s/%d", phosfs_store, (int)t->pid);
		phosimg_clear_stale(dir);
	}
	pthread_mutex_lock(&t->lock);
	if (finished) {
		t->result = sh->result;
		if (sh->result)
			snprintf(t->error, sizeof(t->error), "%s failed: %s", t->job, sh->err);
	} else {
		t->result = -EIO;
		snprintf(t->error, sizeof(t->error), "%s failed: the job process %s %d", t->job,
			 WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
	if (!t->result)
		snprintf(t->last, sizeof(t->last), "%s", t->name);
	t->last_stall_ns = atomic_load(&sh->prog.stall_ns);
	memcpy(&t->last_prog, &sh->prog, sizeof(t->last_prog));
	for (int i = 0; i < STEP_DONE; i++)
		t->last_step_ns[i] = atomic_load(&sh->prog.step_ns[i]);
	if (t->result)
		syslog(LOG_WARNING, "process %d: %s", (int)t->pid, t->error);
	else
		syslog(LOG_INFO, "process %d: %s done, stall %.3f s", (int)t->pid, t->job, t->last_stall_ns / 1e9);
	metrics_checkpoint(w->proto, t->result, &t->last_prog, t->last_step_ns);
	json_t *f = ckpt_fields(w, t->last_stall_ns);
	if (t->result)
		json_object_set_new(f, "error", text_json(t->error));
	events_emit(t->result ? "checkpoint.failed" : "checkpoint.published", t->pid, f);
	t->busy = false;
	t->sh = NULL;
	pthread_cond_broadcast(&t->done);
	pthread_mutex_unlock(&t->lock);
	munmap(sh, sizeof(*sh));
}

/* The events of w's stall and copy that its progress shows now and
 * *said does not hold yet: bit 0 stalled, 1 resumed, 2 off the GPU. */
static void transitions(const watch *w, int *said)
{
	engine_progress *p = &w->s.sh->prog;
	int step = atomic_load(&p->step);
	uint64_t stall = atomic_load(&p->stall_ns), off_ns = atomic_load(&p->off_ns);
	if (!(*said & 1) && (step == STEP_PARK || step == STEP_LOCK || step == STEP_DUMP || stall || off_ns)) {
		*said |= 1;
		events_emit("checkpoint.stalled", w->t->pid, ckpt_fields(w, 0));
	}
	if ((*said & 1) && !(*said & 2) && stall) {
		*said |= 2;
		events_emit("checkpoint.resumed", w->t->pid, ckpt_fields(w, stall));
	}
	if ((*said & 1) && !(*said & 4) && off_ns) {
		*said |= 4;
		json_t *f = ckpt_fields(w, 0);
		json_object_set_new(f, "off_gpu_ms", json_real(off_ns / 1e6));
		events_emit("checkpoint.off_gpu", w->t->pid, f);
	}
}

/* Until w's job process ends: the events of its stall and its copy, as
 * its progress shows them (looked at every WATCH_POLL_US, and once more
 * at its end). */
static void observe(const watch *w)
{
	int said = 0;
	for (;;) {
		transitions(w, &said);
		siginfo_t si = { 0 };
		if (atomic_load(&w->s.sh->finished) ||
		    (waitid(P_PID, (id_t)w->s.child, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == w->s.child))
			break;
		usleep(WATCH_POLL_US);
	}
	transitions(w, &said);
}

static void *watch_main(void *arg)
{
	watch *w = arg;
	observe(w);
	finish_job(w);
	if (w->staging)
		staging_give();
	free(w);
	return NULL;
}

static const char *proto_name(enum ctl_proto p)
{
	return p == CTL_COW ? "cow" : p == CTL_RECOPY ? "recopy" : "stop";
}

/* What the process's state table shows: its live allocations, their
 * device bytes (what its copy moves) and their GPUs (bit d: ordinal d). */
typedef struct table_view {
	uint64_t bytes, devices;
	uint32_t buffers;
} table_view;

static table_view table_scan(const proc *p)
{
	table_view v = { 0 };
	state_header *h = p->table;
	uint32_t used = h ? atomic_load(&h->used) : 0;
	for (uint32_t i = 0; i < used && i < h->capacity; i++) {
		const state_slot *sl = &state_slots(h)[i];
		if (!atomic_load(&sl->va))
			continue;
		v.buffers++;
		v.bytes += sl->size;
		if (sl->device < 64)
			v.devices |= 1ull << sl->device;
	}
	return v;
}

/* Starts checkpoint c of t's tree (t->lock held, t not busy). When no
 * thread could watch the job, *here is its watch: the caller runs
 * watch_main once it has let go of the lock. */
/* Where t's next checkpoint goes: its name (the one asked, or the next
 * number), the image's path and its log's (PATH_MAX + 128 each), with
 * the store's folder for t made and its logs pruned. Errors: mkdir's,
 * -EEXIST (the name is taken). */
static int place_image(target *t, const ctl_cmd *c, char *name, char *image, char *log, perr *er)
{
	char dir[PATH_MAX], logdir[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/%d", phosfs_store, (int)t->pid);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		int e = -errno;
		return pr_err(er, e, "cannot make %s: %s", dir, strerror(-e));
	}
	/* Only for showing the owner after the process is gone. */
	if (t->uid != (uid_t)-1)
		(void)!chown(dir, t->uid, (gid_t)-1);
	if (*c->name)
		snprintf(name, CTL_NAME_MAX + 1, "%s", c->name);
	else
		next_name(dir, name, CTL_NAME_MAX + 1);
	snprintf(image, PATH_MAX + 128, "%s/%s", dir, name);
	struct stat st;
	if (lstat(image, &st) == 0)
		return pr_err(er, -EEXIST, "checkpoint %s exists", name);
	snprintf(logdir, sizeof(logdir), "%s/.logs", dir);
	logs_make_room(logdir); /* for this job's */
	snprintf(log, PATH_MAX + 128, "%s/%s-dump.log", logdir, name);
	unlink(log);
	return 0;
}

/* The registered processes of root's tree (references, into a malloc'd
 * *out, *n of them) and the device bytes they hold; *stop_only, the first
 * of them whose memory cannot be parked (why, into why: len bytes), or
 * NULL. Errors: -ESRCH (t's
 * process is gone), -ENOMEM; on error nothing is held. */
static int traced_of(target *t, pid_t root, proc ***out, int *n, uint64_t *bytes, proc **stop_only, char *why,
		     size_t len, perr *er)
{
	phosimg_member *m = NULL;
	uint32_t nm = 0;
	int e = engine_tree(root, &m, &nm);
	proc **procs = e ? NULL : calloc(nm ? nm : 1, sizeof(*procs));
	if (!e && !procs)
		e = -ENOMEM;
	if (e) {
		free(m);
		return pr_err(er, e == -ESRCH ? e : -ENOMEM,
			      e == -ESRCH ? "process %d is not running" : "out of memory (process %d)", (int)t->pid);
	}
	int k = 0;
	*bytes = 0;
	*stop_only = NULL;
	for (uint32_t i = 0; i < nm && !e; i++) {
		proc *p = registry_get(m[i].pid);
		if (p && !*stop_only && proc_stop_only(p, why, len))
			*stop_only = p;
		if (p) {
			*bytes += table_scan(p).bytes;
			procs[k++] = p;
		}
	}
	free(m);
	if (e) {
		for (int i = 0; i < k; i++)
			registry_put(procs[i]);
		free(procs);
		return e;
	}
	*out = procs;
	*n = k;
	return 0;
}

/* Each traced process hands its connection to the job (it parks there):
 * into req's members (req NULL: none is taken); t remembers who parked.
 * Drops the references to procs. The number of connections taken. */
static int take_members(target *t, proc **procs, int n, job_request *req)
{
	int k = 0;
	t->nparked = 0;
	for (int i = 0; i < n; i++) {
		int c = req ? registry_take(procs[i]) : -1;
		if (c >= 0) {
			table_view v = table_scan(procs[i]);
			char why[128];
			req->checkpoint.members[k] = (job_member){
				procs[i]->pid, c, procs[i]->hello.control_tid, v.devices, v.buffers,
				proc_stop_only(procs[i], why, sizeof(why)) ? JOB_MEMBER_KEEP : 0
			};
			k++;
			if (t->nparked < (int)(sizeof(t->parked) / sizeof(*t->parked)))
				t->parked[t->nparked++] = procs[i]->pid;
		}
		registry_put(procs[i]);
	}
	return k;
}

/* A checkpoint's request, but for its members and staging. Errors:
 * -ENAMETOOLONG. */
static int checkpoint_request(job_request *req, const ctl_cmd *c, enum ctl_proto proto, pid_t root,
			      const char *image, const char *log, perr *er)
{
	if (job_request_init(req, JOB_CHECKPOINT, image, phosfs_criu, log, phosfs_criu_plugins))
		return pr_err(er, -ENAMETOOLONG, "a path of the checkpoint of %d is too long", (int)root);
	job_checkpoint_req *cr = &req->checkpoint;
	cr->pid = root;
	cr->kill = c->kill || c->hold_ms;
	cr->hold_ms = c->hold_ms;
	cr->cow = proto == CTL_COW;
	cr->recopy = proto == CTL_RECOPY;
	cr->chunk = (uint32_t)phosfs_chunk;
	cr->shadow_pool = phosfs_shadow_pool;
	cr->timeout_ms = c->timeout_ms ? c->timeout_ms : phosfs_checkpoint_timeout_ms;
	cr->dump_timeout_s = (uint32_t)phosfs_dump_timeout;
	return 0;
}

/* Marks t busy with the checkpoint job w started, and watches it. */
static void started(target *t, watch *w, const ctl_cmd *c, enum ctl_proto proto, const char *name, bool traced,
		    watch **here)
{
	w->t = t;
	w->proto = proto_name(proto);
	snprintf(w->name, sizeof(w->name), "%s", name);
	t->busy = true;
	t->kind = CTL_CHECKPOINT;
	t->sh = w->s.sh;
	t->result = 0;
	t->error[0] = 0;
	t->traced = traced;
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->job, sizeof(t->job), "checkpoint %s name=%s%s%s", proto_name(proto), name, c->kill ? " kill" : "",
		 c->hold_ms ? " hold" : "");
	/* Before its watcher runs: its events come after this one. */
	events_emit("checkpoint.started", t->pid, ckpt_fields(w, 0));
	pthread_t th;
	if (pthread_create(&th, NULL, watch_main, w) != 0)
		*here = w; /* without a watcher, the caller waits */
	else
		pthread_detach(th);
	syslog(LOG_INFO, "process %d: %s started", (int)t->pid, t->job);
}

static int start_locked(target *t, const ctl_cmd *c, watch **here, perr *er)
{
	char name[CTL_NAME_MAX + 1], image[PATH_MAX + 128], log[PATH_MAX + 128];
	*here = NULL;
	int e = place_image(t, c, name, image, log, er);
	if (e)
		return e;
	/* Each registered process of the tree parks; the rest of the tree is
	 * dumped as it is. */
	pid_t root = job_root(t->pid);
	proc **procs = NULL;
	int ntraced = 0;
	uint64_t bytes = 0;
	proc *stop_only = NULL;
	char why[128] = "";
	e = traced_of(t, root, &procs, &ntraced, &bytes, &stop_only, why, sizeof(why), er);
	if (e)
		return e;
	/* CoW needs the tracer, and memory it can park; a checkpoint that
	 * names no protocol of a tree without either stops it instead. */
	enum ctl_proto proto = c->proto != CTL_DEFAULT ? c->proto : ntraced && !stop_only ? CTL_COW : CTL_STOP;
	if ((proto == CTL_COW || proto == CTL_RECOPY) && stop_only)
		e = pr_err(er, -EOPNOTSUPP,
			   "checkpoint %s: process %d's memory cannot be parked (%s); checkpoint stop saves it "
			   "through the driver",
			   proto_name(proto), (int)stop_only->pid, why);
	else if ((proto == CTL_COW || proto == CTL_RECOPY) && !ntraced)
		e = pr_err(er, -EOPNOTSUPP,
			   "checkpoint %s needs the tracer, and no process of %d's tree is traced (the tracer "
			   "takes a process of phos run when it first calls CUDA; one that never did has no "
			   "device state to copy); use checkpoint stop",
			   proto_name(proto), (int)t->pid);
	if (!e && ntraced > JOB_MEMBERS_MAX)
		e = pr_err(er, -E2BIG, "process %d's tree has %d traced processes; phos takes at most %d",
			   (int)t->pid, ntraced, JOB_MEMBERS_MAX);
	job_request *req = e ? NULL : malloc(sizeof(*req));
	if (!e && !req)
		e = pr_err(er, -ENOMEM, "out of memory");
	if (!e)
		e = checkpoint_request(req, c, proto, root, image, log, er);
	int nconns = take_members(t, procs, ntraced, e ? NULL : req);
	free(procs);
	/* The staging pool needs to hold no more than the memory copied. */
	uint64_t room = bytes + bytes / 8 + 4 * phosfs_chunk;
	int sfd = e ? -1 : staging_take();
	watch *w = e ? NULL : calloc(1, sizeof(*w));
	if (!e) {
		req->checkpoint.staging = bytes && room < phosfs_staging ? room : phosfs_staging;
		req->checkpoint.staging_fd = sfd;
		req->checkpoint.nmembers = (uint32_t)nconns;
		e = w ? spawn_job(req, &w->s, er) : -ENOMEM;
		if (w)
			w->staging = sfd >= 0;
	}
	/* The job has its own copies now (the staging memfd stays phosfs's). */
	for (int i = 0; i < nconns; i++)
		close(req->checkpoint.members[i].conn);
	free(req);
	if (e) {
		if (sfd >= 0)
			staging_give();
		free(w);
		return e;
	}
	started(t, w, c, proto, name, nconns > 0, here);
	return 0;
}

/* A checkpoint accepted while a restore still serves its tree: it starts
 * once the restore has ended. */
typedef struct deferred {
	target *t;
	ctl_cmd c;
} deferred;

static void *deferred_main(void *arg)
{
	deferred *d = arg;
	target *t = d->t;
	perr er = { 0 };
	watch *here = NULL;
	int e = await_restored(t->pid, phosfs_checkpoint_wait * 1000, &er);
	pthread_mutex_lock(&t->lock);
	t->busy = false; /* start_locked takes it again */
	if (!e)
		e = start_locked(t, &d->c, &here, &er);
	if (e) {
		t->result = e;
		snprintf(t->error, sizeof(t->error), "%s failed: %s", t->job, pr_msg(&er));
		syslog(LOG_WARNING, "process %d: %s", (int)t->pid, t->error);
		events_emit("checkpoint.failed", t->pid, json_pack("{s:s,s:o}", "protocol", proto_name(d->c.proto), "error", text_json(t->error)));
		pthread_cond_broadcast(&t->done);
	}
	pthread_mutex_unlock(&t->lock);
	if (here)
		watch_main(here);
	free(d);
	return NULL;
}

int job_checkpoint(target *t, const ctl_cmd *c, perr *er)
{
	pthread_mutex_lock(&t->lock);
	if (t->busy) {
		pthread_mutex_unlock(&t->lock);
		return pr_err(er, -EBUSY, "busy: %s is running", t->job);
	}
	watch *here = NULL;
	int e = 0;
	if (!tree_restoring(t->pid)) {
		e = start_locked(t, c, &here, er);
		pthread_mutex_unlock(&t->lock);
		if (here)
			watch_main(here);
		return e;
	}
	/* Its tracers are the restore's until all device memory is back: the
	 * checkpoint waits for that, in a thread of its own. */
	deferred *d = malloc(sizeof(*d));
	pthread_t th;
	if (!d) {
		e = pr_err(er, -ENOMEM, "out of memory");
	} else {
		d->t = t;
		d->c = *c;
		t->busy = true;
		t->kind = CTL_CHECKPOINT;
		t->sh = NULL;
		t->name[0] = 0;
		t->nparked = 0;
		t->result = 0;
		t->error[0] = 0;
		snprintf(t->job, sizeof(t->job), "checkpoint%s%s (waiting for the restore of its tree to end)",
			 c->proto ? " " : "", c->proto ? proto_name(c->proto) : "");
		if (pthread_create(&th, NULL, deferred_main, d) != 0) {
			t->busy = false;
			free(d);
			e = pr_err(er, -EAGAIN, "cannot start a thread to wait for the restore");
		} else {
			pthread_detach(th);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return e;
}

int job_release(target *t, bool end, perr *er)
{
	pthread_mutex_lock(&t->lock);
	int e = 0;
	if (!t->busy || !t->sh || t->kind != CTL_CHECKPOINT || !t->sh->req.checkpoint.hold_ms)
		e = pr_err(er, -EINVAL, "no checkpoint of process %d holds it: release is for one taken with hold=SECONDS",
			   (int)t->pid);
	else if (atomic_load(&t->sh->prog.step) != STEP_HOLD)
		e = pr_err(er, -EBUSY, "the checkpoint of process %d is not published yet: release it once it is (step: hold)",
			   (int)t->pid);
	else
		atomic_store(&t->sh->prog.release, end ? ENGINE_RELEASE_KILL : ENGINE_RELEASE_RESUME);
	pthread_mutex_unlock(&t->lock);
	return e;
}

int job_cancel(target *t, perr *er)
{
	pthread_mutex_lock(&t->lock);
	int e = 0;
	if (!t->busy || !t->sh)
		e = pr_err(er, -EINVAL, "no job to cancel");
	else
		atomic_store(&t->sh->prog.cancel, true);
	pthread_mutex_unlock(&t->lock);
	return e;
}
