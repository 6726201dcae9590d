/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phosfs --metrics-textfile DIR (phosfs.h: metrics_textfile_start): the
 * metrics of /metrics written to DIR/phos.prom for node_exporter's
 * textfile collector, whenever a job ends and every
 * TEXTFILE_PERIOD_MS, atomically (a temporary file renamed over it), so
 * that a scrape never sees half a file.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "phosfs.h"

#define TEXTFILE_PERIOD_MS 15000

static char dir[PATH_MAX];
static pthread_t writer;
static bool started;

/* Writes the metrics once. Errors: -errno of open, write or rename. */
static int write_once(void)
{
	char tmp[PATH_MAX + 32], path[PATH_MAX + 16];
	snprintf(tmp, sizeof(tmp), "%s/.phos.prom.%d", dir, (int)getpid());
	snprintf(path, sizeof(path), "%s/phos.prom", dir);
	text t = { 0 };
	int e = metrics_text(&t);
	int fd = e ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (!e && fd < 0)
		e = -errno;
	for (size_t at = 0; !e && at < t.len;) {
		ssize_t n = write(fd, t.s + at, t.len - at);
		if (n < 0 && errno != EINTR)
			e = -errno;
		at += n > 0 ? (size_t)n : 0;
	}
	if (fd >= 0 && close(fd) && !e)
		e = -errno;
	if (!e && rename(tmp, path))
		e = -errno;
	if (e && fd >= 0)
		unlink(tmp);
	text_free(&t);
	return e;
}

static void *writer_main(void *arg)
{
	(void)arg;
	unsigned seen = 0;
	int said = 0;
	for (;;) {
		int e = write_once();
		if (e && e != said)
			syslog(LOG_WARNING, "--metrics-textfile %s: cannot write phos.prom: %s", dir, strerror(-e));
		said = e;
		unsigned v = metrics_wait(seen, TEXTFILE_PERIOD_MS);
		if (metrics_stopping())
			break;
		seen = v;
	}
	write_once();
	return NULL;
}

int metrics_textfile_start(const char *path)
{
	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	int e = write_once();
	if (e)
		return e;
	e = -pthread_create(&writer, NULL, writer_main, NULL);
	started = !e;
	return e;
}

void metrics_textfile_stop(void)
{
	if (!started)
		return;
	metrics_wake();
	pthread_join(writer, NULL);
	started = false;
}
