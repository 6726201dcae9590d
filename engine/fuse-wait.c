/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Which FUSE file systems a process tree waits for (fuse-wait.h): a
 * process that calls into a FUSE mount whose daemon does not answer
 * sleeps in the kernel's request_wait_answer (its wchan) until it does.
 * The mounts are this machine's FUSE mounts (its mount table), narrowed,
 * where the fusectl file system is mounted, to those with requests
 * waiting for their daemon.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse-wait.h"
#include "tree.h"

#define FUSECTL "/sys/fs/fuse/connections"

/* Whether a thread of pid sleeps waiting for a FUSE daemon's answer. */
static bool waits(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	bool found = false;
	for (struct dirent *de; d && !found && (de = readdir(d));) {
		if (de->d_name[0] == '.')
			continue;
		char wchan[300], what[64] = "";
		snprintf(wchan, sizeof(wchan), "/proc/%d/task/%s/wchan", (int)pid, de->d_name);
		FILE *f = fopen(wchan, "re");
		if (f && fgets(what, sizeof(what), f))
			found = strstr(what, "request_wait_answer") != NULL;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

/* Whether FUSE connection minor has requests waiting for its daemon;
 * true where fusectl does not say. */
static bool busy(unsigned minor)
{
	char path[96];
	snprintf(path, sizeof(path), FUSECTL "/%u/waiting", minor);
	FILE *f = fopen(path, "re");
	if (!f)
		return true;
	unsigned n = 0;
	bool b = fscanf(f, "%u", &n) != 1 || n > 0;
	fclose(f);
	return b;
}

/* Appends word to out (len bytes), after a ", " where it is not first;
 * a word that does not fit is left out. */
static void add(char *out, size_t len, const char *word)
{
	size_t at = strlen(out), sep = at ? 2 : 0, n = strlen(word);
	if (at + sep + n >= len)
		return;
	memcpy(out + at, ", ", sep);
	memcpy(out + at + sep, word, n + 1);
}

int engine_fuse_held(pid_t root, char *out, size_t len)
{
	*out = 0;
	phosimg_member *m = NULL;
	uint32_t n = 0;
	int e = engine_tree(root, &m, &n);
	if (e)
		return e;
	int k = 0;
	for (uint32_t i = 0; i < n; i++)
		k += waits(m[i].pid);
	free(m);
	if (!k)
		return 0;
	snprintf(out, len, "; it waited for a FUSE file system whose daemon did not answer");
	const char *skip = getenv("PHOS_MOUNT"); /* phosfs's own, which answers */
	char mounts[1024] = "";
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	while (f && fgets(line, sizeof(line), f)) {
		unsigned major, minor;
		char mp[2048], fstype[256];
		const char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %u:%u %*s %2047s", &major, &minor, mp) != 3 ||
		    sscanf(dash + 3, "%255s", fstype) != 1 || strncmp(fstype, "fuse", 4) || !strcmp(fstype, "fusectl"))
			continue;
		if ((skip && !strcmp(mp, skip)) || (major == 0 && !busy(minor)))
			continue;
		add(mounts, sizeof(mounts), mp);
	}
	if (f)
		fclose(f);
	size_t at = strlen(out);
	if (*mounts && at + 1 < len)
		snprintf(out + at, len - at, ", mounted on %s", mounts);
	return k;
}
