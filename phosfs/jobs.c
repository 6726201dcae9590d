/*
 * Targets and their jobs. A target is a pid that phosfs has been asked
 * about: it keeps the job in progress, the last error and the last
 * checkpoint, across the moments when the process is not registered (a
 * parked process has no connection).
 *
 * Each job runs in a process of its own (job-process.c), started here and
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

/* How long a checkpoint waits for a restore of its tree to end, and a
 * restore's end for its processes' tracers to register again. */
#define RESTORE_WAIT_MS 300000
#define REGISTER_WAIT_MS 2000

/* Guards targets (the list, not the targets' fields). */
static pthread_mutex_t targets_lock = PTHREAD_MUTEX_INITIALIZER;
static target *targets;
static target root_target = { .lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

uid_t pid_owner(pid_t pid)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) == 0)
		return st.st_uid;
	snprintf(path, sizeof(path), "%s/%d", phosfs_store, (int)pid);
	return stat(path, &st) == 0 ? st.st_uid : (uid_t)-1;
}

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

target *target_root(void)
{
	return &root_target;
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
			t->uid = pid_owner(pid);
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
	return t->busy && t->kind == CTL_CHECKPOINT && !strcmp(t->name, name);
}

bool target_in_progress(target *t, const char *name, bool wait)
{
	pthread_mutex_lock(&t->lock);
	bool busy = writing(t, name);
	while (wait && writing(t, name))
		pthread_cond_wait(&t->done, &t->lock);
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

/* What a job process is started with. */
typedef struct spawn {
	engine_shared *sh;
	pid_t child;
} spawn;

/* Starts `phosfs --job ARGS… --shared FD`, with the shared memfd and the
 * fds keep[0..nkeep) left open in it. */
static int spawn_job(char *const *args, const int *keep, int nkeep, spawn *s, char *err, size_t errlen)
{
	int sfd = memfd_create("phos-job", MFD_CLOEXEC);
	if (sfd < 0 || ftruncate(sfd, sizeof(engine_shared)) != 0) {
		int e = -errno;
		if (sfd >= 0)
			close(sfd);
		return engine_fail(e, err, errlen, "cannot make the job's shared memory: %s", strerror(-e));
	}
	s->sh = mmap(NULL, sizeof(engine_shared), PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	if (s->sh == MAP_FAILED) {
		close(sfd);
		return engine_fail(-ENOMEM, err, errlen, "cannot map the job's shared memory");
	}
	char sfd_s[16];
	snprintf(sfd_s, sizeof(sfd_s), "%d", sfd);
	int nargs = 0;
	while (args[nargs])
		nargs++;
	char **argv = calloc((size_t)nargs + 5, sizeof(*argv));
	if (!argv) {
		munmap(s->sh, sizeof(engine_shared));
		close(sfd);
		return engine_fail(-ENOMEM, err, errlen, "out of memory");
	}
	int n = 0;
	argv[n++] = "phosfs";
	argv[n++] = "--job";
	for (int i = 0; i < nargs; i++)
		argv[n++] = args[i];
	argv[n++] = "--shared";
	argv[n++] = sfd_s;
	argv[n] = NULL;
	s->child = fork();
	if (s->child == 0) {
		/* Its own session: signals meant for phosfs's group do not end it. */
		setsid();
		fcntl(sfd, F_SETFD, 0);
		for (int i = 0; i < nkeep; i++)
			fcntl(keep[i], F_SETFD, 0);
		execv(phosfs_self, argv);
		_exit(127);
	}
	int e = s->child < 0 ? -errno : 0;
	free(argv);
	close(sfd);
	if (e) {
		munmap(s->sh, sizeof(engine_shared));
		return engine_fail(e, err, errlen, "cannot start the job: %s", strerror(-e));
	}
	return 0;
}

/* The pids whose tracers restore job sh woke, up to max into out; their
 * number. */
static int served_of(const engine_shared *sh, pid_t *out, int max)
{
	uint32_t n = atomic_load(&sh->nserved);
	int k = 0;
	for (uint32_t i = 0; i < n && i < ENGINE_SERVED_MAX && k < max; i++)
		out[k++] = atomic_load(&sh->served[i]);
	return k;
}

/* The served pids of restore target r's job into out (r->lock held). */
static int served_locked(target *r, pid_t *out, int max)
{
	return r->busy && r->kind == CTL_RESTORE && r->sh ? served_of(r->sh, out, max) : 0;
}

int job_served(pid_t *out, int max)
{
	target *r = target_root();
	pthread_mutex_lock(&r->lock);
	int k = served_locked(r, out, max);
	pthread_mutex_unlock(&r->lock);
	return k;
}

/* Whether one of the n members m is in served (k pids). */
static bool any_served(const phosimg_member *m, uint32_t n, const pid_t *served, int k)
{
	for (uint32_t i = 0; i < n; i++)
		for (int j = 0; j < k; j++)
			if (m[i].pid == served[j])
				return true;
	return false;
}

/* Waits, up to ms, until no restore serves a process of pid's tree: a
 * checkpoint before then would find its tracers unregistered, and the
 * driver would copy memory still being filled. 0, or -EBUSY. */
static int await_restored(pid_t pid, int ms, char *err, size_t errlen)
{
	pid_t served[ENGINE_SERVED_MAX];
	if (!job_served(served, ENGINE_SERVED_MAX))
		return 0; /* no restore serves a tracer: no tree to look through */
	phosimg_member *m = NULL;
	uint32_t n = 0;
	if (engine_tree(job_root(pid), &m, &n))
		return 0; /* gone: the checkpoint says so */
	target *r = target_root();
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	int e = 0;
	pthread_mutex_lock(&r->lock);
	for (int k; (k = served_locked(r, served, ENGINE_SERVED_MAX)) > 0 && any_served(m, n, served, k);)
		if (pthread_cond_timedwait(&r->done, &r->lock, &until) == ETIMEDOUT) {
			e = engine_fail(-EBUSY, err, errlen,
					"process %d is still being restored (its device memory is coming back); try "
					"again once the mount's status says job: none",
					(int)pid);
			break;
		}
	pthread_mutex_unlock(&r->lock);
	free(m);
	return e;
}

/* After a restore's job ended: waits, up to ms in all, until each process
 * whose tracer it served (and that still runs) has registered again, so
 * that once the restore is over, its processes are seen traced. */
static void await_registered(const pid_t *served, int k, int ms)
{
	for (int i = 0; i < k; i++)
		while (ms > 0 && engine_alive(served[i])) {
			proc *p = registry_get(served[i]);
			if (p) {
				registry_put(p);
				break;
			}
			struct timespec ts = { 0, 10000000 };
			nanosleep(&ts, NULL);
			ms -= 10;
		}
}

/* Waits for a job process and records how it ended in t. */
static void finish_job(target *t, spawn *s, bool checkpoint)
{
	int st = 0;
	while (waitpid(s->child, &st, 0) < 0 && errno == EINTR)
		;
	engine_shared *sh = s->sh;
	if (!checkpoint) {
		pid_t served[ENGINE_SERVED_MAX];
		await_registered(served, served_of(sh, served, ENGINE_SERVED_MAX), REGISTER_WAIT_MS);
	}
	pthread_mutex_lock(&t->lock);
	if (atomic_load(&sh->finished)) {
		t->result = sh->result;
		if (sh->result)
			snprintf(t->error, sizeof(t->error), "%s failed: %s", t->job, sh->err);
	} else {
		t->result = -EIO;
		snprintf(t->error, sizeof(t->error), "%s failed: the job process %s %d", t->job,
			 WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
	if (!t->result && checkpoint)
		snprintf(t->last, sizeof(t->last), "%s", t->name);
	t->last_stall_ns = atomic_load(&sh->prog.stall_ns);
	memcpy(&t->last_prog, &sh->prog, sizeof(t->last_prog));
	for (int i = 0; i < STEP_DONE; i++)
		t->last_step_ns[i] = atomic_load(&sh->prog.step_ns[i]);
	t->restored = atomic_load(&sh->pid);
	if (t->result)
		syslog(LOG_WARNING, "%s", t->error);
	else if (checkpoint)
		syslog(LOG_INFO, "process %d: %s done, stall %.3f s", (int)t->pid, t->job, t->last_stall_ns / 1e9);
	else
		syslog(LOG_INFO, "%s done: process %d runs%s%.*s", t->job, (int)t->restored,
		       *t->last_prog.devices ? "; GPUs moved: " : "", (int)sizeof(t->last_prog.devices),
		       t->last_prog.devices);
	t->busy = false;
	t->sh = NULL;
	pthread_cond_broadcast(&t->done);
	pthread_mutex_unlock(&t->lock);
	munmap(sh, sizeof(*sh));
}

typedef struct watch {
	target *t;
	spawn s;
	bool staging; /* the job has the staging pool */
} watch;

static void *watch_main(void *arg)
{
	watch *w = arg;
	finish_job(w->t, &w->s, true);
	if (w->staging)
		staging_give();
	free(w);
	return NULL;
}

static const char *proto_name(enum ctl_proto p)
{
	return p == CTL_COW ? "cow" : p == CTL_RECOPY ? "recopy" : "stop";
}

/* Device bytes the process's state table shows: what its copy moves. */
static uint64_t table_bytes(const proc *p)
{
	uint64_t sum = 0;
	state_header *h = p->table;
	if (!h)
		return 0;
	uint32_t used = atomic_load(&h->used);
	for (uint32_t i = 0; i < used && i < h->capacity; i++)
		if (atomic_load(&state_slots(h)[i].va))
			sum += state_slots(h)[i].size;
	return sum;
}

int job_checkpoint(target *t, const ctl_cmd *c, char *err, size_t errlen)
{
	char dir[PATH_MAX], image[PATH_MAX + 80], logdir[PATH_MAX + 16], log[PATH_MAX + 120];
	snprintf(dir, sizeof(dir), "%s/%d", phosfs_store, (int)t->pid);
	/* Its tracers are the restore's until all device memory is back. */
	int we = await_restored(t->pid, RESTORE_WAIT_MS, err, errlen);
	if (we)
		return we;
	pthread_mutex_lock(&t->lock);
	if (t->busy) {
		pthread_mutex_unlock(&t->lock);
		return engine_fail(-EBUSY, err, errlen, "busy: %s is running", t->job);
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		int e = -errno;
		pthread_mutex_unlock(&t->lock);
		return engine_fail(e, err, errlen, "cannot make %s: %s", dir, strerror(-e));
	}
	/* Only for showing the owner after the process is gone. */
	if (t->uid != (uid_t)-1)
		(void)!chown(dir, t->uid, (gid_t)-1);
	char name[CTL_NAME_MAX + 1];
	if (*c->name)
		snprintf(name, sizeof(name), "%s", c->name);
	else
		next_name(dir, name, sizeof(name));
	snprintf(image, sizeof(image), "%s/%s", dir, name);
	struct stat st;
	if (lstat(image, &st) == 0) {
		pthread_mutex_unlock(&t->lock);
		return engine_fail(-EEXIST, err, errlen, "checkpoint %s exists", name);
	}
	snprintf(logdir, sizeof(logdir), "%s/.logs", dir);
	mkdir(logdir, 0700);
	snprintf(log, sizeof(log), "%s/%s-dump.log", logdir, name);
	unlink(log);

	/* Each registered process of the tree hands its connection to the
	 * job: it parks. The rest of the tree is dumped as it is. */
	phosimg_member *m = NULL;
	uint32_t n = 0;
	pid_t root = job_root(t->pid);
	int e = engine_tree(root, &m, &n);
	proc **procs = e ? NULL : calloc(n, sizeof(*procs));
	if (!e && !procs)
		e = -ENOMEM;
	if (e) {
		free(m);
		pthread_mutex_unlock(&t->lock);
		return engine_fail(e == -ESRCH ? e : -ENOMEM, err, errlen,
				   e == -ESRCH ? "process %d is not running" : "out of memory (process %d)", (int)t->pid);
	}
	int ntraced = 0;
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < n && !e; i++) {
		proc *p = registry_get(m[i].pid);
		if (p && (p->hello.flags & WIRE_HELLO_STOP_ONLY))
			e = engine_fail(-EOPNOTSUPP, err, errlen, "process %d cannot be parked (%s)", (int)p->pid,
					p->hello.stop_only_reason);
		if (p) {
			bytes += table_bytes(p);
			procs[ntraced++] = p;
		}
	}
	/* CoW needs the tracer; a checkpoint that names no protocol of a
	 * tree without one stops it instead. */
	enum ctl_proto proto = c->proto != CTL_DEFAULT ? c->proto : ntraced ? CTL_COW : CTL_STOP;
	if (!e && (proto == CTL_COW || proto == CTL_RECOPY) && !ntraced)
		e = engine_fail(-EOPNOTSUPP, err, errlen,
				"checkpoint %s needs the tracer, and no process of %d's tree was started with phos run; "
				"use checkpoint stop",
				proto_name(proto), (int)t->pid);
	int *conns = e ? NULL : calloc((size_t)ntraced + 1, sizeof(*conns));
	char (*members)[48] = e ? NULL : calloc((size_t)ntraced + 1, sizeof(*members));
	char **args = e ? NULL : calloc(24 + 2 * (size_t)ntraced, sizeof(*args));
	if (!e && (!conns || !members || !args))
		e = engine_fail(-ENOMEM, err, errlen, "out of memory");
	int nconns = 0;
	t->nparked = 0;
	for (int i = 0; i < ntraced; i++) {
		if (!e) {
			pid_t tid = procs[i]->hello.control_tid;
			int c = registry_take(procs[i]);
			if (c >= 0) {
				conns[nconns] = c;
				snprintf(members[nconns], sizeof(members[0]), "%d:%d:%d", (int)procs[i]->pid, c, (int)tid);
				nconns++;
				if (t->nparked < (int)(sizeof(t->parked) / sizeof(*t->parked)))
					t->parked[t->nparked++] = procs[i]->pid;
			}
		}
		registry_put(procs[i]);
	}
	free(procs);
	free(m);
	char pid_s[16], staging_s[24], chunk_s[24], pool_s[24], sfd_s[16];
	snprintf(pid_s, sizeof(pid_s), "%d", (int)root);
	/* The staging pool needs to hold no more than the memory copied. */
	uint64_t staging = phosfs_staging, room = bytes + bytes / 8 + 4 * phosfs_chunk;
	if (bytes && room < staging)
		staging = room;
	snprintf(staging_s, sizeof(staging_s), "%llu", (unsigned long long)staging);
	snprintf(chunk_s, sizeof(chunk_s), "%llu", (unsigned long long)phosfs_chunk);
	snprintf(pool_s, sizeof(pool_s), "%llu", (unsigned long long)phosfs_shadow_pool);
	int sfd = e ? -1 : staging_take();
	snprintf(sfd_s, sizeof(sfd_s), "%d", sfd);
	watch *w = NULL;
	if (!e) {
		int k = 0;
		const char *fixed[] = { "stop",	   "--pid",	  pid_s,       "--image", image,   "--criu",
					phosfs_criu, "--log",	  log,	       "--staging", staging_s, "--chunk",
					chunk_s,     "--shadow-pool", pool_s };
		for (size_t i = 0; i < sizeof(fixed) / sizeof(*fixed); i++)
			args[k++] = (char *)fixed[i];
		if (*phosfs_criu_plugins) {
			args[k++] = "--plugins";
			args[k++] = (char *)phosfs_criu_plugins;
		}
		if (c->kill)
			args[k++] = "--kill";
		if (proto == CTL_COW)
			args[k++] = "--cow";
		if (proto == CTL_RECOPY)
			args[k++] = "--recopy";
		if (sfd >= 0) {
			args[k++] = "--staging-fd";
			args[k++] = sfd_s;
			conns[nconns] = sfd; /* kept open in the job, not closed here */
		}
		for (int i = 0; i < nconns; i++) {
			args[k++] = "--member";
			args[k++] = members[i];
		}
		args[k] = NULL;
		w = calloc(1, sizeof(*w));
		e = w ? spawn_job(args, conns, nconns + (sfd >= 0), &w->s, err, errlen) : -ENOMEM;
		if (w)
			w->staging = sfd >= 0;
	}
	for (int i = 0; i < nconns; i++)
		close(conns[i]);
	free(conns);
	free(members);
	free(args);
	if (e) {
		if (sfd >= 0)
			staging_give();
		free(w);
		pthread_mutex_unlock(&t->lock);
		return e;
	}
	w->t = t;
	t->busy = true;
	t->kind = CTL_CHECKPOINT;
	t->sh = w->s.sh;
	t->result = 0;
	t->error[0] = 0;
	t->traced = nconns > 0;
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->job, sizeof(t->job), "checkpoint %s name=%s%s", proto_name(proto), name, c->kill ? " kill" : "");
	pthread_t th;
	if (pthread_create(&th, NULL, watch_main, w) != 0) {
		/* Without a watcher, wait here. */
		pthread_mutex_unlock(&t->lock);
		finish_job(t, &w->s, true);
		if (w->staging)
			staging_give();
		free(w);
		return 0;
	}
	pthread_detach(th);
	pthread_mutex_unlock(&t->lock);
	syslog(LOG_INFO, "process %d: %s started", (int)t->pid, t->job);
	return 0;
}

int job_cancel(target *t, char *err, size_t errlen)
{
	pthread_mutex_lock(&t->lock);
	int e = 0;
	if (!t->busy || !t->sh)
		e = engine_fail(-EINVAL, err, errlen, "no job to cancel");
	else
		atomic_store(&t->sh->prog.cancel, true);
	pthread_mutex_unlock(&t->lock);
	return e;
}

/* A restore job that runs on after its tree does (lazy): waits for it. */
typedef struct restore_watch {
	target *t;
	spawn s;
} restore_watch;

static void *restore_watch_main(void *arg)
{
	restore_watch *w = arg;
	finish_job(w->t, &w->s, false);
	free(w);
	return NULL;
}

/* Waits until the restore job's tree runs or the job ends; the root pid
 * that runs, or 0. */
static pid_t await_resume(spawn *s)
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

int job_restore(const ctl_cmd *c, pid_t *pid, char *err, size_t errlen)
{
	target *r = target_root();
	char logdir[PATH_MAX], log[PATH_MAX + 64];
	snprintf(logdir, sizeof(logdir), "%s/.logs", phosfs_store);
	mkdir(logdir, 0700);
	snprintf(log, sizeof(log), "%s/restore-%lld-%d.log", logdir, (long long)time(NULL), (int)gettid());
	char threads[16];
	snprintf(threads, sizeof(threads), "%d", phosfs_fill_threads);
	/* 15 words at most, and the NULL */
	char *args[24] = { "restore", "--image", (char *)c->dir, "--criu", (char *)phosfs_criu, "--log", log,
			   "--fill-threads", threads };
	int k = 9;
	if (*c->devices) {
		args[k++] = "--devices";
		args[k++] = (char *)c->devices;
	}
	if (*phosfs_criu_plugins) {
		args[k++] = "--plugins";
		args[k++] = (char *)phosfs_criu_plugins;
	}
	if (c->lazy)
		args[k++] = "--lazy";
	if (c->lazy_pages)
		args[k++] = "--lazy-pages";
	args[k] = NULL;
	/* One restore at a time: the root target holds its outcome. A lazy
	 * one is busy until all its memory is back. */
	pthread_mutex_lock(&r->lock);
	while (r->busy)
		pthread_cond_wait(&r->done, &r->lock);
	r->busy = true;
	pthread_mutex_unlock(&r->lock);
	spawn s;
	int e = spawn_job(args, NULL, 0, &s, err, errlen);
	pthread_mutex_lock(&r->lock);
	if (e) {
		r->busy = false;
		pthread_cond_broadcast(&r->done);
		pthread_mutex_unlock(&r->lock);
		return e;
	}
	snprintf(r->job, sizeof(r->job), "restore %.80s%s%s", c->dir, c->lazy ? " lazy" : " eager",
		 c->lazy_pages ? " lazy-pages" : "");
	r->error[0] = 0;
	r->restored = 0;
	r->result = 0;
	r->kind = CTL_RESTORE;
	r->sh = s.sh;
	pthread_mutex_unlock(&r->lock);
	pid_t runs = await_resume(&s);
	restore_watch *w = runs > 0 && !atomic_load(&s.sh->finished) ? malloc(sizeof(*w)) : NULL;
	pthread_t th;
	if (w) {
		*w = (restore_watch){ .t = r, .s = s };
		pthread_mutex_lock(&r->lock);
		r->restored = runs;
		pthread_mutex_unlock(&r->lock);
		if (pthread_create(&th, NULL, restore_watch_main, w) == 0) {
			pthread_detach(th);
			*pid = runs;
		} else {
			free(w);
			w = NULL;
		}
	}
	if (!w) {
		finish_job(r, &s, false);
		pthread_mutex_lock(&r->lock);
		e = r->result;
		*pid = r->restored;
		if (e)
			snprintf(err, errlen, "%s", r->error);
		pthread_mutex_unlock(&r->lock);
	}
	target *t = !e && *pid > 0 ? target_get(*pid, true) : NULL;
	if (t) {
		pthread_mutex_lock(&t->lock);
		t->uid = pid_owner(*pid);
		t->error[0] = 0;
		snprintf(t->job, sizeof(t->job), "restore %.80s", c->dir);
		t->result = 0;
		pthread_mutex_unlock(&t->lock);
	}
	return e;
}
