/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fields of /proc/PID/status (procstatus.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "procstatus.h"

/* The value of field key of the status file at path. */
static int field_of(const char *path, const char *key, char *out, size_t len)
{
	char line[512];
	FILE *f = fopen(path, "re");
	if (!f)
		return -ESRCH;
	size_t k = strlen(key);
	int e = -ENOENT;
	while (e && fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, k) || line[k] != ':')
			continue;
		const char *v = line + k + 1;
		v += strspn(v, " \t");
		size_t n = strcspn(v, "\n");
		while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
			n--;
		snprintf(out, len, "%.*s", (int)n, v);
		e = 0;
	}
	fclose(f);
	return e;
}

int proc_status_field(pid_t pid, const char *key, char *out, size_t len)
{
	char path[64];
	if (pid <= 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	return field_of(path, key, out, len);
}

int proc_self_status_field(const char *key, char *out, size_t len)
{
	return field_of("/proc/self/status", key, out, len);
}
