/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Who reads which image through the mount (phosfs.h: readers_*), so that
 * a prune never removes an image under a copy: `cp -r` or rsync of
 * /phos/PID/checkpoints/N opens its files one after another, with none
 * open between two, so an image counts as read while a file of it is
 * open, and for READ_GRACE_NS after it was last looked at. A prune
 * claims an image (readers_claim) before it removes it: from then on it
 * is gone to readers, so that none begins on it halfway through.
 *
 * A table of the images seen lately, by pid and name; an entry with no
 * file open, seen longer ago than the grace, is free for another.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "phosfs.h"

#define READERS_MAX 256
#define READ_GRACE_NS (5ull * 1000000000u)

typedef struct reader {
	pid_t pid;
	char name[CTL_NAME_MAX + 1];
	unsigned open;    /* files of it open */
	uint64_t seen_ns; /* last looked at or closed */
	bool gone;        /* claimed by a prune: no reader begins on it */
} reader;

/* Guarded by lock: the table. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static reader table[READERS_MAX];

/* The entry of pid's image name, made if make (in a free entry, or the
 * one idle longest); NULL if none. Lock held. */
static reader *find_locked(pid_t pid, const char *name, bool make, uint64_t now)
{
	reader *spare = NULL;
	for (int i = 0; i < READERS_MAX; i++) {
		reader *r = &table[i];
		if (r->pid == pid && !strcmp(r->name, name))
			return r;
		if (!r->open && !r->gone && (!spare || r->seen_ns < spare->seen_ns))
			spare = r;
	}
	if (!make || !spare)
		return NULL;
	*spare = (reader){ .pid = pid, .seen_ns = now };
	snprintf(spare->name, sizeof(spare->name), "%s", name);
	return spare;
}

int readers_touch(pid_t pid, const char *name, int opened)
{
	uint64_t now = engine_now_ns();
	pthread_mutex_lock(&lock);
	reader *r = find_locked(pid, name, true, now);
	int e = r && r->gone && opened >= 0 ? -ENOENT : 0;
	if (r && !e) {
		r->seen_ns = now;
		if (opened > 0)
			r->open++;
		else if (opened < 0 && r->open)
			r->open--;
	}
	pthread_mutex_unlock(&lock);
	return e;
}

bool readers_claim(pid_t pid, const char *name)
{
	uint64_t now = engine_now_ns();
	pthread_mutex_lock(&lock);
	reader *r = find_locked(pid, name, false, now);
	bool busy = r && (r->open || now - r->seen_ns < READ_GRACE_NS);
	if (!busy && !r)
		r = find_locked(pid, name, true, now);
	if (!busy && r)
		r->gone = true;
	pthread_mutex_unlock(&lock);
	return !busy;
}

void readers_forget(pid_t pid, const char *name)
{
	pthread_mutex_lock(&lock);
	reader *r = find_locked(pid, name, false, 0);
	if (r && !r->open)
		*r = (reader){ 0 };
	pthread_mutex_unlock(&lock);
}
