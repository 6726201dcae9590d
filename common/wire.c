/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The tracer <-> phosfs wire protocol (wire.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "pidns.h"
#include "wire.h"

const char *wire_socket_path(void)
{
	const char *p = getenv(WIRE_SOCKET_ENV);
	return p && *p ? p : WIRE_SOCKET_DEFAULT;
}

/* A SEQPACKET socket connected to, or (listening) bound to, address a. */
static int socket_at(const struct sockaddr_un *a, socklen_t len, bool listening)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int r = listening ? bind(fd, (const struct sockaddr *)a, len) || listen(fd, 4)
			  : connect(fd, (const struct sockaddr *)a, len);
	if (r != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

int wire_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	return socket_at(&a, sizeof(a), false);
}

/* The abstract address "phos-resume.<pid>". */
static socklen_t resume_addr(pid_t pid, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "phos-resume.%d", (int)pid);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int wire_listen_resume(pid_t pid)
{
	struct sockaddr_un a;
	socklen_t len = resume_addr(pid, &a);
	return socket_at(&a, len, true);
}

int wire_connect_resume(pid_t pid)
{
	struct sockaddr_un a;
	socklen_t len = resume_addr(pid, &a);
	return socket_at(&a, len, false);
}

int wire_wake(pid_t pid, pid_t tid)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	si.si_signo = WIRE_WAKE_SIGNAL;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_int = (int)pid;
	return syscall(SYS_rt_tgsigqueueinfo, pid, tid, WIRE_WAKE_SIGNAL, &si) == 0 ? 0 : -errno;
}

int wire_accept_hello(int lfd, int timeout_ms, pid_t *peer, wire_hello *hello, int *state_fd)
{
	*state_fd = -1;
	int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		return -errno;
	/* SO_PEERCRED: who is at the other end, whatever the HELLO says. */
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	wire_header h;
	int fds[WIRE_MAX_FDS], nfds = 0;
	struct pollfd pf = { c, POLLIN, 0 };
	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || poll(&pf, 1, timeout_ms) != 1 ||
	    wire_recv(c, &h, hello, sizeof(*hello), fds, &nfds) != 0 || h.type != WIRE_HELLO ||
	    h.length != sizeof(*hello) || (hello->pid != cred.pid && hello->pid != pidns_inner(cred.pid))) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		close(c);
		return -EPROTO;
	}
	for (int i = 1; i < nfds; i++)
		close(fds[i]);
	if (nfds)
		*state_fd = fds[0];
	/* From a pid namespace of its own: the host's pid and tid. */
	if (hello->pid != cred.pid) {
		pid_t tid = pidns_host_tid(cred.pid, hello->control_tid);
		hello->pid = cred.pid;
		hello->control_tid = tid > 0 ? tid : 0;
	}
	*peer = cred.pid;
	return c;
}

int wire_send(int sock, uint16_t type, const void *payload, uint32_t length, uint32_t count, const int *fds,
	      int nfds)
{
	if (length > WIRE_MAX_PAYLOAD || nfds < 0 || nfds > WIRE_MAX_FDS)
		return -EINVAL;
	wire_header h = { WIRE_MAGIC, WIRE_VERSION, type, length, count };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)payload, length } };
	union {
		char buf[CMSG_SPACE(sizeof(int) * WIRE_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = length ? 2 : 1 };
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL);
		if (n == (ssize_t)(sizeof(h) + length))
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? -errno : -EIO;
	}
}

int wire_recv(int sock, wire_header *h, void *buf, size_t cap, int *fds, int *nfds)
{
	struct iovec iov[2] = { { h, sizeof(*h) }, { buf, cap } };
	union {
		char buf[CMSG_SPACE(sizeof(int) * WIRE_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2, .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf) };
	ssize_t n;
	do
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	*nfds = 0;
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + (size_t)i * sizeof(int), sizeof(int));
			if (*nfds < WIRE_MAX_FDS)
				fds[(*nfds)++] = fd;
			else
				close(fd);
		}
	}
	if ((size_t)n < sizeof(*h) || h->magic != WIRE_MAGIC || h->version != WIRE_VERSION ||
	    h->length != (size_t)n - sizeof(*h) || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		return -EPROTO;
	}
	return 0;
}

int wire_fd_room(int n)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t)n >= rl.rlim_cur)
		n = (int)rl.rlim_cur - 1;
	if (n < 64)
		return 0; /* every table holds 64 */
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* The lowest free fd from n on: nothing open is touched. */
	int high = fcntl(fd, F_DUPFD_CLOEXEC, n);
	int e = high < 0 ? -errno : 0;
	if (high >= 0)
		close(high);
	close(fd);
	return e;
}

int wire_request(int sock, uint16_t type, uint16_t reply, int timeout_ms, uint8_t **out, size_t *len,
		 uint32_t *count)
{
	static _Thread_local uint8_t buf[WIRE_MAX_PAYLOAD];
	int e = wire_send(sock, type, NULL, 0, 0, NULL, 0);
	*out = NULL;
	*len = 0;
	*count = 0;
	while (!e) {
		wire_header h;
		int fds[WIRE_MAX_FDS], nfds;
		struct pollfd pf = { sock, POLLIN, 0 };
		if (poll(&pf, 1, timeout_ms) != 1) {
			e = -ETIMEDOUT;
			break;
		}
		e = wire_recv(sock, &h, buf, sizeof(buf), fds, &nfds);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		if (e || h.type == WIRE_END)
			break;
		if (h.type != reply) {
			e = -EPROTO;
			break;
		}
		uint8_t *v = realloc(*out, *len + h.length + 1);
		if (!v) {
			e = -ENOMEM;
			break;
		}
		memcpy(v + *len, buf, h.length);
		*out = v;
		*len += h.length;
		*count += h.count;
	}
	if (e) {
		free(*out);
		*out = NULL;
	}
	return e;
}
