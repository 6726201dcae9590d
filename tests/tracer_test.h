/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Runs tests/tracer_app.h under libphos.so, with the test as its phosfs
 * (tests/peer.h). A tracer test's main starts with TRACER_TEST_MAIN.
 */
#ifndef PHOS_TRACER_TEST_H
#define PHOS_TRACER_TEST_H

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "peer.h"
#include "tap.h"
#include "testpath.h"
#include "tracer_app.h"

typedef struct traced {
	pid_t pid;
	int fd; /* our end of the command pipe */
	app_layout lay;
	peer p;
	char sock[108];
} traced;

#define TRACER_TEST_MAIN(argc, argv)                                                         \
	do {                                                                                 \
		if ((argc) == 3 && !strcmp((argv)[1], "app"))                                 \
			return app_main(atoi((argv)[2]), test_path("PHOS_KERNELS", "../kernels")); \
		char cubin[PATH_MAX];                                                        \
		snprintf(cubin, sizeof(cubin), "%s/vector.cubin", test_path("PHOS_KERNELS", "../kernels")); \
		if (access(cubin, R_OK) != 0)                                                \
			skip_all("no nvcc-built kernels (nvcc missing when building)");      \
		if (access(test_path("PHOS_LIBPHOS", "../libphos.so"), R_OK) != 0)           \
			skip_all("no libphos.so");                                           \
	} while (0)

/* Points PHOS_NCCL_STUB (which the app's NCCL commands dlopen) at the
 * stub NCCL, tests/apps/libnccl.so.2, or skips the whole test when it is
 * not built. */
static inline void tracer_nccl_stub(void)
{
	char stub[PATH_MAX];
	snprintf(stub, sizeof(stub), "%s", test_path("PHOS_NCCL_STUB", "apps/libnccl.so.2"));
	if (access(stub, R_OK))
		skip_all("tests/apps/libnccl.so.2 is not built");
	setenv("PHOS_NCCL_STUB", stub, 1);
}

/* Starts the app under the tracer (or, with trace 0, with PHOS_TRACE=0),
 * registering with the test's peer, or with whatever listens on sock. */
static inline int traced_start_at(traced *t, const char *argv0, int trace, const char *sock)
{
	memset(t, 0, sizeof(*t));
	t->p.lfd = t->p.conn = -1;
	if (sock) {
		snprintf(t->sock, sizeof(t->sock), "%s", sock);
	} else {
		snprintf(t->sock, sizeof(t->sock), "/tmp/phos-peer-%d.sock", (int)getpid());
		if (peer_listen(&t->p, t->sock))
			return -1;
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return -1;
	char lib[PATH_MAX];
	snprintf(lib, sizeof(lib), "%s", test_path("PHOS_LIBPHOS", "../libphos.so"));
	t->pid = fork();
	if (t->pid == 0) {
		close(sv[0]);
		char fdarg[16];
		snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
		setenv("LD_PRELOAD", lib, 1);
		setenv("PHOS_SOCKET", t->sock, 1);
		setenv("PHOS_TRACE", trace ? "1" : "0", 1);
		/* An ASan test binary: the tracer is preloaded before its runtime. */
		setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 1);
		execl("/proc/self/exe", argv0, "app", fdarg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	t->fd = sv[0];
	if (read(t->fd, &t->lay, sizeof(t->lay)) != (ssize_t)sizeof(t->lay) || !t->lay.ok)
		return -1;
	return 0;
}

static inline int traced_start(traced *t, const char *argv0, int trace)
{
	return traced_start_at(t, argv0, trace, NULL);
}

/* Waits up to ms for the tracer to connect and say HELLO. */
static inline int traced_hello(traced *t, int ms)
{
	struct pollfd pf = { t->p.lfd, POLLIN, 0 };
	if (poll(&pf, 1, ms) != 1)
		return -ETIMEDOUT;
	return peer_accept(&t->p);
}

static inline char traced_cmd(traced *t, char c)
{
	char r = 0;
	if (write(t->fd, &c, 1) != 1 || read(t->fd, &r, 1) != 1)
		return 0;
	return r;
}

static inline int traced_stop(traced *t)
{
	char q = 'q';
	int st = -1;
	if (write(t->fd, &q, 1) != 1)
		kill(t->pid, SIGKILL);
	waitpid(t->pid, &st, 0);
	close(t->fd);
	if (t->p.conn >= 0)
		close(t->p.conn);
	if (t->p.lfd >= 0) {
		close(t->p.lfd);
		unlink(t->sock);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Park under the test's peer, the driver's checkpoint and restore,
 * unpark: *bytes is what count (simcuda_checkpoint_bytes or
 * simcuda_checkpoint_local_bytes) says the checkpoint saved. Returns 0,
 * peer_park's error (said in err), -EIO, or peer_unpark's error. */
static inline int traced_cycle(traced *t, int (*count)(int, uint64_t *), uint64_t *bytes, char *err, size_t errlen)
{
	int e = peer_park(&t->p, err, errlen);
	if (e)
		return e;
	*bytes = UINT64_MAX;
	if (cuCheckpointProcessLock(t->pid, NULL) || cuCheckpointProcessCheckpoint(t->pid, NULL) ||
	    count(t->pid, bytes) || cuCheckpointProcessRestore(t->pid, NULL) || cuCheckpointProcessUnlock(t->pid, NULL))
		return -EIO;
	return peer_unpark(&t->p);
}

/* The listed buffer at va, or NULL. */
static inline const wire_buffer *find_buffer(const wire_buffer *v, size_t n, uint64_t va)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].va == va)
			return &v[i];
	return NULL;
}

/* Whether the state table mirrors the listed buffers exactly. */
static inline int table_matches(state_header *t, const wire_buffer *v, size_t n, pid_t pid)
{
	if (!t || t->magic != STATE_MAGIC || t->version != STATE_VERSION || t->pid != pid)
		return 0;
	size_t live = 0;
	state_slot *s = state_slots(t);
	for (uint32_t i = 0; i < atomic_load(&t->used); i++) {
		uint64_t va = atomic_load(&s[i].va);
		if (!va)
			continue;
		const wire_buffer *b = find_buffer(v, n, va);
		if (!b || b->size != s[i].size || b->state != atomic_load(&s[i].state))
			return 0;
		live++;
	}
	return live == n && atomic_load(&t->pcie_pending) == 0;
}

#endif
