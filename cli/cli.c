/* SPDX-License-Identifier: GPL-2.0-only */
/* The files of a phosfs mount, for the phos command line (cli.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char *cli_mount(void)
{
	const char *m = getenv("PHOS_MOUNT");
	return m && *m ? m : "/phos";
}

char *cli_slurp(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, len = 0;
	char *s = malloc(cap);
	for (ssize_t n; s; len += (size_t)n) {
		if (len + 1 >= cap) {
			char *t = realloc(s, cap *= 2);
			if (!t) {
				free(s);
				s = NULL;
				break;
			}
			s = t;
		}
		n = read(fd, s + len, cap - len - 1);
		if (n <= 0)
			break;
	}
	int e = errno;
	close(fd);
	if (s)
		s[len] = 0;
	else
		errno = e ? e : ENOMEM;
	return s;
}

bool cli_field(const char *text, const char *key, char *out, size_t len)
{
	size_t k = strlen(key);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, key, k) && l[k] == ':' && l[k + 1] == ' ') {
			size_t n = strcspn(l + k + 2, "\n");
			snprintf(out, len, "%.*s", (int)n, l + k + 2);
			return true;
		}
	}
	return false;
}

void cli_open_failed(const char *path, int e, const char *who)
{
	char v[PATH_MAX];
	snprintf(v, sizeof(v), "%s/version", cli_mount());
	bool mounted = access(v, F_OK) == 0;
	if (!mounted)
		fprintf(stderr, "phos: %s: phosfs is not mounted at %s (set PHOS_MOUNT)\n", path, cli_mount());
	else if (e == ENOENT)
		fprintf(stderr, "phos: %s: no such process: it is not running, and phosfs knows no checkpoint of it\n",
			path);
	else if (e == EACCES || e == EPERM)
		fprintf(stderr, "phos: %s: permission denied: %s\n", path, who);
	else
		fprintf(stderr, "phos: %s: %s\n", path, strerror(e));
}

int cli_ctl(const char *path, const char *cmd, char *reply, size_t len)
{
	*reply = 0;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	/* An older phosfs made a process's ctl write-only to its owner: the
	 * command goes, without its answer. */
	if (fd < 0 && errno == EACCES && (fd = open(path, O_WRONLY | O_CLOEXEC)) >= 0) {
		ssize_t n = write(fd, cmd, strlen(cmd));
		int e = n < 0 ? -errno : 0;
		close(fd);
		return e;
	}
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, cmd, strlen(cmd));
	int e = n < 0 ? -errno : 0;
	ssize_t got = read(fd, reply, len - 1);
	reply[got > 0 ? got : 0] = 0;
	reply[strcspn(reply, "\n")] = 0;
	close(fd);
	return e;
}

int cli_store(char *out, size_t len)
{
	char vpath[PATH_MAX];
	snprintf(vpath, sizeof(vpath), "%s/version", cli_mount());
	char *v = cli_slurp(vpath);
	const char *sl = v ? strstr(v, "\nstore ") : NULL;
	*out = 0;
	if (sl)
		snprintf(out, len, "%.*s", (int)strcspn(sl + 7, "\n"), sl + 7);
	free(v);
	return *out ? 0 : -ENOENT;
}
