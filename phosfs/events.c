/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * /events (phosfs.h: events_emit, events_read, events_poll): what
 * happened to checkpoints and restores, one JSON object a line, for a
 * program that waits on it rather than reading status in a loop.
 *
 * The newest EVENTS_KEEP lines are kept in a ring, by sequence number.
 * A reader starts at the event after its open; a read returns whole
 * lines (a read shorter than a line returns its next part, and the next
 * read goes on from there), waiting for one unless the file was opened
 * O_NONBLOCK,
 * and a reader that fell more than EVENTS_KEEP behind gets a "lost" line
 * saying how many it missed. poll(2) says when there is a line to read.
 * At most EVENTS_WAITERS reads wait at once (each holds one of phosfs's
 * FUSE threads); one more is answered EAGAIN. A read that waits gives up
 * (EINTR) when its reader is killed, when phosfs ends, and after
 * FS_WAIT_MAX_MS (fs_wait_over).
 */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fuse.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "phosfs.h"

#define EVENTS_WAITERS 8
#define EVENTS_POLLERS 64
#define WAIT_SLICE_MS 200 /* how often a waiting read looks whether to give up */

/* Guarded by lock: every field below. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t arrived = PTHREAD_COND_INITIALIZER;
static char *ring[EVENTS_KEEP]; /* event seq is ring[seq % EVENTS_KEEP], a line with its '\n' */
static uint64_t next_seq = 1;   /* the sequence number of the next event */
static int waiters;
static struct fuse_pollhandle *pollers[EVENTS_POLLERS]; /* polls that wait for the next event */

uint64_t events_next(void)
{
	pthread_mutex_lock(&lock);
	uint64_t s = next_seq;
	pthread_mutex_unlock(&lock);
	return s;
}

/* The line of an event, malloc'd, or NULL. */
static char *line_of(uint64_t seq, const char *event, pid_t pid, json_t *fields)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	json_t *o = json_pack("{s:I,s:f,s:s}", "seq", (json_int_t)seq, "time", ts.tv_sec + ts.tv_nsec / 1e9, "event",
			      event);
	if (!o)
		return NULL;
	if (pid > 0)
		json_object_set_new(o, "pid", json_integer(pid));
	if (fields)
		json_object_update(o, fields);
	char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
	json_decref(o);
	char *line = NULL;
	if (s && asprintf(&line, "%s\n", s) < 0)
		line = NULL;
	free(s);
	return line;
}

void events_emit(const char *event, pid_t pid, json_t *fields)
{
	pthread_mutex_lock(&lock);
	uint64_t seq = next_seq;
	char *line = line_of(seq, event, pid, fields);
	if (line) {
		free(ring[seq % EVENTS_KEEP]);
		ring[seq % EVENTS_KEEP] = line;
		next_seq++;
		pthread_cond_broadcast(&arrived);
		for (int i = 0; i < EVENTS_POLLERS; i++)
			if (pollers[i]) {
				fuse_notify_poll(pollers[i]);
				fuse_pollhandle_destroy(pollers[i]);
				pollers[i] = NULL;
			}
	}
	pthread_mutex_unlock(&lock);
	json_decref(fields);
}

/* Copies what c has not read yet into buf (size bytes) under the lock,
 * from c->off into its next line: whole lines, or, where buf is shorter
 * than a line, its next part (a short read goes on from there). The
 * bytes copied (0: none is there yet). */
static size_t copy_locked(events_cursor *c, char *buf, size_t size)
{
	uint64_t oldest = next_seq > EVENTS_KEEP ? next_seq - EVENTS_KEEP : 1;
	if (c->seq < oldest && !c->lost) {
		/* Fell behind: a line saying how far, then the oldest kept. */
		c->lost = oldest - c->seq;
		c->seq = oldest;
		c->off = 0;
	}
	size_t n = 0;
	while (n < size) {
		char lost[64];
		const char *l = NULL;
		if (c->lost) {
			snprintf(lost, sizeof(lost), "{\"event\":\"lost\",\"count\":%llu}\n", (unsigned long long)c->lost);
			l = lost;
		} else if (c->seq < next_seq) {
			l = ring[c->seq % EVENTS_KEEP];
		} else {
			break;
		}
		size_t len = strlen(l) - c->off, k = len < size - n ? len : size - n;
		if (n && k < len)
			break; /* whole lines where they fit: the rest at the next read */
		memcpy(buf + n, l + c->off, k);
		n += k;
		c->off += k;
		if (k < len)
			break;
		c->off = 0;
		if (c->lost)
			c->lost = 0;
		else
			c->seq++;
	}
	return n;
}

int events_read(events_cursor *c, char *buf, size_t size, bool nonblock)
{
	if (!size)
		return 0;
	pthread_mutex_lock(&lock);
	size_t n = copy_locked(c, buf, size);
	if (!n && !nonblock && waiters >= EVENTS_WAITERS) {
		pthread_mutex_unlock(&lock);
		return -EAGAIN;
	}
	if (!n && !nonblock) {
		waiters++;
		uint64_t since = engine_now_ns();
		while (!(n = copy_locked(c, buf, size)) && !fs_wait_over(since)) {
			struct timespec until = engine_deadline(WAIT_SLICE_MS);
			pthread_cond_timedwait(&arrived, &lock, &until);
		}
		waiters--;
	}
	pthread_mutex_unlock(&lock);
	return n ? (int)n : nonblock ? -EAGAIN : -EINTR;
}

int events_poll(const events_cursor *c, struct fuse_pollhandle *ph, unsigned *revents)
{
	pthread_mutex_lock(&lock);
	bool ready = c->lost || c->seq < next_seq;
	*revents = ready ? POLLIN : 0;
	if (ph && !ready) {
		int i = 0;
		while (i < EVENTS_POLLERS && pollers[i])
			i++;
		if (i == EVENTS_POLLERS) {
			/* Full: the oldest is told now, and polls again. */
			fuse_notify_poll(pollers[0]);
			fuse_pollhandle_destroy(pollers[0]);
			i = 0;
		}
		pollers[i] = ph;
		ph = NULL;
	}
	pthread_mutex_unlock(&lock);
	if (ph)
		fuse_pollhandle_destroy(ph);
	return 0;
}

void events_free(void)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < EVENTS_KEEP; i++) {
		free(ring[i]);
		ring[i] = NULL;
	}
	for (int i = 0; i < EVENTS_POLLERS; i++)
		if (pollers[i]) {
			fuse_pollhandle_destroy(pollers[i]);
			pollers[i] = NULL;
		}
	pthread_mutex_unlock(&lock);
}
