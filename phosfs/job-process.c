/*
 * A job process. phosfs runs each checkpoint and restore as
 *
 *   phosfs --job stop    --shared FD --pid PID --image PATH --criu CRIU --log LOG
 *                        [--kill] [--cow] [--staging BYTES] [--staging-fd FD] [--chunk BYTES]
 *                        [--shadow-pool BYTES] [--plugins DIR] [--member PID:CONN:TID]…
 *   phosfs --job restore --shared FD --image PATH --criu CRIU --log LOG [--devices OLD=NEW,…] [--plugins DIR]
 *                        [--fill-threads N] [--timeout SECONDS] [--lazy] [--lazy-pages]
 *
 * so that a job finishes even if phosfs is killed: the process it parked
 * gets its memory back, and the image is published or not at all. The
 * job reports through the shared memfd (engine_shared); its exit status
 * is 0 on success.
 *
 * PID is the root of the tree checkpointed; each --member is a traced
 * process of it, with the connection phosfs handed over and its control
 * thread. With --cow the members run again after the dump, and their
 * memory is copied while they run.
 *
 * A woken tracer finds the job on the abstract socket
 * "phos-resume.<pid>" (wire_listen_resume).
 *
 * A restore job is the subreaper of what it restores, and a watchdog
 * gives each of its steps --timeout seconds (the fill's: without
 * progress): a step that runs out of time fails the restore, which kills
 * CRIU and every process it restored, and says which step it was.
 */
#include <errno.h>
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

#include "../restore/restore.h"
#include "phosfs.h"

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
	engine_shared *sh;
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

/* Ends the job when a step runs out of time; the fill's steps count time
 * since their last progress. */
static void *watchdog_main(void *arg)
{
	watchdog *w = arg;
	engine_progress *p = &w->sh->prog;
	int step = -1;
	uint64_t done = 0, since = engine_now_ns(), limit = (uint64_t)w->timeout_s * 1000000000u;
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
		if (s != step || ((s == STEP_FILL || s == STEP_LAZY) && d != done)) {
			step = s;
			done = d;
			since = now;
			continue;
		}
		if (s == STEP_DONE || now - since < limit)
			continue;
		kill_below();
		snprintf(w->sh->err, sizeof(w->sh->err),
			 "its step %s did not end within %d s%s: CRIU and the processes it restored were killed "
			 "(phosfs --restore-timeout; CRIU's log: %s)",
			 engine_step_name(s), w->timeout_s, s == STEP_FILL || s == STEP_LAZY ? " of no progress" : "",
			 w->log);
		w->sh->result = -ETIMEDOUT;
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

int job_process_main(int argc, char **argv)
{
	const char *kind = NULL, *image = NULL, *criu = "criu", *log = "/dev/null", *devices = NULL;
	int shared_fd = -1;
	pid_t pid = 0;
	bool kill = false, cow = false, recopy = false, lazy = false, lazy_pages = false;
	int fill_threads = 0, timeout_s = 0;
	uint64_t staging = 0, chunk = 0, pool = 0;
	int staging_fd = -1;
	engine_traced *traced = calloc((size_t)argc, sizeof(*traced));
	int ntraced = 0;
	if (!traced)
		return 2;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--job") && v)
			kind = argv[++i];
		else if (!strcmp(argv[i], "--shared") && v)
			shared_fd = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pid") && v)
			pid = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--image") && v)
			image = argv[++i];
		else if (!strcmp(argv[i], "--criu") && v)
			criu = argv[++i];
		else if (!strcmp(argv[i], "--log") && v)
			log = argv[++i];
		else if (!strcmp(argv[i], "--plugins") && v)
			engine_criu_plugins = argv[++i];
		else if (!strcmp(argv[i], "--devices") && v)
			devices = argv[++i];
		else if (!strcmp(argv[i], "--member") && v) {
			engine_traced *t = &traced[ntraced];
			if (sscanf(argv[++i], "%d:%d:%d", &t->pid, &t->conn, &t->control_tid) == 3)
				ntraced++;
		} else if (!strcmp(argv[i], "--kill"))
			kill = true;
		else if (!strcmp(argv[i], "--cow"))
			cow = true;
		else if (!strcmp(argv[i], "--recopy"))
			recopy = true;
		else if (!strcmp(argv[i], "--lazy"))
			lazy = true;
		else if (!strcmp(argv[i], "--lazy-pages"))
			lazy_pages = true;
		else if (!strcmp(argv[i], "--staging") && v)
			staging = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--staging-fd") && v)
			staging_fd = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--chunk") && v)
			chunk = (uint32_t)strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--shadow-pool") && v)
			pool = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--fill-threads") && v)
			fill_threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--timeout") && v)
			timeout_s = atoi(argv[++i]);
	}
	engine_shared *sh = shared_fd >= 0 ? mmap(NULL, sizeof(engine_shared), PROT_READ | PROT_WRITE, MAP_SHARED,
						   shared_fd, 0)
					   : MAP_FAILED;
	if (sh == MAP_FAILED || !kind || !image) {
		fprintf(stderr, "phosfs: a job needs --job, --shared and --image\n");
		free(traced);
		return 2;
	}
	close(shared_fd);
	rendezvous rv = { -1, -1 };
	engine_tracer t = { .expect = rv_expect, .await = rv_await, .adopt = rv_done, .drop = rv_done, .arg = &rv };
	char err[ENGINE_ERR_MAX] = "";
	int e;
	if (!strcmp(kind, "stop")) {
		engine_stop_args a = { .pid = pid, .image = image, .criu = criu, .log = log, .kill = kill,
				       .traced = traced, .ntraced = ntraced, .tracer = &t, .prog = &sh->prog,
				       .cow = cow, .recopy = recopy, .staging = staging, .staging_fd = staging_fd, .chunk = (uint32_t)chunk, .shadow_pool = pool };
		e = engine_stop(&a, err, sizeof(err));
		if (!e)
			set_latest(image);
	} else if (!strcmp(kind, "restore")) {
		pid_t rpid = 0;
		/* What CRIU restores stays below this process until it ends. */
		prctl(PR_SET_CHILD_SUBREAPER, 1);
		watchdog wd = { .sh = sh,
				.timeout_s = timeout_s,
				.log = log,
				.lock = PTHREAD_MUTEX_INITIALIZER,
				.wake = PTHREAD_COND_INITIALIZER };
		pthread_t th;
		bool watched = timeout_s > 0 && pthread_create(&th, NULL, watchdog_main, &wd) == 0;
		restore_args a = { .image = image, .devices = devices, .criu = criu, .log = log, .lazy_pages = lazy_pages,
				   .fill_threads = fill_threads, .tracer = &t,
				   .prog = &sh->prog, .pid = &rpid, .resumed = &sh->resumed,
				   .served = sh->served, .nserved = &sh->nserved };
		e = lazy ? restore_lazy(&a, err, sizeof(err)) : restore_eager(&a, err, sizeof(err));
		atomic_store(&sh->pid, rpid);
		if (watched) {
			pthread_mutex_lock(&wd.lock);
			wd.stop = true;
			pthread_cond_signal(&wd.wake);
			pthread_mutex_unlock(&wd.lock);
			pthread_join(th, NULL);
		}
	} else {
		e = engine_fail(-EINVAL, err, sizeof(err), "unknown job %s", kind);
	}
	for (int i = 0; i < ntraced; i++)
		close(traced[i].conn);
	free(traced);
	rv_done(&rv, pid);
	engine_step(&sh->prog, STEP_DONE);
	sh->result = e;
	snprintf(sh->err, sizeof(sh->err), "%s", e && !*err ? strerror(-e) : err);
	atomic_store(&sh->finished, 1);
	munmap(sh, sizeof(*sh));
	return e ? 1 : 0;
}
