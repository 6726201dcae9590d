/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos run --checkpoint-every DURATION|auto [--mtbf DURATION] (cli.h):
 * periodic checkpoints of the job, taken by phosfs (its `schedule`,
 * phosfs(8)), which phos run asks for once the job runs. While phos run
 * waits, it reads phosfs's /events, and links each checkpoint of its job
 * that phosfs published under the job's name, as it does those it takes
 * on a signal; so --restore-from latest finds the newest, whoever took
 * it.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/duration.h"
#include "cli.h"

int every_parse(const char *every, const char *mtbf, char *why, size_t len)
{
	double s;
	if (every && strcmp(every, "auto") && duration_parse(every, &s)) {
		snprintf(why, len, "--checkpoint-every '%s': expected auto, or seconds or a number with s, m, h or d "
				   "(1 s to 365 d)", every);
		return -EINVAL;
	}
	if (mtbf && duration_parse(mtbf, &s)) {
		snprintf(why, len, "--mtbf '%s': expected seconds or a number with s, m, h or d (1 s to 365 d)", mtbf);
		return -EINVAL;
	}
	if (mtbf && (!every || strcmp(every, "auto"))) {
		snprintf(why, len, "--mtbf is for --checkpoint-every auto, whose interval it sets");
		return -EINVAL;
	}
	return 0;
}

int every_start(pid_t job, const char *every, const char *mtbf, int keep)
{
	char ctl[PATH_MAX], cmd[160], reply[1200], ev[40] = "auto", mt[40] = "";
	double s;
	/* As seconds: the words given may be any length (every_parse checked them). */
	if (strcmp(every, "auto") && !duration_parse(every, &s))
		snprintf(ev, sizeof(ev), "%.3f", s);
	if (mtbf && !duration_parse(mtbf, &s))
		snprintf(mt, sizeof(mt), " mtbf=%.3f", s);
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", cli_mount(), (int)job);
	char keeps[24] = "";
	if (keep > 0)
		snprintf(keeps, sizeof(keeps), " keep=%d", keep);
	snprintf(cmd, sizeof(cmd), "schedule every=%s%s%s\n", ev, mt, keeps);
	int e = cli_ctl(ctl, cmd, reply, sizeof(reply));
	if (e)
		fprintf(stderr, "phos: --checkpoint-every: phosfs did not take the schedule of process %d: %s\n",
			(int)job, !strncmp(reply, "error: ", 7) ? reply + 7 : strerror(-e));
	else
		fprintf(stderr, "phos: checkpoints of process %d every %s%s%s (phos status %d shows the interval)\n",
			(int)job, every, mtbf ? ", MTBF " : "", mtbf ? mtbf : "", (int)job);
	return e;
}

int every_events_open(void)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/events", cli_mount());
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		fprintf(stderr, "phos: %s: %s: checkpoints phosfs takes on schedule are not linked under the job's name\n",
			path, strerror(errno));
	return fd;
}

int every_events_take(int fd, pid_t job, void (*published)(const char *image, void *arg), void *arg)
{
	static char buf[65536];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf) - 1)) > 0) {
		buf[n] = 0;
		for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			json_t *e = json_loads(l, 0, NULL);
			const char *ev = json_string_value(json_object_get(e, "event"));
			const char *dir = json_string_value(json_object_get(e, "dir"));
			if (ev && dir && !strcmp(ev, "checkpoint.published") &&
			    json_integer_value(json_object_get(e, "pid")) == job)
				published(dir, arg);
			json_decref(e);
		}
	}
	return n < 0 && errno == EAGAIN ? 0 : -EPIPE;
}
