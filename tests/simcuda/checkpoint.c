/*
 * The driver's process-checkpoint API (cuCheckpointProcess*), as state
 * transitions on the target pid.
 *
 * Every simcuda process that called cuInit runs a control thread, as the
 * real driver does, listening on the abstract unix socket "simcuda.<pid>".
 * The cuCheckpointProcess* calls of any process send it one request each:
 *
 *   RUNNING --lock--> LOCKED --checkpoint--> CHECKPOINTED
 *   CHECKPOINTED --restore--> LOCKED --unlock--> RUNNING
 *
 * Lock closes the API gate: it waits for calls in flight and queued work,
 * then blocks every new call until unlock. Checkpoint records how many
 * device bytes the driver would have had to copy to host memory.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

#define REQ_MAGIC 0x53434b50u /* "SCKP" */

enum op { OP_STATE = 1, OP_LOCK, OP_CHECKPOINT, OP_RESTORE, OP_UNLOCK, OP_TID, OP_BYTES };

struct request {
	uint32_t magic;
	uint32_t op;
	uint32_t timeout_ms;
};

struct reply {
	int32_t result; /* CUresult */
	uint32_t state;
	uint64_t bytes;
	int32_t tid;
	uint32_t have_bytes;
};

/* Owned by the control thread alone. */
static CUprocessState state = CU_PROCESS_STATE_RUNNING;
static uint64_t last_bytes;
static bool have_bytes;
static int server_tid;

static void addr_of(int pid, struct sockaddr_un *a, socklen_t *len)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "simcuda.%d", pid);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
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
			r.result = CUDA_ERROR_TIMEOUT;
		else
			state = CU_PROCESS_STATE_LOCKED;
		break;
	case OP_CHECKPOINT:
		if (state != CU_PROCESS_STATE_LOCKED) {
			r.result = CUDA_ERROR_ILLEGAL_STATE;
		} else {
			last_bytes = sc_mem_physical_bytes();
			have_bytes = true;
			state = CU_PROCESS_STATE_CHECKPOINTED;
		}
		break;
	case OP_RESTORE:
		if (state != CU_PROCESS_STATE_CHECKPOINTED)
			r.result = CUDA_ERROR_ILLEGAL_STATE;
		else
			state = CU_PROCESS_STATE_LOCKED;
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
	r.have_bytes = have_bytes;
	r.tid = server_tid;
	return r;
}

static void *server_main(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	server_tid = gettid();
	for (;;) {
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			sc_log("checkpoint control socket failed: %s", strerror(errno));
			return NULL;
		}
		struct request q;
		ssize_t n = recv(c, &q, sizeof(q), 0);
		if (n == (ssize_t)sizeof(q) && q.magic == REQ_MAGIC) {
			struct reply r = handle(&q);
			(void)!send(c, &r, sizeof(r), MSG_NOSIGNAL);
		}
		close(c);
	}
}

static int server_fd = -1;

void sc_checkpoint_fork_child(void)
{
	if (server_fd >= 0)
		close(server_fd);
	server_fd = -1;
}

void sc_checkpoint_start_server(void)
{
	struct sockaddr_un a;
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		sc_log("no checkpoint control socket: %s", strerror(errno));
		return;
	}
	addr_of(getpid(), &a, &len);
	if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 8) != 0) {
		sc_log("cannot listen on @simcuda.%d: %s", getpid(), strerror(errno));
		close(fd);
		return;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, server_main, (void *)(intptr_t)fd) != 0) {
		close(fd);
		return;
	}
	pthread_setname_np(t, "simcuda-ckpt");
	pthread_detach(t);
	server_fd = fd;
}

/* Sends one request to pid's control thread. */
static CUresult call(int pid, enum op op, unsigned timeout_ms, struct reply *r)
{
	struct sockaddr_un a;
	socklen_t len;
	if (pid <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	addr_of(pid, &a, &len);
	CUresult res = CUDA_SUCCESS;
	struct request q = { REQ_MAGIC, (uint32_t)op, timeout_ms };
	if (connect(fd, (struct sockaddr *)&a, len) != 0)
		res = CUDA_ERROR_INVALID_VALUE; /* no CUDA process with that pid */
	else if (send(fd, &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q) ||
		 recv(fd, r, sizeof(*r), 0) != (ssize_t)sizeof(*r))
		res = CUDA_ERROR_OPERATING_SYSTEM;
	else
		res = (CUresult)r->result;
	close(fd);
	return res;
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
	(void)args; /* one device: GPU remapping has nothing to remap */
	return call(pid, OP_RESTORE, 0, &r);
}

SC_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
	struct reply r;
	(void)args;
	return call(pid, OP_UNLOCK, 0, &r);
}

SC_EXPORT int simcuda_checkpoint_bytes(int pid, uint64_t *bytes)
{
	struct reply r;
	if (!bytes)
		return -EINVAL;
	if (call(pid, OP_BYTES, 0, &r) != CUDA_SUCCESS)
		return -ESRCH;
	if (!r.have_bytes)
		return -ENODATA;
	*bytes = r.bytes;
	return 0;
}
