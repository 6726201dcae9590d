/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The processes of a job: a pid and all its descendants, found from
 * /proc, parents before their children. CRIU dumps the same tree with
 * `criu dump -t ROOT`.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/pidns.h"
#include "tree.h"

/* /proc/PID/stat into buf (len bytes), and where its fields after the
 * comm begin (its closing parenthesis: the comm may hold spaces and
 * parentheses); NULL when pid is gone or the file is not whole. */
static const char *read_stat(pid_t pid, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, len - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	const char *open = strchr(buf, '('), *close = strrchr(buf, ')');
	return open && close && close > open ? close : NULL;
}

int engine_proc_stat(pid_t pid, pid_t *ppid, char comm[PHOSIMG_COMM_MAX])
{
	char buf[512];
	/* pid (comm) state ppid … */
	const char *close = read_stat(pid, buf, sizeof(buf));
	if (!close)
		return *buf ? -EIO : -ESRCH;
	const char *open = strchr(buf, '(');
	size_t len = (size_t)(close - open - 1);
	if (len >= PHOSIMG_COMM_MAX)
		len = PHOSIMG_COMM_MAX - 1;
	memcpy(comm, open + 1, len);
	comm[len] = 0;
	char state;
	int pp;
	if (sscanf(close + 1, " %c %d", &state, &pp) != 2)
		return -EIO;
	if (state == 'Z' || state == 'X')
		return -ESRCH; /* a zombie is not dumped */
	*ppid = pp;
	return 0;
}

typedef struct proc_entry {
	pid_t pid, ppid;
	char comm[PHOSIMG_COMM_MAX];
} proc_entry;

static void add_member(phosimg_member *m, uint32_t *k, const proc_entry *pe)
{
	m[*k].pid = pe->pid;
	m[*k].ppid = pe->ppid;
	memcpy(m[*k].comm, pe->comm, PHOSIMG_COMM_MAX);
	(*k)++;
}

int engine_tree(pid_t root, phosimg_member **out, uint32_t *count)
{
	*out = NULL;
	*count = 0;
	DIR *d = opendir("/proc");
	if (!d)
		return -errno;
	proc_entry *all = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int e = 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		proc_entry pe = { .pid = (pid_t)atoi(de->d_name) };
		if (engine_proc_stat(pe.pid, &pe.ppid, pe.comm))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 512;
			proc_entry *v = realloc(all, cap * sizeof(*v));
			if (!v) {
				e = -ENOMEM;
				break;
			}
			all = v;
		}
		all[n++] = pe;
	}
	closedir(d);
	phosimg_member *m = e ? NULL : calloc(n ? n : 1, sizeof(*m));
	uint32_t k = 0;
	for (size_t i = 0; m && i < n; i++)
		if (all[i].pid == root)
			add_member(m, &k, &all[i]);
	if (m && !k)
		e = -ESRCH;
	/* Breadth first: each found process adds its children. */
	for (uint32_t at = 0; !e && at < k; at++)
		for (size_t i = 0; i < n && k < PHOSIMG_MEMBERS_MAX; i++)
			if (all[i].ppid == m[at].pid && all[i].pid != root)
				add_member(m, &k, &all[i]);
	free(all);
	if (!m && !e)
		e = -ENOMEM;
	if (e) {
		free(m);
		return e;
	}
	/* A job in a pid namespace of its own: its init is the root, and
	 * every process of the namespace descends from it. */
	if (pidns_is_init(root)) {
		m[0].flags |= PHOSIMG_MEMBER_NS_INIT;
		for (uint32_t i = 0; i < k; i++) {
			pid_t in = pidns_inner(m[i].pid);
			m[i].ns_pid = in > 0 ? in : 0;
		}
	}
	*out = m;
	*count = k;
	return 0;
}

int engine_tree_member(const phosimg_member *m, uint32_t n, pid_t pid)
{
	for (uint32_t i = 0; i < n; i++)
		if (m[i].pid == pid)
			return (int)i;
	return -ENOENT;
}

bool engine_alive(pid_t pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

unsigned long long engine_proc_start(pid_t pid)
{
	char buf[1024];
	const char *p = read_stat(pid, buf, sizeof(buf));
	/* From the comm's closing parenthesis: state is field 3, start time 22. */
	unsigned long long t = 0;
	for (int field = 2; p && *p && field < 22; p++)
		if (*p == ' ' && ++field == 22)
			t = strtoull(p + 1, NULL, 10);
	return t;
}

pid_t engine_zombie_parent(pid_t pid)
{
	char buf[512];
	const char *end = read_stat(pid, buf, sizeof(buf));
	char state = 0;
	int ppid = 0;
	if (!end || sscanf(end + 1, " %c %d", &state, &ppid) != 2 || state != 'Z')
		return 0;
	return (pid_t)ppid;
}

bool engine_maps_library(pid_t pid, const char *name)
{
	char path[64], line[1024];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	bool yes = false;
	size_t n = strlen(name);
	while (f && !yes && fgets(line, sizeof(line), f)) {
		const char *slash = strrchr(line, '/');
		yes = slash && !strncmp(slash + 1, name, n);
	}
	if (f)
		fclose(f);
	return yes;
}

uid_t engine_proc_owner(pid_t pid, const char *store)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) == 0)
		return st.st_uid;
	if (!store)
		return (uid_t)-1;
	snprintf(path, sizeof(path), "%s/%d", store, (int)pid);
	return stat(path, &st) == 0 ? st.st_uid : (uid_t)-1;
}
