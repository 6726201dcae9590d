/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The send stream (stream.h, doc/STREAM.md): a head, then records, every
 * number little-endian.
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stream.h"

static const char magic[8] = { 'P', 'H', 'O', 'S', 'S', 'E', 'N', 'D' };

int stream_write_full(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Reads up to n bytes; how many (fewer only at the stream's end), or
 * -errno. */
static ssize_t read_some(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = read(fd, (char *)buf + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		got += (size_t)k;
	}
	return (ssize_t)got;
}

int stream_read_full(int fd, void *buf, size_t n)
{
	ssize_t k = read_some(fd, buf, n);
	return k < 0 ? (int)k : (size_t)k < n ? -ENODATA : 0;
}

/* Whether s is NAME: 1 to 128 of A-Z a-z 0-9 . _ -, not "." or "..". */
static bool name_ok(const char *s, size_t n)
{
	if (n == 0 || n > 128 || (n == 1 && s[0] == '.') || (n == 2 && !strncmp(s, "..", 2)))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-", s[i]) || !s[i])
			return false;
	return true;
}

int stream_write_head(int fd, pid_t pid, const char *name)
{
	unsigned char h[8 + 12 + STREAM_NAME_MAX];
	uint32_t v = htole32(STREAM_VERSION), p = htole32((uint32_t)pid), n = (uint32_t)strlen(name);
	if (n > STREAM_NAME_MAX)
		return -EINVAL;
	uint32_t nl = htole32(n);
	memcpy(h, magic, 8);
	memcpy(h + 8, &v, 4);
	memcpy(h + 12, &p, 4);
	memcpy(h + 16, &nl, 4);
	memcpy(h + 20, name, n);
	return stream_write_full(fd, h, 20 + n);
}

int stream_read_head(int fd, pid_t *pid, char *name, char *why, size_t len)
{
	unsigned char h[20];
	ssize_t k = read_some(fd, h, sizeof(h));
	if (k < 0)
		return (int)k;
	if (k == 0)
		return -ENODATA;
	if (k < (ssize_t)sizeof(h) || memcmp(h, magic, 8)) {
		snprintf(why, len, "what came is no stream of phos send (it does not begin with PHOSSEND)");
		return -EPROTO;
	}
	uint32_t v, p, n;
	memcpy(&v, h + 8, 4);
	memcpy(&p, h + 12, 4);
	memcpy(&n, h + 16, 4);
	if (le32toh(v) != STREAM_VERSION) {
		snprintf(why, len, "the stream is of version %u; this phos reads version %d", le32toh(v), STREAM_VERSION);
		return -EPROTO;
	}
	n = le32toh(n);
	if (n == 0 || n > STREAM_NAME_MAX) {
		snprintf(why, len, "the stream's checkpoint name is %u bytes long", n);
		return -EPROTO;
	}
	int e = stream_read_full(fd, name, n);
	if (e)
		return e;
	name[n] = 0;
	if (name[0] == '.' || !name_ok(name, n)) {
		snprintf(why, len, "the stream's checkpoint name is not one phosfs gives (1 to 64 of A-Z a-z 0-9 . _ -, "
				   "not starting with '.')");
		return -EPROTO;
	}
	*pid = (pid_t)le32toh(p);
	return 0;
}

int stream_write_rec(int fd, uint32_t type, const char *path, uint64_t offset, const void *data, uint64_t len)
{
	size_t pl = strlen(path);
	if (pl > STREAM_PATH_MAX || len > STREAM_DATA_MAX)
		return -EINVAL;
	unsigned char h[24 + STREAM_PATH_MAX];
	uint32_t t = htole32(type), l = htole32((uint32_t)pl);
	uint64_t o = htole64(offset), n = htole64(len);
	memcpy(h, &t, 4);
	memcpy(h + 4, &l, 4);
	memcpy(h + 8, &o, 8);
	memcpy(h + 16, &n, 8);
	memcpy(h + 24, path, pl);
	int e = stream_write_full(fd, h, 24 + pl);
	return e || !len ? e : stream_write_full(fd, data, (size_t)len);
}

int stream_read_rec(int fd, stream_rec *r)
{
	unsigned char h[24];
	ssize_t k = read_some(fd, h, sizeof(h));
	if (k < 0)
		return (int)k;
	if (k < (ssize_t)sizeof(h))
		return -ENODATA;
	uint32_t t, l;
	uint64_t o, n;
	memcpy(&t, h, 4);
	memcpy(&l, h + 4, 4);
	memcpy(&o, h + 8, 8);
	memcpy(&n, h + 16, 8);
	r->type = le32toh(t);
	r->offset = le64toh(o);
	r->len = le64toh(n);
	l = le32toh(l);
	if (r->type < STREAM_FILE || r->type > STREAM_META || l > STREAM_PATH_MAX ||
	    r->len > (r->type == STREAM_ABORT ? STREAM_REASON_MAX : STREAM_DATA_MAX) ||
	    ((r->type == STREAM_DIR || r->type == STREAM_META) && r->len) || r->offset > (1ull << 50))
		return -EPROTO;
	int e = stream_read_full(fd, r->path, l);
	r->path[e ? 0 : l] = 0;
	return e;
}

bool stream_path_ok(const char *path, bool dir)
{
	if (dir)
		return !strcmp(path, "criu");
	const char *slash = strchr(path, '/');
	if (!slash)
		return name_ok(path, strlen(path));
	return slash - path == 4 && !strncmp(path, "criu", 4) && name_ok(slash + 1, strlen(slash + 1));
}
