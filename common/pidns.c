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

/* The NSpid line of pid: its pids from the host's namespace inward, into
 * v (at most max); returns how many, or -errno. */
static int nspids(pid_t pid, pid_t *v, int max)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -ESRCH;
	int n = -EIO;
	while (n < 0 && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6))
			continue;
		n = 0;
		for (char *p = line + 6, *end; n < max; p = end) {
			long x = strtol(p, &end, 10);
			if (end == p || x <= 0)
				break;
			v[n++] = (pid_t)x;
		}
		if (!n)
			n = -EIO;
	}
	fclose(f);
	return n;
}

pid_t pidns_inner(pid_t pid)
{
	pid_t v[32];
	int n = nspids(pid, v, 32);
	return n < 0 ? n : v[n - 1];
}

pid_t pidns_host_tid(pid_t pid, pid_t inner)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -ESRCH;
	pid_t found = -ESRCH;
	struct dirent *de;
	while (found < 0 && (de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		/* /proc/TID/status is the thread's, as /proc/PID/task/TID's. */
		pid_t tid = (pid_t)atoi(de->d_name);
		if (pidns_inner(tid) == inner)
			found = tid;
	}
	closedir(d);
	return found;
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

pid_t pidns_find(pid_t init, pid_t inner)
{
	ino_t ns = ns_of(init);
	if (!ns)
		return -ESRCH;
	if (inner == 1)
		return init;
	DIR *d = opendir("/proc");
	if (!d)
		return -EIO;
	pid_t found = -ESRCH;
	struct dirent *de;
	while (found < 0 && (de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		pid_t p = (pid_t)atoi(de->d_name);
		if (pidns_inner(p) == inner && ns_of(p) == ns)
			found = p;
	}
	closedir(d);
	return found;
}
