/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Listening abstract unix sockets whose names are taken (sockets.h).
 *
 * An abstract name belongs to the network namespace, which a job shares
 * with the host. A clone restored beside its running original would get
 * the original's listening sockets back under their names, which the
 * original still holds, and CRIU's bind fails (EADDRINUSE). The CUDA
 * driver holds one in every process: "@cuda-uvmfd-<pid namespace>-<pid>@",
 * through which other processes ask for its UVM fd (CUDA IPC).
 *
 * So, before CRIU restores, each such socket of the image whose name is
 * taken here gets a name of the same length that is free: its longest run
 * of digits (the driver's pid namespace) replaced by other digits, or
 * else its last bytes. The image stays as it is: CRIU reads a folder of
 * links to the image's CRIU files, with files.img rewritten.
 *
 * files.img is CRIU's: two magic numbers, then file entries, each a
 * 32-bit length and a protobuf file_entry; a unix socket's is field 16
 * (unix_sk_entry), whose field 3 is its type, 4 its state (10:
 * listening) and 11 its name. Only bytes of the name change, so every
 * length stays. An abstract name is bound once for each socket type, so
 * whether it is taken is asked with a socket of the same type.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "criu-image.h"
#include "progress.h"
#include "sockets.h"

#define USK_TYPE 3
#define USK_STATE 4
#define USK_NAME 11
#define TCP_LISTEN 10

/* Whether an abstract name (len bytes, the first 0) is bound here to a
 * socket of `type`: a bind to it says. */
static bool taken(int type, const uint8_t *name, size_t len)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (len > sizeof(a.sun_path))
		return false;
	memcpy(a.sun_path, name, len);
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	bool busy = bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) != 0 &&
		    errno == EADDRINUSE;
	close(fd);
	return busy;
}

/* The new names given so far in one files.img (into its buffer). */
#define CHOSEN_MAX 256
typedef struct chosen {
	const uint8_t *name[CHOSEN_MAX];
	size_t len[CHOSEN_MAX];
	int n;
} chosen;

/* Whether name was given to another socket of this image already. */
static bool given(const chosen *c, const uint8_t *name, size_t len)
{
	for (int i = 0; i < c->n; i++)
		if (c->len[i] == len && c->name[i] != name && !memcmp(c->name[i], name, len))
			return true;
	return false;
}

/* Gives name (len bytes, abstract; of a socket of `type`) a free name of
 * the same length, and one that no other socket of the image was given
 * (c). */
static bool rename_free(int type, uint8_t *name, size_t len, chosen *c)
{
	/* Its longest run of digits, else its last bytes (not the first). */
	size_t at = 0, n = 0;
	for (size_t i = 1; i < len;) {
		size_t j = i;
		while (j < len && name[j] >= '0' && name[j] <= '9')
			j++;
		if (j - i > n) {
			at = i;
			n = j - i;
		}
		i = j > i ? j : i + 1;
	}
	bool digits = n >= 4;
	if (!digits) {
		n = len - 1 < 8 ? len - 1 : 8;
		at = len - n;
	}
	uint64_t seed = (uint64_t)getpid() * 2654435761u ^ (uint64_t)time(NULL) ^ (uint64_t)c->n * 0x9e3779b97f4a7c15ull;
	for (int tries = 0; tries < 64; tries++) {
		uint64_t x = seed + (uint64_t)tries * 0x9e3779b97f4a7c15ull;
		for (size_t k = 0; k < n; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			name[at + k] = digits ? (uint8_t)('0' + (x >> 33) % 10) : (uint8_t)"0123456789abcdef"[(x >> 33) & 15];
		}
		if (!taken(type, name, len) && !given(c, name, len)) {
			if (c->n < CHOSEN_MAX) {
				c->name[c->n] = name;
				c->len[c->n] = len;
			}
			c->n++;
			return true;
		}
	}
	return false;
}

/* What rename_one works on: the names given so far, and how many. */
typedef struct renaming {
	chosen c;
	int n;
} renaming;

/* Renames one unix socket (body, len: its unix_sk_entry) if it listens
 * on an abstract name that is taken; -EBADMSG if malformed, -EADDRINUSE
 * if no free name was found. */
static int rename_one(uint8_t *body, size_t blen, void *arg)
{
	renaming *r = arg;
	uint64_t state = 0, type = 0;
	uint8_t *name = NULL;
	size_t nlen = 0;
	for (const uint8_t *q = body, *qend = body + blen; q < qend;) {
		pb_item f;
		if (!pb_next(&q, qend, &f))
			return -EBADMSG;
		if ((f.field == USK_STATE || f.field == USK_TYPE) && f.wt == 0) {
			*(f.field == USK_STATE ? &state : &type) = f.v;
		} else if (f.field == USK_NAME && f.wt == 2) {
			name = (uint8_t *)f.body;
			nlen = f.len;
		}
	}
	if (state != TCP_LISTEN || nlen < 2 || name[0] || type > 16 || !taken((int)type, name, nlen))
		return 0;
	if (!rename_free((int)type, name, nlen, &r->c))
		return -EADDRINUSE;
	r->n++;
	return 0;
}

/* Renames, in buf (files.img, size bytes), every listening abstract
 * socket whose name is taken. *n counts them. -EBADMSG if buf is not a
 * files.img; -EADDRINUSE if no free name was found. */
static int rename_in(uint8_t *buf, size_t size, int *n)
{
	renaming r = { .c = { .n = 0 }, .n = 0 };
	int e = criu_files_each(buf, size, CRIU_FILE_UNIX, rename_one, &r);
	*n = r.n;
	return e;
}

/* to (absolute, resolved) relative to the folder from (absolute,
 * resolved), into rel: "../" for each name of from below their common
 * part, then the rest of to. */
static int relative(const char *from, const char *to, char *rel, size_t len)
{
	size_t common = 0;
	for (size_t i = 0;; i++) {
		bool fend = !from[i] || from[i] == '/', tend = !to[i] || to[i] == '/';
		if (fend && tend)
			common = i;
		if (!from[i] || !to[i] || from[i] != to[i])
			break;
	}
	size_t n = 0;
	rel[0] = 0;
	for (const char *p = from + common; *p; p++)
		if (*p == '/' && p[1] && p[1] != '/')
			n += (size_t)snprintf(rel + n, n < len ? len - n : 0, "../");
	const char *rest = to + common + (to[common] == '/');
	if (!n && !*rest)
		rest = ".";
	return (size_t)snprintf(rel + n, n < len ? len - n : 0, "%s", rest) + n >= len ? -ENAMETOOLONG : 0;
}

/* The folder CRIU reads instead of dir: a link to each of its files, and
 * files.img from buf. The links are relative: CRIU opens the images of
 * each process once inside the restored mount namespace (pagemap, pages),
 * where an absolute path means what it meant to the job, which lacks
 * mounts made since it started (phosfs's own, a new tmpfs or bind mount);
 * a relative one is walked from the folder CRIU holds open, through the
 * mounts here. */
static int make_folder(const char *dir, const char *work, const uint8_t *buf, size_t size, char *out, size_t outlen)
{
	char abs[PATH_MAX], here[PATH_MAX], rel[PATH_MAX];
	if (!realpath(dir, abs))
		return -errno;
	if (snprintf(out, outlen, "%s.criu-XXXXXX", work) >= (int)outlen)
		return -ENAMETOOLONG;
	if (!mkdtemp(out))
		return -errno;
	int e = realpath(out, here) ? relative(here, abs, rel, sizeof(rel)) : -errno;
	if (e) {
		rmdir(out);
		return e;
	}
	DIR *d = opendir(abs);
	e = d ? 0 : -errno;
	for (struct dirent *de; !e && (de = readdir(d));) {
		if (de->d_name[0] == '.' || !strcmp(de->d_name, "files.img"))
			continue;
		char from[PATH_MAX * 2], to[PATH_MAX * 2];
		snprintf(from, sizeof(from), "%s/%s", rel, de->d_name);
		snprintf(to, sizeof(to), "%s/%s", out, de->d_name);
		if (symlink(from, to) != 0)
			e = -errno;
	}
	if (d)
		closedir(d);
	if (!e) {
		char to[PATH_MAX + 16];
		snprintf(to, sizeof(to), "%s/files.img", out);
		int fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		e = fd < 0 ? -errno : 0;
		for (size_t put = 0; !e && put < size;) {
			ssize_t w = write(fd, buf + put, size - put);
			if (w < 0)
				e = -errno;
			else
				put += (size_t)w;
		}
		if (fd >= 0 && close(fd) != 0 && !e)
			e = -errno;
	}
	if (e)
		engine_sockets_end(out);
	return e;
}

int engine_sockets(const char *dir, const char *work, char *out, size_t outlen, int *renamed, perr *er)
{
	*out = 0;
	*renamed = 0;
	uint8_t *buf = NULL;
	size_t size = 0;
	int e = criu_files_read(dir, &buf, &size);
	if (e == -ENOENT)
		return 0; /* no files: nothing to rename */
	if (e)
		return pr_err(er, e, "cannot read %s/files.img: %s", dir, strerror(-e));
	e = rename_in(buf, size, renamed);
	if (e == -EBADMSG)
		pr_err(er, e, "%s/files.img is not CRIU's list of files", dir);
	else if (e)
		pr_err(er, e, "a listening socket of the image has a name taken here, and no free one "
		       "of its length was found");
	if (!e && *renamed) {
		e = make_folder(dir, work, buf, size, out, outlen);
		if (e)
			pr_err(er, e, "cannot make a folder for CRIU beside %s: %s", work, strerror(-e));
	}
	free(buf);
	if (e)
		*out = 0;
	return e;
}

void engine_sockets_end(const char *out)
{
	if (!out || !*out)
		return;
	DIR *d = opendir(out);
	for (struct dirent *de; d && (de = readdir(d));)
		if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	rmdir(out);
}
