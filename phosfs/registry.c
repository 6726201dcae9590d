/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The registry of traced processes. A thread accepts the tracers'
 * connections on the socket, reads each HELLO (with its state table) and
 * keeps the process until its connection ends. Requests to a process are
 * made by the file system's threads, one at a time per process.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "phosfs.h"

/* Guarded by lock: procs, and every proc's refs and next. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static proc *procs;
static int listen_fd = -1;
static int stop_pipe[2] = { -1, -1 };
static pthread_t thread;
static char sock_path[108];

static void proc_free(proc *p)
{
	if (p->table)
		munmap(p->table, STATE_BYTES);
	if (p->conn >= 0)
		close(p->conn);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Takes a new connection: its HELLO makes (or renews) a process. */
static void accept_one(void)
{
	pid_t peer;
	wire_hello hello;
	int sfd;
	int c = wire_accept_hello(listen_fd, 2000, &peer, &hello, &sfd);
	if (c < 0)
		return;
	proc *p = calloc(1, sizeof(*p));
	if (!p) {
		if (sfd >= 0)
			close(sfd);
		close(c);
		return;
	}
	p->pid = peer;
	p->uid = engine_proc_owner(peer, phosfs_store);
	p->hello = hello;
	p->conn = c;
	pthread_mutex_init(&p->lock, NULL);
	if (sfd >= 0) {
		void *m = mmap(NULL, STATE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
		p->table = m == MAP_FAILED ? NULL : m;
		close(sfd);
	}
	p->refs = 1;
	pthread_mutex_lock(&lock);
	/* A process that connects again replaces its old entry. */
	for (proc *q = procs; q; q = q->next)
		if (q->pid == p->pid)
			q->gone = true;
	p->next = procs;
	procs = p;
	pthread_mutex_unlock(&lock);
}

/* Drops processes whose connection ended, or that were replaced. */
static void reap(void)
{
	pthread_mutex_lock(&lock);
	for (proc **pp = &procs; *pp;) {
		proc *p = *pp;
		if (!p->gone && p->conn >= 0 && pthread_mutex_trylock(&p->lock) == 0) {
			/* Nobody is talking to it: see whether it hung up. */
			char b;
			ssize_t n = recv(p->conn, &b, 1, MSG_PEEK | MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
				p->gone = true;
			pthread_mutex_unlock(&p->lock);
		}
		if (p->gone) {
			*pp = p->next;
			if (--p->refs == 0)
				proc_free(p);
			continue;
		}
		pp = &p->next;
	}
	pthread_mutex_unlock(&lock);
}

static void *registry_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd pf[2] = { { listen_fd, POLLIN, 0 }, { stop_pipe[0], POLLIN, 0 } };
		int n = poll(pf, 2, 200);
		if (n < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		if (n > 0 && (pf[0].revents & POLLIN))
			accept_one();
		reap();
	}
	return NULL;
}

int registry_start(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	snprintf(sock_path, sizeof(sock_path), "%s", path);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	/* The directory of the default socket may not exist yet. */
	char dir[108];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		mkdir(dir, 0755);
	}
	unlink(path);
	listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (listen_fd < 0)
		return -errno;
	/* Any user's process may register; SO_PEERCRED tells who it is. */
	if (bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 || chmod(path, 0666) != 0 ||
	    listen(listen_fd, 64) != 0 || pipe2(stop_pipe, O_CLOEXEC) != 0) {
		int e = -errno;
		close(listen_fd);
		listen_fd = -1;
		return e;
	}
	if (pthread_create(&thread, NULL, registry_main, NULL) != 0)
		return -EAGAIN;
	return 0;
}

void registry_stop(void)
{
	if (listen_fd < 0)
		return;
	(void)!write(stop_pipe[1], "x", 1);
	pthread_join(thread, NULL);
	close(listen_fd);
	close(stop_pipe[0]);
	close(stop_pipe[1]);
	listen_fd = -1;
	unlink(sock_path);
	pthread_mutex_lock(&lock);
	while (procs) {
		proc *p = procs;
		procs = p->next;
		if (--p->refs == 0)
			proc_free(p);
	}
	pthread_mutex_unlock(&lock);
}

proc *registry_get(pid_t pid)
{
	pthread_mutex_lock(&lock);
	proc *p = procs;
	while (p && (p->pid != pid || p->gone))
		p = p->next;
	if (p)
		p->refs++;
	pthread_mutex_unlock(&lock);
	return p;
}

void registry_put(proc *p)
{
	pthread_mutex_lock(&lock);
	bool last = --p->refs == 0;
	pthread_mutex_unlock(&lock);
	if (last)
		proc_free(p);
}

int registry_pids(pid_t **out, size_t *n)
{
	pthread_mutex_lock(&lock);
	size_t k = 0;
	for (proc *p = procs; p; p = p->next)
		k += !p->gone;
	pid_t *v = malloc((k ? k : 1) * sizeof(*v));
	if (v) {
		k = 0;
		for (proc *p = procs; p; p = p->next)
			if (!p->gone)
				v[k++] = p->pid;
	}
	pthread_mutex_unlock(&lock);
	*out = v;
	*n = k;
	return v ? 0 : -ENOMEM;
}

const char *proc_stop_only(const proc *p, char *why, size_t n)
{
	if (p->hello.flags & WIRE_HELLO_STOP_ONLY) {
		snprintf(why, n, "%s", p->hello.stop_only_reason);
		return why;
	}
	state_header *h = p->table;
	if (!h || !(atomic_load(&h->flags) & STATE_STOP_ONLY))
		return NULL;
	char what[sizeof(h->stop_only) + 1];
	memcpy(what, h->stop_only, sizeof(h->stop_only));
	what[sizeof(h->stop_only)] = 0;
	snprintf(why, n, "it uses %s, which cannot be parked", what);
	return why;
}

int registry_take(proc *p)
{
	pthread_mutex_lock(&p->lock);
	int c = p->gone ? -1 : p->conn;
	p->conn = -1;
	p->gone = true;
	pthread_mutex_unlock(&p->lock);
	return c;
}

/* One request and its replies, one request at a time per process. */
static int request(proc *p, uint16_t type, uint16_t reply, uint8_t **out, size_t *len, uint32_t *count)
{
	pthread_mutex_lock(&p->lock);
	int e = p->gone ? -ESRCH : wire_request(p->conn, type, reply, 5000, out, len, count);
	if (e == -ECONNRESET || e == -EPIPE)
		p->gone = true;
	pthread_mutex_unlock(&p->lock);
	return e;
}

/* A request whose replies are records of size bytes each: *out (*n). */
static int records(proc *p, uint16_t type, uint16_t reply, size_t size, void **out, size_t *n)
{
	uint8_t *raw;
	size_t len;
	uint32_t count;
	int e = request(p, type, reply, &raw, &len, &count);
	if (e)
		return e;
	*out = raw;
	*n = len / size;
	return 0;
}

int proc_list(proc *p, wire_buffer **out, size_t *n)
{
	void *v = NULL;
	int e = records(p, WIRE_LIST, WIRE_BUFFERS, sizeof(**out), &v, n);
	*out = v;
	return e;
}

int proc_kernels(proc *p, uint8_t **out, size_t *len, uint32_t *count)
{
	return request(p, WIRE_KERNELS, WIRE_KERNELS, out, len, count);
}

int proc_nccl(proc *p, wire_nccl_comm **out, size_t *n)
{
	void *v = NULL;
	int e = records(p, WIRE_NCCL, WIRE_NCCL, sizeof(**out), &v, n);
	*out = v;
	return e;
}
