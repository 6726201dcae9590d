/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Pid namespaces from /proc (pidns.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pidns.h"
#include "procstatus.h"

/* The NSpid line of pid: its pids from the host's namespace inward, into
 * v (at most max); returns how many, or -errno. */
static int nspids(pid_t pid, pid_t *v, int max)
{
	char line[256];
	int n = proc_status_field(pid, "NSpid", line, sizeof(line));
	if (n)
		return n == -ENOENT ? -EIO : n;
	for (char *p = line, *end; n < max; p = end) {
		long x = strtol(p, &end, 10);
		if (end == p || x <= 0)
			break;
		v[n++] = (pid_t)x;
	}
	return n ? n : -EIO;
}

pid_t pidns_inner(pid_t pid)
{
	pid_t v[32];
	int n = nspids(pid, v, 32);
	return n < 0 ? n : v[n - 1];
}

/* The first entry of directory path that is a pid (or tid) for which
 * match(id, arg) holds, or -ESRCH (none; no such directory). */
static pid_t scan(const char *path, bool (*match)(pid_t id, const void *arg), const void *arg)
{
	DIR *d = opendir(path);
	if (!d)
		return -ESRCH;
	pid_t found = -ESRCH;
	struct dirent *de;
	while (found < 0 && (de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		pid_t id = (pid_t)atoi(de->d_name);
		if (match(id, arg))
			found = id;
	}
	closedir(d);
	return found;
}

pid_t pidns_task_where(pid_t pid, bool (*match)(pid_t tid, const void *arg), const void *arg)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	return scan(path, match, arg);
}

/* /proc/TID/status is the thread's, as /proc/PID/task/TID's. */
static bool inner_is(pid_t id, const void *arg)
{
	return pidns_inner(id) == *(const pid_t *)arg;
}

pid_t pidns_host_tid(pid_t pid, pid_t inner)
{
	return pidns_task_where(pid, inner_is, &inner);
}

bool pidns_is_init(pid_t pid)
{
	pid_t v[32];
	int n = nspids(pid, v, 32);
	return n >= 2 && v[n - 1] == 1;
}

/* The inode of pid's pid namespace, or 0. */
static ino_t ns_of(pid_t pid)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
	return stat(path, &st) == 0 ? st.st_ino : 0;
}

typedef struct in_ns {
	ino_t ns;
	pid_t inner;
} in_ns;

static bool member_of(pid_t id, const void *arg)
{
	const in_ns *w = arg;
	return pidns_inner(id) == w->inner && ns_of(id) == w->ns;
}

/* Among init's children (its threads' children files), the one that is
 * pid inner in the namespace: most processes of a job are children of
 * its init, and this spares a scan of every process. */
static pid_t child_of(pid_t init, pid_t inner)
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)init, (int)init);
	FILE *f = fopen(path, "re");
	pid_t found = -ESRCH;
	for (int c; f && found < 0 && fscanf(f, "%d", &c) == 1;)
		if (pidns_inner(c) == inner)
			found = c;
	if (f)
		fclose(f);
	return found;
}

pid_t pidns_find(pid_t init, pid_t inner)
{
	in_ns w = { ns_of(init), inner };
	if (!w.ns)
		return -ESRCH;
	if (inner == 1)
		return init;
	pid_t c = child_of(init, inner);
	return c > 0 ? c : scan("/proc", member_of, &w);
}
