/*
 * Fields of /proc/PID/status (procstatus.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "procstatus.h"

int proc_status_field(pid_t pid, const char *key, char *out, size_t len)
{
	char path[64], line[512];
	if (pid > 0)
		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/status");
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
