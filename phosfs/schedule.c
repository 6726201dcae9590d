/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Periodic checkpoints of a job (phosfs.h: schedule_set, schedule_status):
 * `schedule every=DURATION|auto [mtbf=DURATION] [keep=N] [PROTOCOL]` on
 * /<pid>/ctl, which `phos run --checkpoint-every` writes.
 *
 * Each schedule has a thread of its own that sleeps until the next
 * checkpoint is due, starts it as a ctl write would (job_checkpoint), and
 * waits for it to end. After one that succeeded it removes the job's
 * numbered checkpoints beyond the newest `keep`, never the one `latest`
 * names. It ends with the job's process, or at `schedule off`, or when
 * another schedule replaces it.
 *
 * With every=auto the interval is Young and Daly's, sqrt(2 C M): C is
 * what a checkpoint costs the job, measured on its own checkpoints (the
 * mean, over the last SCHED_COSTS, of the stall plus the time its calls
 * waited for the copy: CoW and safety-net waits), M the mean time
 * between failures (mtbf=, default SCHED_MTBF_S). Before any checkpoint
 * of the job was measured, the first comes after SCHED_FIRST_S. The
 * interval is kept within [SCHED_MIN_S, M].
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "phosfs.h"

#define SCHED_COSTS 5
#define SCHED_MTBF_S 86400.0
#define SCHED_FIRST_S 60.0
#define SCHED_MIN_S 10.0

typedef struct sched {
	pid_t pid;
	unsigned long long started; /* the process's start time (/proc/PID/stat): a pid used again is not it */
	ctl_cmd cmd;       /* what was asked */
	double costs[SCHED_COSTS]; /* seconds, the newest last */
	int ncosts;
	double interval_s; /* the interval now */
	char why[256];     /* how it was chosen */
	uint64_t due_ns;   /* the next checkpoint, CLOCK_MONOTONIC */
	unsigned taken, failed;
	bool stop;         /* replaced, or off: the thread ends */
	struct sched *next;
} sched;

/* Guarded by lock: the list and every field of every schedule in it. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static sched *list;
static int threads; /* schedules' threads that run: schedule_stop_all waits for 0 */
static _Atomic bool stopping; /* phosfs ends: every thread ends (read without the lock in take) */

/* Whether s's process still runs: the same pid, started when it was. */
static bool same_process(const sched *s)
{
	return s->started && engine_proc_start(s->pid) == s->started;
}

static void interval_locked(sched *s)
{
	if (s->cmd.every_s) {
		s->interval_s = s->cmd.every_s;
		snprintf(s->why, sizeof(s->why), "fixed");
		return;
	}
	double m = s->cmd.mtbf_s ? s->cmd.mtbf_s : SCHED_MTBF_S;
	if (!s->ncosts) {
		s->interval_s = SCHED_FIRST_S < m ? SCHED_FIRST_S : m;
		snprintf(s->why, sizeof(s->why), "auto: the first checkpoint measures its cost (MTBF %.0f s)", m);
		return;
	}
	double c = 0;
	for (int i = 0; i < s->ncosts; i++)
		c += s->costs[i];
	c /= s->ncosts;
	double t = sqrt(2 * c * m);
	s->interval_s = t < SCHED_MIN_S ? SCHED_MIN_S : t > m ? m : t;
	snprintf(s->why, sizeof(s->why),
		 "auto: Young and Daly, sqrt(2 x cost %.3f s x MTBF %.0f s) = %.0f s; cost: stall and copy waits, "
		 "mean of the last %d",
		 c, m, t, s->ncosts);
}

/* What the checkpoint that just ended cost the job, in seconds: its
 * stall and its calls' waits for the copy; -1 when it failed. */
static double cost_of(target *t)
{
	pthread_mutex_lock(&t->lock);
	double c = t->result ? -1
			     : (t->last_stall_ns + atomic_load(&t->last_prog.wait_ns) +
				atomic_load(&t->last_prog.net_wait_ns)) / 1e9;
	pthread_mutex_unlock(&t->lock);
	return c;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) ? -1 : 0;
}

static int by_number(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* Removes the job's numbered checkpoints beyond the newest keep, except
 * the one `latest` names, and those being read through the mount
 * (readers_claim), which a later prune removes. */
static void prune(pid_t pid, unsigned keep)
{
	char dir[PATH_MAX], link[32] = "";
	snprintf(dir, sizeof(dir), "%s/%d", phosfs_store, (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return;
	long nums[1024];
	size_t n = 0;
	for (struct dirent *de; (de = readdir(d)) && n < sizeof(nums) / sizeof(*nums);) {
		char *end;
		long v = strtol(de->d_name, &end, 10);
		if (de->d_name[0] >= '1' && de->d_name[0] <= '9' && !*end)
			nums[n++] = v;
	}
	closedir(d);
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/latest", dir);
	ssize_t l = readlink(path, link, sizeof(link) - 1);
	link[l > 0 ? l : 0] = 0;
	qsort(nums, n, sizeof(*nums), by_number);
	for (size_t i = 0; i + keep < n; i++) {
		char name[24];
		snprintf(name, sizeof(name), "%ld", nums[i]);
		if (atol(link) == nums[i] || !readers_claim(pid, name))
			continue;
		/* Out of sight at once, then removed. */
		char gone[PATH_MAX + 48];
		snprintf(path, sizeof(path), "%s/%ld", dir, nums[i]);
		snprintf(gone, sizeof(gone), "%s/.pruned-%ld", dir, nums[i]);
		if (rename(path, gone) || nftw(gone, remove_one, 16, FTW_DEPTH | FTW_PHYS))
			syslog(LOG_WARNING, "process %d: the schedule could not remove %s: %m", (int)pid, path);
		readers_forget(pid, name);
	}
}

void schedule_clear_pruned(const char *dir)
{
	DIR *d = opendir(dir);
	for (struct dirent *de; d && (de = readdir(d));) {
		if (strncmp(de->d_name, ".pruned-", 8))
			continue;
		char path[PATH_MAX + 512];
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	}
	if (d)
		closedir(d);
}

/* Takes one checkpoint of s's job and waits for it; its cost, or -1. */
static double take(sched *s, const ctl_cmd *c)
{
	target *t = target_get(s->pid, true);
	perr er = { 0 };
	int e = t ? job_checkpoint(t, c, &er) : -ENOMEM;
	if (e) {
		/* One that runs already (asked by hand) is no error of the job's. */
		if (t && e != -EBUSY)
			target_error(t, "scheduled checkpoint: %s", pr_msg(&er));
		return -1;
	}
	/* The job has deadlines of its own; this wait ends with phosfs too. */
	pthread_mutex_lock(&t->lock);
	while (t->busy && !stopping) {
		struct timespec until = engine_deadline(1000);
		pthread_cond_timedwait(&t->done, &t->lock, &until);
	}
	pthread_mutex_unlock(&t->lock);
	return cost_of(t);
}

static void *sched_main(void *arg)
{
	sched *s = arg;
	pthread_mutex_lock(&lock);
	while (!s->stop && !stopping) {
		uint64_t now = engine_now_ns();
		if (now < s->due_ns) {
			/* A second at most: a job that ended ends its schedule. */
			uint64_t ms = (s->due_ns - now) / 1000000u + 1;
			struct timespec until = engine_deadline(ms < 1000 ? (int)ms : 1000);
			pthread_cond_timedwait(&wake, &lock, &until);
			pthread_mutex_unlock(&lock);
			bool alive = same_process(s);
			pthread_mutex_lock(&lock);
			if (!alive)
				break;
			continue;
		}
		if (!same_process(s))
			break;
		ctl_cmd c = { .verb = CTL_CHECKPOINT, .proto = s->cmd.proto };
		unsigned keep = s->cmd.keep;
		pthread_mutex_unlock(&lock);
		double cost = take(s, &c);
		if (cost >= 0 && keep)
			prune(s->pid, keep);
		pthread_mutex_lock(&lock);
		if (cost >= 0) {
			if (s->ncosts == SCHED_COSTS)
				memmove(s->costs, s->costs + 1, sizeof(s->costs) - sizeof(*s->costs));
			s->costs[s->ncosts < SCHED_COSTS ? s->ncosts++ : SCHED_COSTS - 1] = cost;
			s->taken++;
		} else {
			s->failed++;
		}
		interval_locked(s);
		s->due_ns = engine_now_ns() + (uint64_t)(s->interval_s * 1e9);
	}
	/* Off the list, then gone. */
	for (sched **p = &list; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	threads--;
	pthread_cond_broadcast(&wake);
	pthread_mutex_unlock(&lock);
	free(s);
	return NULL;
}

int schedule_set(pid_t pid, const ctl_cmd *c, perr *er)
{
	/* The job's last checkpoint, where it has one, is its first cost
	 * (before the schedules' lock: the target's may be held long). */
	target *t = target_get(pid, false);
	double c0 = t && !c->every_s && !c->off ? cost_of(t) : -1;
	unsigned long long started = engine_proc_start(pid);
	pthread_mutex_lock(&lock);
	for (sched *o = list; o; o = o->next)
		if (o->pid == pid && !o->stop)
			o->stop = true; /* replaced: its thread ends */
	pthread_cond_broadcast(&wake);
	if (c->off) {
		pthread_mutex_unlock(&lock);
		return 0;
	}
	sched *s = calloc(1, sizeof(*s));
	if (!s) {
		pthread_mutex_unlock(&lock);
		return pr_err(er, -ENOMEM, "out of memory");
	}
	s->pid = pid;
	s->started = started;
	s->cmd = *c;
	if (c0 > 0)
		s->costs[s->ncosts++] = c0;
	interval_locked(s);
	s->due_ns = engine_now_ns() + (uint64_t)(s->interval_s * 1e9);
	pthread_t th;
	int e = pthread_create(&th, NULL, sched_main, s);
	if (e) {
		pthread_mutex_unlock(&lock);
		free(s);
		return pr_err(er, -e, "cannot start the schedule's thread: %s", strerror(e));
	}
	pthread_detach(th);
	threads++;
	s->next = list;
	list = s;
	double every = s->interval_s;
	char why[sizeof(s->why)];
	snprintf(why, sizeof(why), "%s", s->why);
	pthread_mutex_unlock(&lock);
	syslog(LOG_INFO, "process %d: checkpoints every %.0f s (%s)", (int)pid, every, why);
	return 0;
}

void schedule_status(pid_t pid, text *t)
{
	pthread_mutex_lock(&lock);
	for (sched *s = list; s; s = s->next) {
		if (s->pid != pid || s->stop)
			continue;
		uint64_t now = engine_now_ns();
		text_add(t, "checkpoint interval s: %.0f\ncheckpoint interval why: %s\n", s->interval_s, s->why);
		text_add(t, "next checkpoint in s: %.0f\n", s->due_ns > now ? (s->due_ns - now) / 1e9 : 0.0);
		text_add(t, "scheduled checkpoints: %u taken, %u failed%s", s->taken, s->failed, s->cmd.keep ? "" : "\n");
		if (s->cmd.keep)
			text_add(t, " (the newest %u kept)\n", s->cmd.keep);
	}
	pthread_mutex_unlock(&lock);
}

void schedule_stop_all(void)
{
	pthread_mutex_lock(&lock);
	stopping = true;
	pthread_cond_broadcast(&wake);
	/* A checkpoint under way ends first: its job has its deadlines. */
	while (threads) {
		struct timespec until = engine_deadline(1000);
		pthread_cond_timedwait(&wake, &lock, &until);
	}
	pthread_mutex_unlock(&lock);
}
