/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A small peer that speaks the tracer's wire protocol (common/wire.h), as
 * phosfs will: it listens on a socket, and lists, parks and unparks a
 * traced process. For the tracer tests.
 */
#ifndef PHOS_PEER_H
#define PHOS_PEER_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <sys/mman.h>

#include "../common/cow.h"
#include "../common/state.h"
#include "../common/wire.h"

typedef struct peer {
	int lfd, conn;
	char path[108];
	wire_hello hello;
	state_header *table; /* the tracer's state table, mapped */
	/* What the last park handed over. */
	wire_object objs[4096];
	int fds[4096];
	int nobjs;
	wire_device devs[64]; /* the GPUs the process said it sees */
	int ndevs;
} peer;

static inline int peer_listen(peer *p, const char *path)
{
	memset(p, 0, sizeof(*p));
	p->conn = -1;
	snprintf(p->path, sizeof(p->path), "%s", path);
	unlink(path);
	p->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(p->lfd, 4))
		return -errno;
	return 0;
}

/* Accepts a connection and reads its HELLO. */
static inline int peer_accept(peer *p)
{
	if (p->conn >= 0)
		close(p->conn);
	p->conn = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (p->conn < 0)
		return -errno;
	wire_header h;
	int fds[WIRE_MAX_FDS], nfds;
	int e = wire_recv(p->conn, &h, &p->hello, sizeof(p->hello), fds, &nfds);
	if (!e && (h.type != WIRE_HELLO || h.length != sizeof(p->hello)))
		e = -EPROTO;
	if (p->table)
		munmap(p->table, STATE_BYTES);
	p->table = NULL;
	if (!e && nfds == 1) {
		void *m = mmap(NULL, STATE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
		p->table = m == MAP_FAILED ? NULL : m;
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return e;
}

/* Asks for the buffer table; *out is malloc'd. */
static inline int peer_list(peer *p, wire_buffer **out, size_t *n)
{
	uint8_t *raw;
	size_t len;
	uint32_t count;
	int e = wire_request(p->conn, WIRE_LIST, WIRE_BUFFERS, -1, &raw, &len, &count);
	*out = (wire_buffer *)raw;
	*n = e ? 0 : len / sizeof(wire_buffer);
	return e;
}

/* Asks for the kernels' counters; returns the record of kernel `name` in
 * *out, -ENOENT if it is not listed. */
static inline int peer_kernel(peer *p, const char *name, wire_kernel *out)
{
	uint8_t *raw;
	size_t len;
	uint32_t count;
	int e = wire_request(p->conn, WIRE_KERNELS, WIRE_KERNELS, -1, &raw, &len, &count), found = 0;
	for (size_t i = 0, at = 0; !e && i < count && at + sizeof(wire_kernel) <= len; i++) {
		wire_kernel k;
		memcpy(&k, raw + at, sizeof(k));
		const char *kn = (const char *)raw + at + sizeof(k);
		if (k.name_len == strlen(name) && !memcmp(kn, name, k.name_len)) {
			*out = k;
			found = 1;
		}
		at += sizeof(k) + (k.name_len + 7) / 8 * 8;
	}
	free(raw);
	return e ? e : found ? 0 : -ENOENT;
}

/* Parks: takes every object's fd, and says it holds them (HELD). The
 * connection ends with it. */
static inline int peer_park(peer *p, char *err, size_t errlen)
{
	int e = wire_send(p->conn, WIRE_PARK, NULL, 0, 0, NULL, 0);
	static uint8_t buf[WIRE_MAX_PAYLOAD];
	p->nobjs = 0;
	p->ndevs = 0;
	while (!e) {
		wire_header h;
		int fds[WIRE_MAX_FDS], nfds;
		e = wire_recv(p->conn, &h, buf, sizeof(buf), fds, &nfds);
		if (e)
			break;
		if (h.type == WIRE_PARKED) {
			/* It lets go of its memory, then closes its end. */
			e = wire_send(p->conn, WIRE_HELD, NULL, 0, 0, NULL, 0);
			int nf = 0;
			while (!e && (e = wire_recv(p->conn, &h, buf, sizeof(buf), fds, &nf)) == 0)
				for (int i = 0; i < nf; i++)
					close(fds[i]);
			if (e == -ECONNRESET)
				e = 0;
			break;
		}
		if (h.type == WIRE_ERROR) {
			snprintf(err, errlen, "%.*s", (int)h.length, (char *)buf);
			return -EIO;
		}
		if (h.type == WIRE_DEVICES && !nfds && h.count <= 64 && h.length == h.count * sizeof(wire_device)) {
			memcpy(p->devs, buf, h.length);
			p->ndevs = (int)h.count;
			continue;
		}
		if (h.type != WIRE_OBJECTS || (int)h.count != nfds || p->nobjs + nfds > 4096)
			return -EPROTO;
		memcpy(p->objs + p->nobjs, buf, h.count * sizeof(wire_object));
		memcpy(p->fds + p->nobjs, fds, (size_t)nfds * sizeof(int));
		p->nobjs += nfds;
	}
	close(p->conn);
	p->conn = -1;
	return e;
}

/* Wakes the parked process, and takes its connection (HELLO_RESUME). */
static inline int peer_wake(peer *p)
{
	if (syscall(SYS_tgkill, p->hello.pid, p->hello.control_tid, WIRE_WAKE_SIGNAL) != 0)
		return -errno;
	int e = peer_accept(p);
	return e ? e : p->hello.flags & WIRE_HELLO_RESUME ? 0 : -EPROTO;
}

/* UNPARK: waits until the woken process runs (UNPARKED). */
static inline int peer_resume(peer *p)
{
	int e = wire_send(p->conn, WIRE_UNPARK, NULL, 0, 0, NULL, 0);
	wire_header h;
	char buf[256];
	int fds[WIRE_MAX_FDS], nfds = 0;
	if (!e)
		e = wire_recv(p->conn, &h, buf, sizeof(buf), fds, &nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return e ? e : h.type == WIRE_UNPARKED ? 0 : -EPROTO;
}

/* Wakes the parked process, gives its objects back, waits until it runs. */
static inline int peer_unpark(peer *p)
{
	int e = peer_wake(p);
	for (int at = 0; !e && at < p->nobjs; at += 200) {
		int k = p->nobjs - at < 200 ? p->nobjs - at : 200;
		e = wire_send(p->conn, WIRE_OBJECTS, p->objs + at, (uint32_t)(k * (int)sizeof(wire_object)), (uint32_t)k,
			      p->fds + at, k);
	}
	if (!e)
		e = peer_resume(p);
	for (int i = 0; i < p->nobjs; i++)
		close(p->fds[i]);
	p->nobjs = 0;
	return e;
}

/* A lazy restore's unpark, as phosfs's job makes it (common/cow.h, LAZY
 * mode): wakes the parked process, gives back the application's own
 * objects, sends a LAZY table that lists every other object as absent,
 * and waits until the process runs. The connection stays open: objects
 * go on it (peer_lazy_send), then WIRE_END. *t is the table, mapped
 * (t_bytes bytes). */
static inline int peer_unpark_lazy(peer *p, cow_header **t, uint64_t *t_bytes)
{
	int e = peer_wake(p);
	if (e)
		return e;
	uint32_t n = 0;
	for (int i = 0; i < p->nobjs; i++)
		n += !(p->objs[i].flags & WIRE_OBJ_APP);
	*t_bytes = cow_table_bytes(n, n, 0);
	int fd = memfd_create("peer-lazy", MFD_CLOEXEC);
	void *m = MAP_FAILED;
	if (fd < 0 || ftruncate(fd, (off_t)*t_bytes) != 0 ||
	    (m = mmap(NULL, *t_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		e = -errno;
		if (fd >= 0)
			close(fd);
		return e;
	}
	cow_header *h = m;
	*h = (cow_header){ .magic = COW_MAGIC, .version = COW_VERSION, .pid = p->hello.pid, .job = getpid(),
			   .nobjs = n, .chunk = 2u << 20, .nchunks = n, .mode = COW_MODE_LAZY };
	atomic_store(&h->active, 1);
	/* By VA, as the tracer looks them up (park hands them over in no
	 * particular order). */
	uint32_t k = 0;
	for (uint64_t last = 0; k < n; k++) {
		int best = -1;
		for (int i = 0; i < p->nobjs; i++)
			if (!(p->objs[i].flags & WIRE_OBJ_APP) && (k == 0 || p->objs[i].va > last) &&
			    (best < 0 || p->objs[i].va < p->objs[best].va))
				best = i;
		cow_object *co = &cow_objects(h)[k];
		co->va = p->objs[best].va;
		co->size = p->objs[best].size;
		co->first = k;
		co->device = p->objs[best].device;
		last = co->va;
	}
	for (int i = 0; !e && i < p->nobjs; i++)
		if (p->objs[i].flags & WIRE_OBJ_APP)
			e = wire_send(p->conn, WIRE_OBJECTS, &p->objs[i], sizeof(wire_object), 1, &p->fds[i], 1);
	int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
	wire_cow wc = { .table_bytes = *t_bytes };
	int fds[2] = { fd, self };
	if (!e)
		e = self < 0 ? -errno : wire_send(p->conn, WIRE_LAZY, &wc, sizeof(wc), 1, fds, 2);
	if (self >= 0)
		close(self);
	close(fd);
	if (!e)
		e = peer_resume(p);
	if (e)
		munmap(m, *t_bytes);
	*t = e ? NULL : h;
	return e;
}

/* Sends object i of the last park to a lazily restored process, as the
 * job does once it is filled. */
static inline int peer_lazy_send(peer *p, int i)
{
	return wire_send(p->conn, WIRE_OBJECTS, &p->objs[i], sizeof(wire_object), 1, &p->fds[i], 1);
}

/* The index among the last park's objects of the one mapped at va, or -1. */
static inline int peer_object_at(const peer *p, uint64_t va)
{
	for (int i = 0; i < p->nobjs; i++)
		if (p->objs[i].va <= va && va < p->objs[i].va + p->objs[i].size && !(p->objs[i].flags & WIRE_OBJ_APP))
			return i;
	return -1;
}

/* Ends a lazy restore: END, then the connection closes, as the job's
 * does; the fds of the last park are closed. The tracer connects again. */
static inline int peer_lazy_end(peer *p)
{
	int e = wire_send(p->conn, WIRE_END, NULL, 0, 0, NULL, 0);
	close(p->conn);
	p->conn = -1;
	for (int i = 0; i < p->nobjs; i++)
		close(p->fds[i]);
	p->nobjs = 0;
	return e;
}

#endif
