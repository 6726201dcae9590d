/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The store's log folders (STORE/.logs, STORE/<pid>/.logs): each job
 * writes a log of its own there, and only the newest are kept.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/criu-gate.h"
#include "phosfs.h"

typedef struct entry {
	char name[256];
	struct timespec mtime;
} entry;

static int newest_first(const void *a, const void *b)
{
	const entry *x = a, *y = b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
	return strcmp(y->name, x->name);
}

/* Removes the oldest files of dir beyond the newest keep (and what a
 * restore's gate left beside them). */
static void prune(const char *dir, int keep)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	entry *v = NULL;
	size_t n = 0, cap = 0;
	for (struct dirent *de; (de = readdir(d));) {
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			entry *w = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v));
			if (!w)
				break;
			v = w;
		}
		snprintf(v[n].name, sizeof(v[n].name), "%s", de->d_name);
		v[n++].mtime = st.st_mtim;
	}
	if (n > (size_t)keep) {
		qsort(v, n, sizeof(*v), newest_first);
		for (size_t i = (size_t)keep; i < n; i++) {
			unlinkat(dirfd(d), v[i].name, 0);
			/* A restore killed before its end left its gate. */
			char g[sizeof(v[i].name) + sizeof(CRIU_GATE_SUFFIX)];
			snprintf(g, sizeof(g), "%s" CRIU_GATE_SUFFIX, v[i].name);
			criu_gate_remove(dirfd(d), g);
		}
	}
	free(v);
	closedir(d);
}

void logs_make_room(const char *dir)
{
	mkdir(dir, 0700);
	prune(dir, LOGS_KEEP - 1);
}
