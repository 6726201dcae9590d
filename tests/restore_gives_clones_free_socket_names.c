/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A clone restored beside its running original cannot bind the listening
 * abstract unix sockets the original holds (the CUDA driver's
 * "@cuda-uvmfd-<pid namespace>-<pid>@" is one): engine_sockets gives
 * each a free name of the same length in a folder of links for CRIU, and
 * leaves the image alone.
 *
 *   - a listening SEQPACKET socket whose name is taken gets a new name:
 *     same length, its digits changed, free; a socket of the same name
 *     that does not listen keeps it; every other file is a link to the
 *     image's, whose files.img is unchanged;
 *   - two sockets whose taken names differ only in the digits that are
 *     replaced get two different free names;
 *   - with the name free, nothing is renamed and no folder is made;
 *   - a name bound by a socket of another type is not taken (the kernel
 *     keeps abstract names per type);
 *   - files.img corrupted at random (bytes changed, cut short) gives an
 *     error or a folder, never a crash or a read out of bounds (the tests
 *     also run under ASan).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../engine/sockets.h"
#include "criu_files_test.h"

static const char NAME[] = "\0test-uvmfd-4026531836-2"; /* and a trailing NUL: 26 bytes */
static const char NAME2[] = "\0test-uvmfd-4026531837-2"; /* the same length, other digits */
#define NAME_LEN (sizeof(NAME))

/* A file_entry holding a unix_sk_entry of `type` in `state`, named name
 * (NAME_LEN bytes). */
static void unix_entry(buf *out, uint32_t id, int type, int state, const char *name)
{
	buf sk = { .n = 0 };
	field_varint(&sk, 1, id);
	field_varint(&sk, 2, 1000 + id);
	field_varint(&sk, 3, (uint64_t)type);
	field_varint(&sk, 4, (uint64_t)state);
	field_varint(&sk, 5, 0);
	field_varint(&sk, 7, 8);
	field_bytes(&sk, 9, "\x08\x00", 2);
	field_bytes(&sk, 11, name, NAME_LEN);
	file_entry(out, 5, id, 16, &sk);
}

/* files.img: a regular file's entry, then a listening socket and one
 * that is not (TCP_CLOSE) under the same name. */
static void files_img(buf *b)
{
	files_magic(b);
	buf reg = { .n = 0 };
	field_varint(&reg, 1, 7);
	field_bytes(&reg, 3, "/dev/null", 9);
	file_entry(b, 1, 1, 3, &reg);
	unix_entry(b, 2, SOCK_SEQPACKET, 10, NAME);
	unix_entry(b, 3, SOCK_SEQPACKET, 7, NAME);
}

/* A socket of `type` bound to `name` (len bytes), or -1. */
static int bound(int type, const void *name, size_t len)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	memcpy(a.sun_path, name, len);
	int fd = socket(AF_UNIX, type, 0);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Where the name of the n-th (0-based) occurrence of NAME's first bytes
 * lies in p, or NULL. */
static const uint8_t *nth_name(const uint8_t *p, size_t size, int n)
{
	for (size_t i = 0; i + NAME_LEN <= size; i++)
		if (!p[i] && !memcmp(p + i + 1, "test-uvmfd-", 11) && n-- == 0)
			return p + i;
	return NULL;
}

int main(void)
{
	plan(7);
	char dir[] = "/tmp/phos-socknames-XXXXXX";
	if (!mkdtemp(dir))
		bail("mkdtemp: %s", strerror(errno));
	char criu[256], work[256], path[600], out[512];
	perr er = { 0 };
	snprintf(criu, sizeof(criu), "%s/criu", dir);
	snprintf(work, sizeof(work), "%s/restore.log", dir);
	mkdir(criu, 0700);
	buf img;
	files_img(&img);
	snprintf(path, sizeof(path), "%s/files.img", criu);
	write_file(path, img.p, img.n);
	snprintf(path, sizeof(path), "%s/core-1.img", criu);
	write_file(path, "core", 4);

	/* The original holds the name. */
	int orig = bound(SOCK_SEQPACKET, NAME, NAME_LEN);
	if (orig < 0)
		bail("cannot bind the test's abstract name: %s", strerror(errno));
	int renamed = -1;
	int e = engine_sockets(criu, work, out, sizeof(out), &renamed, &er);
	uint8_t got[4096];
	snprintf(path, sizeof(path), "%s/files.img", out);
	size_t n = e ? 0 : read_file(path, got, sizeof(got));
	const uint8_t *listening = n ? nth_name(got, n, 0) : NULL, *other = n ? nth_name(got, n, 1) : NULL;
	bool same_len = n == img.n;
	bool changed = listening && memcmp(listening, NAME, NAME_LEN) && !memcmp(listening, NAME, 12) &&
		       listening[NAME_LEN - 1] == 0;
	int probe = listening ? bound(SOCK_SEQPACKET, listening, NAME_LEN) : -1;
	ok(!e && renamed == 1 && *out && same_len && changed && probe >= 0 && other && !memcmp(other, NAME, NAME_LEN),
	   "the listening socket whose name is taken gets a free one of its length, the other keeps its "
	   "(e %d, renamed %d, %s)", e, renamed, *er.msg ? er.msg : "no error");
	if (probe >= 0)
		close(probe);
	char link[600], target[600] = "";
	snprintf(link, sizeof(link), "%s/core-1.img", out);
	ssize_t tl = readlink(link, target, sizeof(target) - 1);
	target[tl > 0 ? tl : 0] = 0;
	uint8_t again[4096];
	snprintf(path, sizeof(path), "%s/files.img", criu);
	size_t m = read_file(path, again, sizeof(again));
	ok(tl > 0 && strstr(target, "/criu/core-1.img") && m == img.n && !memcmp(again, img.p, m),
	   "CRIU's other files are links to the image's, and the image's files.img is unchanged (%s)", target);
	engine_sockets_end(out);
	struct stat st;
	ok(stat(out, &st) != 0 && errno == ENOENT, "engine_sockets_end removes the folder");

	/* Two taken names that differ only in the digits replaced. */
	buf two = img;
	unix_entry(&two, 4, SOCK_SEQPACKET, 10, NAME2);
	snprintf(path, sizeof(path), "%s/files.img", criu);
	write_file(path, two.p, two.n);
	int orig2 = bound(SOCK_SEQPACKET, NAME2, NAME_LEN);
	e = engine_sockets(criu, work, out, sizeof(out), &renamed, &er);
	snprintf(path, sizeof(path), "%s/files.img", out);
	n = e ? 0 : read_file(path, got, sizeof(got));
	const uint8_t *a = n ? nth_name(got, n, 0) : NULL, *b2 = n ? nth_name(got, n, 2) : NULL;
	ok(!e && renamed == 2 && a && b2 && memcmp(a, b2, NAME_LEN) && memcmp(a, NAME, NAME_LEN) &&
		   memcmp(b2, NAME2, NAME_LEN),
	   "two taken names that differ only in their digits get two different free names (renamed %d)", renamed);
	engine_sockets_end(out);
	if (orig2 >= 0)
		close(orig2);
	snprintf(path, sizeof(path), "%s/files.img", criu);
	write_file(path, img.p, img.n);

	/* A socket of another type under the name does not take it. */
	close(orig);
	orig = bound(SOCK_STREAM, NAME, NAME_LEN);
	e = engine_sockets(criu, work, out, sizeof(out), &renamed, &er);
	ok(!e && renamed == 0 && !*out, "a name bound by a stream socket is free for a SEQPACKET one: nothing renamed");
	if (orig >= 0)
		close(orig);
	e = engine_sockets(criu, work, out, sizeof(out), &renamed, &er);
	ok(!e && renamed == 0 && !*out, "with the name free, nothing is renamed and no folder is made");

	/* Corrupt files.img: an error or a folder, never a crash. */
	orig = bound(SOCK_SEQPACKET, NAME, NAME_LEN);
	srand(42);
	int bad = 0, fine = 0;
	for (int i = 0; i < 2000; i++) {
		buf c = corrupted(&img);
		snprintf(path, sizeof(path), "%s/files.img", criu);
		write_file(path, c.p, c.n);
		e = engine_sockets(criu, work, out, sizeof(out), &renamed, &er);
		if (e == -EBADMSG && !*out && *er.msg)
			bad++;
		else if (!e)
			fine++;
		engine_sockets_end(out);
	}
	if (orig >= 0)
		close(orig);
	ok(bad + fine == 2000, "2000 corrupt files.img: %d refused (EBADMSG, with a message), %d read", bad, fine);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	if (system(path) != 0)
		diag("could not remove %s", dir);
	return done();
}
