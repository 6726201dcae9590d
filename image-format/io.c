/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Whole-buffer file I/O that survives short transfers and EINTR. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"

int fmt_write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int fmt_read_all(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENODATA; /* end of file: truncated */
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int fmt_slurp(int dirfd, const char *name, const char *shown, size_t max, uint8_t **buf, size_t *len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ELOOP)
		return fmt_fail(-EBADMSG, "%s: a symbolic link, which an image never holds", shown);
	if (fd < 0)
		return fmt_fail(-errno, "%s: cannot open: %m", shown);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = -errno;
		close(fd);
		return fmt_fail(e, "%s: cannot stat: %m", shown);
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		close(fd);
		return fmt_fail(-EBADMSG, "%s: not a regular file of at most %zu bytes (%lld bytes)", shown, max,
				(long long)st.st_size);
	}
	uint8_t *b = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!b) {
		close(fd);
		return -ENOMEM;
	}
	int e = fmt_read_all(fd, b, (size_t)st.st_size, 0);
	close(fd);
	if (e) {
		free(b);
		return fmt_fail(e == -ENODATA ? -EBADMSG : e, "%s: cannot read: %s", shown,
				e == -ENODATA ? "file shrank while read" : "I/O error");
	}
	*buf = b;
	*len = (size_t)st.st_size;
	return 0;
}

int fmt_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int e = fsync(fd) ? -errno : 0;
	close(fd);
	return e;
}

/* Splits path into its directory and its last component. */
int fmt_split_path(const char *path, char **dir, char **base)
{
	char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		p[--n] = 0;
	char *slash = strrchr(p, '/');
	if (!slash) {
		*dir = strdup(".");
		*base = strdup(p);
	} else {
		*base = strdup(slash + 1);
		*dir = slash == p ? strdup("/") : strndup(p, (size_t)(slash - p));
	}
	free(p);
	if (!*dir || !*base || !**base || !strcmp(*base, ".") || !strcmp(*base, "..")) {
		free(*dir);
		free(*base);
		return -EINVAL;
	}
	return 0;
}

char *fmt_strdupf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}
