/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The driver's process-checkpoint API (cuCheckpointProcess*), as state
 * transitions on the target pid.
 *
 * Every simcuda process that called cuInit runs a control thread, as the
 * real driver does, listening on the abstract unix socket
 * "simcuda.<ns>.<pid>": its pid namespace (the inode of /proc/PID/ns/pid)
 * and its pid there, which it and a caller in the host's namespace both
 * tell, whatever /proc each has (a job of `phos run --pid-ns` has a /proc
 * of its own namespace, where the host pid cannot be read). The
 * cuCheckpointProcess* calls of any process send it one request each:
 *
 *   RUNNING --lock--> LOCKED --checkpoint--> CHECKPOINTED
 *   CHECKPOINTED --restore--> LOCKED --unlock--> RUNNING
 *
 * Lock closes the API gate: it waits for calls in flight and queued work,
 * then blocks every new call until unlock. Past its timeoutMs it opens
 * the gate again and answers CUDA_ERROR_NOT_READY, as the r580 driver
 * does. Checkpoint records how many
 * device bytes the driver would have had to copy to host memory: the
 * process's allocations, and apart from them its contexts' local memory.
 *
 * A process with managed memory (cuMemAllocManaged) is locked, but its
 * checkpoint fails with CUDA_ERROR_NOT_SUPPORTED, as the r580 driver's
 * does (measured on an H200); it stays LOCKED, for the caller to unlock.
 *
 * A process that maps another process's memory through legacy IPC
 * (cuIpcOpenMemHandle) is locked and checkpointed, but its restore fails
 * with CUDA_ERROR_INVALID_VALUE and it stays CHECKPOINTED, its calls
 * blocked: as the r580 driver leaves it (measured on an H200).
 *
 * Restore may move the process's GPUs (gpuPairs), as the driver does: the
 * caller checks that each new GPU is one of its machine's and sends its
 * name; the process checks that the pairs name every device it made a
 * context on, each onto a GPU of the same chip, no two onto one, and then
 * its devices are the new GPUs.
 *
 * While CHECKPOINTED the process listens on nothing: CRIU dumps it then,
 * and a listening socket in the image would keep a clone restored beside
 * its original (or a tree restored into a new pid namespace, whose
 * namespace is another) from binding its own. A caller that finds nobody
 * listening wakes the control thread ("simcuda-ckpt") with SC_WAKE; it
 * listens again under its namespace and pid of the moment, answers, and
 * closes again if still CHECKPOINTED.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../common/pidns.h"
#include "internal.h"

#define REQ_MAGIC 0x53434b50u /* "SCKP" */
#define SC_WAKE (SIGRTMIN + 9)  /* listen again (CHECKPOINTED) */
#define SC_THREAD "simcuda-ckpt"

enum op { OP_STATE = 1, OP_LOCK, OP_CHECKPOINT, OP_RESTORE, OP_UNLOCK, OP_TID, OP_BYTES, OP_UUID };

struct pair {
	CUuuid old, now;
	char name[64]; /* the new GPU's */
};

struct request {
	uint32_t magic;
	uint32_t op;
	uint32_t timeout_ms; /* lock; for OP_UUID, the ordinal */
	uint32_t npairs;     /* restore */
	struct pair pairs[SC_DEVICE_MAX];
};

struct reply {
	int32_t result; /* CUresult */
	uint32_t state;
	uint64_t bytes;
	int32_t tid;
	uint32_t have_bytes;
	CUuuid uuid; /* OP_UUID */
	uint64_t local_bytes;
};

/* Owned by the control thread alone. */
static CUprocessState state = CU_PROCESS_STATE_RUNNING;
static uint64_t last_bytes, last_local;
static bool have_bytes;
static int server_tid;

/* The control socket's address of the process with pid `pid` in the pid
 * namespace whose inode is ns. */
static void addr_of(unsigned long ns, int pid, struct sockaddr_un *a, socklen_t *len)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "simcuda.%lu.%d", ns, pid);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The pid namespace (its inode) of the process /proc/WHO names, 0 if
 * unknown. */
static unsigned long ns_of(const char *who)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%s/ns/pid", who);
	return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}


/* Restore's gpuPairs, checked as the driver does: every device with a
 * context is named, each onto the same chip, no two onto one GPU. */
static CUresult move_devices(const struct request *q)
{
	int to[SC_DEVICE_MAX];
	for (int d = 0; d < sc_device_count(); d++) {
		to[d] = -1;
		for (uint32_t i = 0; i < q->npairs; i++) {
			CUuuid u;
			sc_device_uuid(d, &u);
			if (!memcmp(q->pairs[i].old.bytes, u.bytes, sizeof(u.bytes)))
				to[d] = (int)i;
		}
		if (to[d] < 0 && sc_ctx_device_used(d)) {
			sc_log("restore: gpuPairs does not name device %d, which was checkpointed", d);
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (to[d] >= 0 && strcmp(q->pairs[to[d]].name, sc_device_name(d))) {
			sc_log("restore: device %d (%s) cannot move to a %s", d, sc_device_name(d),
			       q->pairs[to[d]].name);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	for (uint32_t i = 0; i < q->npairs; i++)
		for (uint32_t j = 0; j < i; j++)
			if (!memcmp(q->pairs[i].now.bytes, q->pairs[j].now.bytes, sizeof(CUuuid))) {
				sc_log("restore: gpuPairs moves two GPUs onto one");
				return CUDA_ERROR_INVALID_VALUE;
			}
	for (int d = 0; d < sc_device_count(); d++)
		if (to[d] >= 0)
			sc_device_move(d, &q->pairs[to[d]].now, q->pairs[to[d]].name);
	return CUDA_SUCCESS;
}

static struct reply handle(const struct request *q)
{
	struct reply r = { .result = CUDA_SUCCESS };

	switch (q->op) {
	case OP_STATE:
	case OP_TID:
		break;
	case OP_LOCK:
		if (state != CU_PROCESS_STATE_RUNNING)
			r.result = CUDA_ERROR_ILLEGAL_STATE;
		else if (!sc_gate_close(q->timeout_ms))
			r.result = CUDA_ERROR_NOT_READY; /* what r580 answers */
		else
			state = CU_PROCESS_STATE_LOCKED;
		break;
	case OP_CHECKPOINT:
		if (state != CU_PROCESS_STATE_LOCKED) {
			r.result = CUDA_ERROR_ILLEGAL_STATE;
		} else if (sc_mem_managed()) {
			r.result = CUDA_ERROR_NOT_SUPPORTED;
		} else {
			last_bytes = sc_mem_physical_bytes();
			last_local = sc_ctx_local_bytes();
			have_bytes = true;
			state = CU_PROCESS_STATE_CHECKPOINTED;
		}
		break;
	case OP_RESTORE:
		if (state != CU_PROCESS_STATE_CHECKPOINTED)
			r.result = CUDA_ERROR_ILLEGAL_STATE;
		else if (sc_mem_ipc_imports()) {
			sc_log("restore: the process maps another process's memory (CUDA IPC)");
			r.result = CUDA_ERROR_INVALID_VALUE;
		}
		else if (q->npairs > SC_DEVICE_MAX)
			r.result = CUDA_ERROR_INVALID_VALUE;
		else if (q->npairs && (r.result = move_devices(q)) != CUDA_SUCCESS)
			break;
		else
			state = CU_PROCESS_STATE_LOCKED;
		break;
	case OP_UUID:
		if (q->timeout_ms >= (uint32_t)sc_device_count())
			r.result = CUDA_ERROR_INVALID_DEVICE;
		else
			sc_device_uuid((CUdevice)q->timeout_ms, &r.uuid);
		break;
	case OP_UNLOCK:
		if (state != CU_PROCESS_STATE_LOCKED) {
			r.result = CUDA_ERROR_ILLEGAL_STATE;
		} else {
			sc_gate_open();
			state = CU_PROCESS_STATE_RUNNING;
		}
		break;
	case OP_BYTES:
		break;
	default:
		r.result = CUDA_ERROR_INVALID_VALUE;
	}
	r.state = (uint32_t)state;
	r.bytes = last_bytes;
	r.local_bytes = last_local;
	r.have_bytes = have_bytes;
	r.tid = server_tid;
	return r;
}

/* A socket listening on "simcuda.<our pid namespace>.<our pid>", or -1. */
static int listen_here(void)
{
	struct sockaddr_un a;
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		sc_log("no checkpoint control socket: %s", strerror(errno));
		return -1;
	}
	addr_of(ns_of("self"), getpid(), &a, &len);
	if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 8) != 0) {
		sc_log("cannot listen on @%s: %s", a.sun_path + 1, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Waits for SC_WAKE (blocked in this thread). */
static void wait_wake(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SC_WAKE);
	while (sigwaitinfo(&set, NULL) < 0)
		;
}

static _Atomic int server_fd = -1;

static void *server_main(void *arg)
{
	(void)arg;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SC_WAKE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	/* Named by itself: pthread_setname_np on another thread goes by the
	 * tid this process sees, not the host /proc's in a pid namespace. */
	pthread_setname_np(pthread_self(), SC_THREAD);
	server_tid = gettid();
	for (;;) {
		int lfd = atomic_load(&server_fd);
		if (lfd < 0) {
			wait_wake();
			lfd = listen_here();
			atomic_store(&server_fd, lfd);
			if (lfd < 0)
				continue;
		}
		/* Woken for a caller: if none comes, listen on nothing again. */
		struct pollfd pf = { lfd, POLLIN, 0 };
		if (state == CU_PROCESS_STATE_CHECKPOINTED && poll(&pf, 1, 2000) == 0) {
			atomic_store(&server_fd, -1);
			close(lfd);
			continue;
		}
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			sc_log("checkpoint control socket failed: %s", strerror(errno));
			return NULL;
		}
		struct request q;
		ssize_t n = recv(c, &q, sizeof(q), 0);
		struct reply r;
		bool answer = n == (ssize_t)sizeof(q) && q.magic == REQ_MAGIC;
		if (answer)
			r = handle(&q);
		/* Closed before the answer, so that the caller's next connect
		 * fails at once rather than wait in a backlog that goes away. */
		if (state == CU_PROCESS_STATE_CHECKPOINTED) {
			pf.revents = 0;
			if (poll(&pf, 1, 0) == 0) {
				atomic_store(&server_fd, -1);
				close(lfd);
			}
		}
		if (answer)
			(void)!send(c, &r, sizeof(r), MSG_NOSIGNAL);
		close(c);
	}
}

void sc_checkpoint_fork_child(void)
{
	int fd = atomic_exchange(&server_fd, -1);
	if (fd >= 0)
		close(fd);
}

/* As the driver does from cuInit on: a SEQPACKET socket listening, for
 * as long as the process lives, on "@cuda-uvmfd-<pid namespace>-<pid>@"
 * (with a trailing NUL; seen on an H100 with driver 580), where other processes ask for its UVM fd for CUDA IPC.
 * Nobody asks here; its name is what matters: CRIU dumps it in every
 * image, and a clone beside its original finds that name taken. */
static void uvmfd_listen(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 2, "cuda-uvmfd-%lu-%d", ns_of("self"), (int)getpid());
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n + 1);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd >= 0 && (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 8) != 0)) {
		sc_log("cannot listen on @%s@: %s", a.sun_path + 1, strerror(errno));
		close(fd);
	}
	/* (kept open: the process's, as the driver's is) */
}

void sc_checkpoint_start_server(void)
{
	uvmfd_listen();
	int fd = listen_here();
	if (fd < 0)
		return;
	atomic_store(&server_fd, fd);
	pthread_t t;
	if (pthread_create(&t, NULL, server_main, NULL) != 0) {
		atomic_store(&server_fd, -1);
		close(fd);
		return;
	}
	pthread_detach(t);
}

/* The tid of pid's control thread, or 0. */
static int server_thread_of(int pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	int tid = 0;
	struct dirent *de;
	while (d && !tid && (de = readdir(d))) {
		char cpath[300], comm[32] = "";
		snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/comm", pid, de->d_name);
		FILE *f = de->d_name[0] >= '1' && de->d_name[0] <= '9' ? fopen(cpath, "re") : NULL;
		if (f) {
			if (fgets(comm, sizeof(comm), f) && !strcmp(comm, SC_THREAD "\n"))
				tid = atoi(de->d_name);
			fclose(f);
		}
	}
	if (d)
		closedir(d);
	return tid;
}

/* A connection to pid's control thread, waking it if it listens on
 * nothing (CHECKPOINTED); -1 when pid is no simcuda process. */
static int connect_to(int pid)
{
	struct sockaddr_un a;
	socklen_t len;
	char who[16];
	snprintf(who, sizeof(who), "%d", pid);
	pid_t inner = pidns_inner(pid);
	addr_of(ns_of(who), inner > 0 ? inner : pid, &a, &len);
	bool woken = false;
	for (int tries = 0; tries < 400; tries++) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		if (connect(fd, (struct sockaddr *)&a, len) == 0)
			return fd;
		close(fd);
		if (!woken) {
			int tid = server_thread_of(pid);
			if (!tid || syscall(SYS_tgkill, pid, tid, SC_WAKE) != 0)
				return -1;
			woken = true;
		}
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
	return -1;
}

/* Sends request q (its op and argument set) to pid's control thread. */
static CUresult send_request(int pid, struct request *q, struct reply *r)
{
	if (pid <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = connect_to(pid);
	CUresult res = CUDA_SUCCESS;
	q->magic = REQ_MAGIC;
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE; /* no CUDA process with that pid */
	ssize_t n;
	while ((n = send(fd, q, sizeof(*q), MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n == (ssize_t)sizeof(*q))
		while ((n = recv(fd, r, sizeof(*r), MSG_WAITALL)) < 0 && errno == EINTR)
			;
	if (n != (ssize_t)sizeof(*r))
		res = CUDA_ERROR_OPERATING_SYSTEM;
	else
		res = (CUresult)r->result;
	close(fd);
	return res;
}

/* Sends one request without arguments beyond the timeout. */
static CUresult call(int pid, enum op op, unsigned timeout_ms, struct reply *r)
{
	struct request q = { .op = (uint32_t)op, .timeout_ms = timeout_ms };
	return send_request(pid, &q, r);
}

SC_EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *st)
{
	struct reply r;
	if (!st)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult res = call(pid, OP_STATE, 0, &r);
	if (res == CUDA_SUCCESS)
		*st = (CUprocessState)r.state;
	return res;
}

SC_EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	struct reply r;
	if (!tid)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult res = call(pid, OP_TID, 0, &r);
	if (res == CUDA_SUCCESS)
		*tid = r.tid;
	return res;
}

SC_EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
	struct reply r;
	return call(pid, OP_LOCK, args ? args->timeoutMs : 0, &r);
}

SC_EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
	struct reply r;
	(void)args;
	return call(pid, OP_CHECKPOINT, 0, &r);
}

SC_EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
	struct reply r;
	struct request q = { .op = OP_RESTORE };
	if (args) {
		static const char zero[sizeof(args->reserved)];
		if (memcmp(args->reserved, zero, sizeof(zero)) || args->reserved1 ||
		    (args->gpuPairsCount && !args->gpuPairs) || args->gpuPairsCount > SC_DEVICE_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		if (args->gpuPairsCount && !sc_initialized())
			return CUDA_ERROR_NOT_INITIALIZED;
		for (unsigned i = 0; i < args->gpuPairsCount; i++) {
			int d = sc_device_of_uuid(&args->gpuPairs[i].newUuid);
			if (d < 0)
				return CUDA_ERROR_INVALID_DEVICE; /* not a GPU of this machine */
			q.pairs[i].old = args->gpuPairs[i].oldUuid;
			q.pairs[i].now = args->gpuPairs[i].newUuid;
			snprintf(q.pairs[i].name, sizeof(q.pairs[i].name), "%s", sc_device_name(d));
		}
		q.npairs = args->gpuPairsCount;
	}
	return send_request(pid, &q, &r);
}

SC_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
	struct reply r;
	(void)args;
	return call(pid, OP_UNLOCK, 0, &r);
}

/* The last checkpoint's device bytes of pid: its allocations', or with
 * local, its contexts' local memory. */
static int checkpoint_bytes(int pid, bool local, uint64_t *bytes)
{
	struct reply r;
	if (!bytes)
		return -EINVAL;
	if (call(pid, OP_BYTES, 0, &r) != CUDA_SUCCESS)
		return -ESRCH;
	if (!r.have_bytes)
		return -ENODATA;
	*bytes = local ? r.local_bytes : r.bytes;
	return 0;
}

SC_EXPORT int simcuda_checkpoint_bytes(int pid, uint64_t *bytes)
{
	return checkpoint_bytes(pid, false, bytes);
}

SC_EXPORT int simcuda_checkpoint_local_bytes(int pid, uint64_t *bytes)
{
	return checkpoint_bytes(pid, true, bytes);
}

SC_EXPORT int simcuda_device_uuid(int pid, int ordinal, unsigned char uuid[16])
{
	struct reply r;
	if (ordinal < 0)
		return -EINVAL;
	CUresult res = call(pid, OP_UUID, (unsigned)ordinal, &r);
	if (res == CUDA_ERROR_INVALID_DEVICE)
		return -EINVAL;
	if (res != CUDA_SUCCESS)
		return -ESRCH;
	memcpy(uuid, r.uuid.bytes, 16);
	return 0;
}
