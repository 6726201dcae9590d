/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Where a test finds what the build made: the path an environment variable
 * names (set by make check), else a path relative to the directory of the
 * test's own executable.
 */
#ifndef PHOS_TESTPATH_H
#define PHOS_TESTPATH_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Returns a static buffer: copy it before the next call. */
static inline const char *test_path(const char *env, const char *rel)
{
	static char path[PATH_MAX];
	const char *e = env ? getenv(env) : NULL;
	if (e && *e) {
		snprintf(path, sizeof(path), "%s", e);
		return path;
	}
	char exe[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = 0;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	snprintf(path, sizeof(path), "%s/%s", exe, rel);
	return path;
}

#endif
