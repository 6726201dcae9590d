/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job process's main (job.h). phosfs runs each checkpoint and restore as
 *
 *   phosfs --job stop --pid ROOT --shared FD
 *   phosfs --job restore --shared FD
 *   phosfs --job pool --shared FD --wake FD   (started ahead: it loads
 *       the driver, then waits for a byte on FD that says its request,
 *       a restore's, is there; phosfs/pool.c)
 *
 * so that a job finishes even if phosfs is killed: the process it parked
 * gets its memory back, and the image is published or not at all. What
 * the job is asked is a typed request (request.h) in the memfd FD that it
 * shares with phosfs (job_shared); the words before it are for people
 * reading ps. The job checks the request before it acts, and reports
 * through the same memfd; its exit status is 0 on success.
 *
 * A checkpoint's request names the root of the tree and each traced
 * process of it, with the connection phosfs handed over (an fd left open
 * here) and its control thread. With cow the members run again after the
 * dump, and their memory is copied while they run.
 *
 * A woken tracer finds the job on the abstract socket
 * "phos-resume.<pid>" (wire_listen_resume).
 *
 * A restore job is the subreaper of what it restores, and a watchdog
 * gives each of its steps the request's timeout (the fill's: without
 * progress): a step that runs out of time fails the restore, which kills
 * CRIU and every process it restored, and says which step it was.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../engine/driver.h"
#include "../engine/fuse-wait.h"
#include "job.h"

/* The rendezvous with the woken tracer; used by this process alone. */
typedef struct rendezvous {
	int lfd, conn;
} rendezvous;

static int rv_expect(void *arg, pid_t pid)
{
	rendezvous *r = arg;
	r->lfd = wire_listen_resume(pid);
	return r->lfd < 0 ? r->lfd : 0;
}

static int rv_await(void *arg, pid_t pid, int timeout_ms, int *conn)
{
	rendezvous *r = arg;
	for (;;) {
		struct pollfd pf = { r->lfd, POLLIN, 0 };
		int n = poll(&pf, 1, timeout_ms);
		if (n == 0)
			return -ETIMEDOUT;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		pid_t peer;
		wire_hello hello;
		int sfd;
		int c = wire_accept_hello(r->lfd, 2000, &peer, &hello, &sfd);
		if (c < 0)
			continue;
		if (sfd >= 0)
			close(sfd);
		if (peer != pid || !(hello.flags & WIRE_HELLO_RESUME)) {
			close(c);
			continue;
		}
		r->conn = c;
		*conn = c;
		return 0;
	}
}

/* Either way the job is done with the tracer: it goes back to phosfs's
 * main socket when this connection closes. */
static void rv_done(void *arg, pid_t pid)
{
	(void)pid;
	rendezvous *r = arg;
	if (r->conn >= 0)
		close(r->conn);
	if (r->lfd >= 0)
		close(r->lfd);
	r->conn = r->lfd = -1;
}

/* What the watchdog watches. */
typedef struct watchdog {
	job_shared *sh;
	int timeout_s;
	const char *log;
	pthread_mutex_t lock; /* guards stop */
	pthread_cond_t wake;  /* signalled when stop is set */
	bool stop;            /* the job is over: the watchdog ends at once */
} watchdog;

/* Kills every process below this one: CRIU, its lazy-pages daemon, and
 * the tree it restored (this process is its subreaper). Again, for what
 * forked meanwhile. */
static void kill_below(void)
{
	for (int round = 0; round < 3; round++) {
		phosimg_member *m = NULL;
		uint32_t n = 0;
		if (engine_tree(getpid(), &m, &n))
			return;
		for (uint32_t i = 1; i < n; i++) /* m[0] is this process */
			kill(m[i].pid, SIGKILL);
		free(m);
	}
}

/* The last line of the file at path (what CRIU was doing when it was
 * stopped) into out (len bytes), without its end of line; "" if none. */
static void last_line(const char *path, char *out, size_t len)
{
	*out = 0;
	FILE *f = fopen(path, "re");
	char l[512];
	while (f && fgets(l, sizeof(l), f))
		if (l[0] != '\n')
			snprintf(out, len, "%.*s", (int)strcspn(l, "\n"), l);
	if (f)
		fclose(f);
}

/* Ends the job when it runs out of time: its steps have the limit
 * together, and the fill's steps (which go on while they make progress)
 * count the time since their last progress. */
static void *watchdog_main(void *arg)
{
	watchdog *w = arg;
	engine_progress *p = &w->sh->prog;
	int step = -1;
	bool fills = false;
	uint64_t done = 0, since = engine_now_ns(), spent = 0, limit = (uint64_t)w->timeout_s * 1000000000u;
	for (;;) {
		struct timespec until = engine_deadline(100);
		pthread_mutex_lock(&w->lock);
		while (!w->stop && pthread_cond_timedwait(&w->wake, &w->lock, &until) == 0)
			;
		bool stop = w->stop;
		pthread_mutex_unlock(&w->lock);
		if (stop)
			break;
		int s = atomic_load(&p->step);
		uint64_t d = atomic_load(&p->done), now = engine_now_ns();
		if (s != step) {
			if (!fills)
				spent += now - since;
			/* The fill runs beside CRIU's restore too (STEP_RESTORE). */
			fills = s == STEP_FILL || s == STEP_LAZY || s == STEP_RESTORE;
			step = s;
			done = d;
			since = now;
			continue;
		}
		if (fills && d != done) {
			done = d;
			since = now;
			continue;
		}
		if (s == STEP_DONE || (fills ? now - since : spent + now - since) < limit)
			continue;
		char was[400], held[1100];
		last_line(w->log, was, sizeof(was));
		engine_fuse_held(getpid(), held, sizeof(held));
		kill_below();
		perr er;
		w->sh->result = pr_err(&er, -ETIMEDOUT,
				       "it did not end within %d s (in step %s%s)%s: CRIU and the processes it "
				       "restored were killed (phosfs --restore-timeout); CRIU's last words: \"%s\" "
				       "(log: %s)",
				       w->timeout_s, engine_step_name(s),
				       s == STEP_FILL || s == STEP_LAZY ? ", with no progress" : "", held, was, w->log);
		snprintf(w->sh->err, sizeof(w->sh->err), "%s", er.msg);
		atomic_store(&w->sh->finished, 1);
		_exit(1);
	}
	return NULL;
}

/* Points <dir>/latest at the image just published. */
static void set_latest(const char *image)
{
	char *dir = strdup(image);
	if (!dir)
		return;
	char *slash = strrchr(dir, '/');
	const char *name = slash ? slash + 1 : dir;
	if (slash)
		*slash = 0;
	char tmp[4200], latest[4200];
	snprintf(tmp, sizeof(tmp), "%s/.latest.%d", slash ? dir : ".", (int)getpid());
	snprintf(latest, sizeof(latest), "%s/latest", slash ? dir : ".");
	unlink(tmp);
	if (symlink(name, tmp) == 0 && rename(tmp, latest) != 0)
		unlink(tmp);
	free(dir);
}

static int fd_arg(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);
	return end != s && !*end && v >= 0 && v <= INT_MAX ? (int)v : -1;
}

/* A job started ahead (`--job pool --wake FD`, phosfs/pool.c): loads the
 * driver, says it is ready, and waits for the byte on wake that says its
 * request is in sh. Returns 0 then; -EPIPE when phosfs let go of it (or
 * is gone), -ENODEV when the driver failed: the process ends. */
static int wait_in_pool(job_shared *sh, int wake)
{
	perr er = { 0 };
	/* One whose driver failed is no use later (the error stays for the
	 * life of the process): it ends, and a restore starts its own job,
	 * which tries the driver again and says why it fails. */
	if (driver_load(&er)) {
		close(wake);
		return -ENODEV;
	}
	atomic_store(&sh->pool_ready, 1);
	char b;
	ssize_t n;
	while ((n = read(wake, &b, 1)) < 0 && errno == EINTR)
		;
	close(wake);
	return n == 1 ? 0 : -EPIPE;
}

/* The shared memfd named on the command line (`--shared FD`), mapped;
 * its request copied into *req and checked (a job of the pool first
 * waits for it). NULL when there is none, it does not check (stderr says
 * why), or a pooled job was let go. */
static job_shared *take_request(int argc, char **argv, job_request *req)
{
	/* --job and --pid are for people reading ps: the request says it all. */
	static const struct option opts[] = { { "job", required_argument, NULL, 'j' },
					      { "pid", required_argument, NULL, 'p' },
					      { "shared", required_argument, NULL, 's' },
					      { "wake", required_argument, NULL, 'w' },
					      { 0 } };
	int fd = -1, wake = -1;
	bool pooled = false;
	optind = 1;
	for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		if (o == 's') {
			fd = fd_arg(optarg);
		} else if (o == 'w') {
			wake = fd_arg(optarg);
		} else if (o == 'j') {
			pooled = !strcmp(optarg, "pool");
		} else if (o == '?') {
			fd = -1;
			break;
		}
	}
	job_shared *sh = fd >= 0 ? mmap(NULL, sizeof(job_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
				 : MAP_FAILED;
	if (fd >= 0)
		close(fd);
	if (sh == MAP_FAILED || (pooled && wake < 0)) {
		fprintf(stderr, "phosfs: a job is started by phosfs, with --shared FD (the memory it shares)\n");
		return NULL;
	}
	if (pooled && wait_in_pool(sh, wake)) {
		munmap(sh, sizeof(*sh));
		return NULL;
	}
	*req = sh->req; /* phosfs does not write it again; read it once */
	perr er = { 0 };
	int e = job_request_check(req, &er);
	if (e) {
		sh->result = e;
		snprintf(sh->err, sizeof(sh->err), "%s", pr_msg(&er));
		atomic_store(&sh->finished, 1);
		munmap(sh, sizeof(*sh));
		return NULL;
	}
	return sh;
}

/* A checkpoint job: checkpoint_run, then the store's latest link. */
static int run_checkpoint(const job_request *req, job_shared *sh, perr *er)
{
	const job_checkpoint_req *cr = &req->checkpoint;
	int ntraced = (int)cr->nmembers;
	engine_traced *traced = calloc((size_t)ntraced + 1, sizeof(*traced));
	if (!traced)
		return pr_err(er, -ENOMEM, "out of memory");
	for (int i = 0; i < ntraced; i++)
		traced[i] = (engine_traced){ cr->members[i].pid, cr->members[i].conn, cr->members[i].control_tid,
					     cr->members[i].devices, cr->members[i].buffers,
					     (cr->members[i].flags & JOB_MEMBER_KEEP) != 0 };
	rendezvous rv = { -1, -1 };
	engine_tracer t = { .expect = rv_expect, .await = rv_await, .adopt = rv_done, .drop = rv_done, .arg = &rv };
	checkpoint_args a = { .pid = cr->pid,
			       .image = req->image,
			       .criu = req->criu,
			       .log = req->log,
			       .kill = cr->kill,
			       .hold_ms = cr->hold_ms,
			       .traced = traced,
			       .ntraced = ntraced,
			       .tracer = &t,
			       .prog = &sh->prog,
			       .cow = cr->cow,
			       .recopy = cr->recopy,
			       .staging = cr->staging,
			       .staging_fd = cr->staging_fd,
			       .chunk = cr->chunk,
			       .timeout_ms = (int)cr->timeout_ms,
			       .dump_timeout_s = (int)cr->dump_timeout_s,
			       .shadow_pool = cr->shadow_pool };
	int e = checkpoint_run(&a, er);
	if (!e)
		set_latest(req->image);
	for (int i = 0; i < ntraced; i++)
		close(traced[i].conn);
	free(traced);
	rv_done(&rv, cr->pid);
	return e;
}

/* A restore job: eager or lazy, under a watchdog; the restored pid goes
 * to sh. */
static int run_restore(const job_request *req, job_shared *sh, perr *er)
{
	const job_restore_req *rr = &req->restore;
	rendezvous rv = { -1, -1 };
	engine_tracer t = { .expect = rv_expect, .await = rv_await, .adopt = rv_done, .drop = rv_done, .arg = &rv };
	pid_t rpid = 0;
	/* What CRIU restores stays below this process until it ends. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	watchdog wd = { .sh = sh,
			.timeout_s = rr->timeout_s,
			.log = req->log,
			.lock = PTHREAD_MUTEX_INITIALIZER,
			.wake = PTHREAD_COND_INITIALIZER };
	pthread_t th;
	bool watched = rr->timeout_s > 0 && pthread_create(&th, NULL, watchdog_main, &wd) == 0;
	restore_args a = { .image = req->image,
			   .devices = *rr->devices ? rr->devices : NULL,
			   .criu = req->criu,
			   .log = req->log,
			   .lazy = rr->lazy,
			   .lazy_pages = rr->lazy_pages,
			   .growing = rr->growing,
			   .fill_threads = rr->fill_threads,
			   .timeout_s = rr->timeout_s,
			   .cgroups = rr->cgroups,
			   .tracer = &t,
			   .prog = &sh->prog,
			   .pid = &rpid,
			   .resumed = &sh->resumed,
			   .served = sh->served,
			   .nserved = &sh->nserved };
	int e = restore_run(&a, er);
	atomic_store(&sh->pid, rpid);
	if (watched) {
		pthread_mutex_lock(&wd.lock);
		wd.stop = true;
		pthread_cond_signal(&wd.wake);
		pthread_mutex_unlock(&wd.lock);
		pthread_join(th, NULL);
	}
	rv_done(&rv, 0);
	return e;
}

/* A job's log: phosfs's stderr, each error with the function that made
 * it. */
static void log_error(const char *where, const char *msg)
{
	fprintf(stderr, "phosfs job %d: %s: %s\n", (int)getpid(), where, msg);
}

int job_main(int argc, char **argv)
{
	static job_request req; /* large: not on the stack */
	pr_log_to(log_error);
	job_shared *sh = take_request(argc, argv, &req);
	if (!sh)
		return 2;
	if (*req.plugins)
		engine_criu_plugins = req.plugins;
	perr er = { 0 };
	int e = req.kind == JOB_CHECKPOINT ? run_checkpoint(&req, sh, &er)
					   : run_restore(&req, sh, &er);
	engine_step(&sh->prog, STEP_DONE);
	sh->result = e;
	snprintf(sh->err, sizeof(sh->err), "%s", e && !*er.msg ? strerror(-e) : er.msg);
	atomic_store(&sh->finished, 1);
	munmap(sh, sizeof(*sh));
	/* Threads of a copy that hung are still inside the driver or a write:
	 * nothing they use is freed, and nothing at exit waits for them. */
	if (engine_copy_abandoned()) {
		fflush(NULL);
		_exit(1);
	}
	return e ? 1 : 0;
}
