/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The wire protocol between the tracer (libphos.so, inside the GPU
 * process) and phosfs: versioned messages over a SOCK_SEQPACKET unix
 * socket, with file descriptors passed by SCM_RIGHTS.
 *
 *   tracer -> phosfs  HELLO      at the first cuInit, and again to resume
 *   phosfs -> tracer  PARK       quiesce within wire_park's deadline, hand
 *                                over device memory, detach
 *   tracer -> phosfs  DEVICES    the process's GPUs (wire_device records)
 *   tracer -> phosfs  OBJECTS    records + fds of the device memory (batches)
 *   tracer -> phosfs  PARKED     the last batch was sent
 *   phosfs -> tracer  HELD       phosfs holds every fd: the tracer releases
 *                                its memory and detaches. Without HELD (in
 *                                time) it keeps its memory and runs on.
 *   phosfs -> tracer  OBJECTS    (after a resume HELLO) the same fds back
 *   phosfs -> tracer  COW        (optional) a copy-on-write checkpoint's table
 *                                and shadow pool (common/cow.h), as fds
 *   phosfs -> tracer  UNPARK     the last batch was sent; map and resume
 *   tracer -> phosfs  UNPARKED   mapped again; the process runs
 *   phosfs -> tracer  LIST       ask for the buffer table
 *   tracer -> phosfs  BUFFERS    records of the buffer table (batches), then END
 *   phosfs -> tracer  KERNELS    ask for the speculation counters per kernel
 *   tracer -> phosfs  KERNELS    wire_kernel records, each followed by its
 *                                name and padding to 8 bytes (batches), then END
 *   phosfs -> tracer  NCCL       ask for the process's NCCL communicators
 *   tracer -> phosfs  NCCL       wire_nccl_comm records (batches), then END
 *   phosfs -> tracer  CUT        (a checkpoint's cut, with wire_park's
 *                                deadline) hold every NCCL operation back
 *   tracer -> phosfs  NCCL       the counts then (batches), then END
 *   phosfs -> tracer  TARGETS    wire_nccl_target records: run up to them
 *   tracer -> phosfs  CUT_DONE   every communicator reached its target
 *   phosfs -> tracer  CUT_END    (the checkpoint does not go on) run on
 *   phosfs -> tracer  TRACK      (recopy) quiesce within wire_park's
 *                                deadline and hand over device memory,
 *                                keeping it mapped
 *   tracer -> phosfs  OBJECTS    records + fds (batches), then TRACKED
 *   phosfs -> tracer  COW        the TRACK table (common/cow.h)
 *   tracer -> phosfs  UNPARKED   tracking; the process runs
 *   phosfs -> tracer  LAZY       (lazy restore, before UNPARK) the table of
 *                                the objects still to come (common/cow.h)
 *   phosfs -> tracer  OBJECTS    (lazy restore, after UNPARKED) each object
 *                                as it is filled, record + fd
 *   phosfs -> tracer  END        every object was sent and mapped: the fill
 *                                ended, and the job closes the connection
 *   either            ERROR      a message a person can read
 *
 * Between two traced processes, on the exporter's own socket (legacy CUDA
 * IPC, tracer/ipc.c):
 *
 *   importer -> exporter  IPC_ASK  the handle's secret, and its object
 *   exporter -> importer  IPC_FD   the result; with 0, the object's fd
 *
 * While parked, the tracer keeps nothing open that phosfs holds the other
 * end of (CRIU cannot dump such a process); phosfs wakes it with the signal
 * WIRE_WAKE_SIGNAL sent to its control thread (wire_wake), after which it
 * connects again (see wire_listen_resume) and says HELLO with
 * WIRE_HELLO_RESUME.
 *
 * A process may live in a pid namespace of its own (`phos run` starts jobs
 * so): its HELLO then says the pid it sees (getpid), phosfs knows it by
 * the host's pid (SO_PEERCRED), and the wake-up signal carries the host's
 * pid, which names the resume rendezvous.
 */
#ifndef PHOS_WIRE_H
#define PHOS_WIRE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WIRE_MAGIC 0x52574850u /* "PHWR" */
#define WIRE_VERSION 4 /* 4: imported memory parked (WIRE_OBJ_IMPORTED) */
#define WIRE_SOCKET_DEFAULT "/run/phos/phosfs.sock"
#define WIRE_SOCKET_ENV "PHOS_SOCKET"
#define WIRE_WAKE_SIGNAL (SIGRTMIN + 7)
#define WIRE_MAX_PAYLOAD 60000
#define WIRE_MAX_FDS 250

enum wire_type {
	WIRE_HELLO = 1,
	WIRE_PARK,
	WIRE_OBJECTS,
	WIRE_PARKED,
	WIRE_UNPARK,
	WIRE_UNPARKED,
	WIRE_LIST,
	WIRE_BUFFERS,
	WIRE_END,
	WIRE_ERROR,
	WIRE_KERNELS,
	WIRE_COW,
	WIRE_TRACK,
	WIRE_TRACKED,
	WIRE_DEVICES,
	WIRE_LAZY,
	WIRE_HELD,
	WIRE_NCCL,
	WIRE_CUT,
	WIRE_TARGETS,
	WIRE_CUT_DONE,
	WIRE_CUT_END,
	WIRE_IPC_ASK,
	WIRE_IPC_FD,
};

typedef struct wire_header {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length; /* payload bytes after this header */
	uint32_t count;  /* records in the payload, or fds */
} wire_header;

#define WIRE_HELLO_RESUME 0x1u    /* after a park or a restore */
#define WIRE_HELLO_STOP_ONLY 0x2u /* uses memory that cannot be parked */

typedef struct wire_hello {
	int32_t pid;
	int32_t control_tid; /* where WIRE_WAKE_SIGNAL goes */
	uint32_t flags;
	uint32_t reserved;
	char stop_only_reason[96];
} wire_hello;

/* A device memory object (a VMM allocation) parked by the tracer. */
typedef struct wire_object {
	uint64_t key; /* names it when it comes back */
	uint64_t va;  /* where it is mapped; 0 if nowhere */
	uint64_t size;
	uint32_t device;
	uint32_t flags; /* WIRE_OBJ_* */
	uint64_t writes; /* calls so far that wrote into it (at park) */
} wire_object;

#define WIRE_OBJ_APP 0x1u /* the application's own cuMemCreate allocation */
/* With WIRE_OBJ_APP: memory another process exported, which this one
 * imported from a POSIX fd. Its size is what its mappings reach (0:
 * mapped nowhere); the object is the owner's, which phosfs finds by the
 * open file of its fd (the file the owner passed, which the owner's
 * WIRE_OBJ_ALIAS or main record holds too). */
#define WIRE_OBJ_IMPORTED 0x2u
/* phosfs's own mark, which tracers ignore: the object is written where
 * no CoW table sees it (another member imports it, or it is host memory
 * the CPU writes), so it is copied in the stall (engine/shared.h). */
#define WIRE_OBJ_SHARED 0x4u
/* With WIRE_OBJ_APP: no object, but an fd the application exported of
 * object `key` (the open file it passed to an importer), given back at
 * unpark. The driver's fds are all one device file: such files are what
 * matches an import to its owner. */
#define WIRE_OBJ_ALIAS 0x8u
/* With WIRE_OBJ_APP: host memory the application made with cuMemCreate
 * (a HOST or HOST_NUMA location, as NCCL makes its host buffers), which
 * a restore must make on the host again; its NUMA node is in bits 16-23
 * (WIRE_OBJ_NUMA), and device is a GPU to copy it with. */
#define WIRE_OBJ_HOST 0x10u
#define WIRE_OBJ_NUMA(flags) (((flags) >> 16) & 0xffu)
/* Without WIRE_OBJ_APP: an object of the tracer's whose fd (this very
 * open file) went to another process through a legacy IPC handle
 * (cuIpcGetMemHandle): its fd, like an APP object's, may name imports. */
#define WIRE_OBJ_EXPORTED 0x20u

/* A GPU as the traced process sees it (its ordinal, and the UUID of the
 * GPU behind it, which a restore onto another GPU changes). The tracer
 * sends every one, in WIRE_DEVICES, when it parks. */
typedef struct wire_device {
	uint32_t ordinal;
	uint32_t reserved;
	uint8_t uuid[16];
} wire_device;

enum wire_buffer_state { WIRE_PRESENT = 0, WIRE_PARKED_STATE = 1, WIRE_ABSENT = 2 };

/* An allocation as the application sees it. */
typedef struct wire_buffer {
	uint64_t va;
	uint64_t size;
	uint32_t device;
	uint32_t state; /* enum wire_buffer_state */
	uint64_t reads;  /* calls that had it in their read set */
	uint64_t writes; /* calls that had it in their write set */
} wire_buffer;

/* A kernel's speculation counters. */
typedef struct wire_kernel {
	uint64_t launches;
	uint64_t reads;         /* buffers in read sets, summed over launches */
	uint64_t writes;        /* buffers in write sets, summed over launches */
	uint64_t bytes_written; /* bytes of those written buffers: whole buffers are the scope */
	uint64_t net_waits;     /* launches held by the CoW safety net */
	int32_t nparams;        /* -1: arguments unseen (no layout) */
	uint32_t name_len;      /* name bytes after the record, then padding to 8 */
} wire_kernel;

/* An NCCL communicator of the process: its name, the same in every rank
 * (0 and WIRE_NCCL_UNNAMED when the tracer did not see it made), its
 * rank and size, and the operations it has issued (a group counts once). */
typedef struct wire_nccl_comm {
	uint64_t id;
	uint64_t count;
	int32_t rank, nranks;
	uint32_t flags;
	uint32_t reserved;
} wire_nccl_comm;
#define WIRE_NCCL_UNNAMED 1u

/* A communicator's target in a cut. */
typedef struct wire_nccl_target {
	uint64_t id;
	uint64_t target;
} wire_nccl_target;

/* PARK's and TRACK's payload: how long the tracer may take to quiesce
 * before it answers ERROR and runs on; and, for PARK, how long it waits
 * for HELD after PARKED. A PARK or TRACK without one waits
 * WIRE_PARK_DEFAULT_MS for each. A payload of the first two fields alone
 * (an older phosfs) has no flags. */
typedef struct wire_park {
	uint32_t timeout_ms;
	uint32_t held_ms;
	uint32_t flags; /* WIRE_PARK_* */
	uint32_t reserved;
} wire_park;
#define WIRE_PARK_DEFAULT_MS 60000
/* PARK of a stop checkpoint of a process whose memory cannot be parked
 * (managed memory, WIRE_HELLO_STOP_ONLY): it quiesces and detaches as
 * for any park, but hands nothing over and keeps its memory mapped, for
 * the driver's checkpoint to save with the process. */
#define WIRE_PARK_KEEP 0x1u

/* WIRE_COW and WIRE_LAZY: the table (fd 0), a pidfd of the copying job (fd 1: it
 * becomes readable when the job ends, whatever pid namespace the process
 * is in) and, if pool_bytes, the shadow pool's device memory (fd 2),
 * exported by phosfs. */
typedef struct wire_cow {
	uint64_t table_bytes;
	uint64_t pool_bytes;
	uint32_t pool_device;
	uint32_t reserved;
} wire_cow;

/* Sends one message with count records of payload and nfds fds.
 * Returns 0 or a negative errno. */
int wire_send(int sock, uint16_t type, const void *payload, uint32_t length, uint32_t count, const int *fds,
	      int nfds);

/* Receives one message into buf (of cap bytes); fds received go to fds
 * (room for WIRE_MAX_FDS), their number in *nfds. Returns 0, -EPROTO
 * (bad magic, version or lengths; fds received are closed), -ECONNRESET
 * (peer gone), or a negative errno. */
int wire_recv(int sock, wire_header *h, void *buf, size_t cap, int *fds, int *nfds);

/* Grows this process's fd table, now, to hold fds numbered up to n (and
 * no more than RLIMIT_NOFILE allows), so that fds received later need no
 * growth: in a process of several threads the kernel waits an RCU grace
 * period at each doubling of the table, milliseconds each. Returns 0 or
 * a negative errno (-EMFILE: no fd was free). */
int wire_fd_room(int n);

/* Sends a request of `type` (no payload) and collects the payloads of the
 * `reply` messages that answer it, until END, into a malloc'd *out (one
 * spare byte past *len). Waits at most timeout_ms for each message (-1:
 * for ever). Fds that come along are closed. Returns 0, -ETIMEDOUT,
 * -EPROTO (another message came), -ENOMEM, or wire_recv's errors; on
 * failure *out is NULL. */
int wire_request(int sock, uint16_t type, uint16_t reply, int timeout_ms, uint8_t **out, size_t *len,
		 uint32_t *count);

/* The socket path: $PHOS_SOCKET or WIRE_SOCKET_DEFAULT. */
const char *wire_socket_path(void);

/* Connects to the socket at path. Returns an fd or a negative errno. */
int wire_connect(const char *path);

/* The resume rendezvous: whoever parked pid (a phosfs job, which may
 * outlive phosfs itself) listens on the abstract socket
 * "phos-resume.<pid>" before waking it, and the woken tracer connects
 * there first, and to the main socket only if nobody listens. Return an
 * fd or a negative errno (-EADDRINUSE: another job holds it). */
int wire_listen_resume(pid_t pid);

/* Wakes the parked tracer of host pid `pid` at its control thread tid,
 * telling it its host pid (the signal's value). Returns 0 or -errno
 * (-ESRCH: gone, -EPERM). */
int wire_wake(pid_t pid, pid_t tid);

/* Accepts a connection on lfd and reads its HELLO (within timeout_ms),
 * checking that the pid it claims is the peer's (SO_PEERCRED): the same,
 * or the peer's pid inside its own pid namespace. *peer, and the HELLO's
 * pid and control_tid, are then the host's. Returns
 * the connection, with the peer in *peer and the state table's fd (or -1)
 * in *state_fd for the caller to close; -EPROTO (no valid HELLO: the
 * connection is closed) or accept's errno. */
int wire_accept_hello(int lfd, int timeout_ms, pid_t *peer, wire_hello *hello, int *state_fd);
int wire_connect_resume(pid_t pid);

#endif
