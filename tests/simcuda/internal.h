/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * simcuda internals shared by its source files. Not a public contract.
 */
#ifndef SIMCUDA_INTERNAL_H
#define SIMCUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cuda.h>

#include "simcuda.h"

#define SC_EXPORT __attribute__((visibility("default")))

/* Exports a legacy entry point whose name cuda.h macro-renames to a newer
 * version (cuDeviceGetUuid -> cuDeviceGetUuid_v2): cname is its C name,
 * sym the exported symbol. */
#define SC_LEGACY(cname, sym, params) \
	SC_EXPORT CUresult cname params __asm__(sym); \
	CUresult cname params

/* The emulated devices: $SIMCUDA_DEVICES of them (1 to SC_DEVICE_MAX;
 * default 1), each with an H200's figures. */
#define SC_DEVICE_MAX 8
/* Each device's memory: an H200's 143771 MiB, or $SIMCUDA_MEMORY_MIB,
 * which also makes it the machine's (machine-memory.c). */
#define SC_TOTAL_MEM sc_total_mem()
uint64_t sc_total_mem(void);
/* machine-memory.c: whether $SIMCUDA_MEMORY_MIB makes device memory the
 * machine's, counted across processes; the tag its memfds' names end
 * with; and the bytes every process of the machine holds (a scan of
 * /proc). */
bool sc_machine_memory(void);
const char *sc_machine_tag(void);
uint64_t sc_machine_used(void);
#define SC_GRANULARITY (2ull << 20)
#define SC_DRIVER_VERSION 13000

/* log.c: one line on stderr, prefixed "simcuda: ". */
void sc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
CUresult sc_unsupported(const char *call);

/* device.c */
bool sc_initialized(void);
CUresult sc_check_init(void);
CUresult sc_check_device(CUdevice dev);
/* How many devices this process has. */
int sc_device_count(void);
/* Device dev as this process sees it: its name and UUID. These are the
 * machine's device of that ordinal, or after a restore that moved it
 * (gpuPairs), the device it was moved to. */
const char *sc_device_name(CUdevice dev);
void sc_device_uuid(CUdevice dev, CUuuid *u);
/* This process's device whose UUID is u, or -1. */
int sc_device_of_uuid(const CUuuid *u);
/* Moves this process's device dev onto the GPU (uuid, name). */
void sc_device_move(CUdevice dev, const CUuuid *uuid, const char *name);
/* context.c: whether the process has made a context on dev. */
bool sc_ctx_device_used(CUdevice dev);

/* gate.c: every API call that touches device state enters the gate, which
 * cuCheckpointProcessLock closes. Entry blocks while it is closed. */
void sc_gate_enter(void);
void sc_gate_leave(int *token);
#define SC_API()                                                              \
	__attribute__((cleanup(sc_gate_leave))) int sc_gate_token_ = 0;       \
	(void)sc_gate_token_;                                                 \
	sc_gate_enter()
/* Closes the gate and waits for calls in flight and queued stream work;
 * returns false on timeout (ms, 0 = none) with the gate open again. */
bool sc_gate_close(unsigned timeout_ms);
void sc_gate_open(void);

/* memory.c */
uint64_t sc_mem_physical_bytes(void);
/* Checks that [p, p+n) is device memory that is mapped. */
bool sc_mem_is_device(uintptr_t p, size_t n);
/* Legacy IPC of cuMemAlloc memory at dptr: the memfd its bytes live in
 * from now on (the range's own: not to be closed), its size and device.
 * CUDA_ERROR_INVALID_VALUE: no cuMemAlloc memory of this process there. */
CUresult sc_mem_ipc_export(uintptr_t dptr, int *fd, size_t *size, CUdevice *dev);
/* Maps another process's memfd fd (size bytes) as device memory of the
 * current device; the same one again gives the same address. */
CUresult sc_mem_ipc_import(int fd, size_t size, uintptr_t *va);
/* Closes an opened mapping at va (at its last close). */
CUresult sc_mem_ipc_close(uintptr_t va);
/* How many other processes' memories this one maps through IPC. */
int sc_mem_ipc_imports(void);
/* How many managed allocations (cuMemAllocManaged) it holds. */
int sc_mem_managed(void);
/* fork(): the memory tables are held across it; in the child, device
 * memory is no longer reachable (as the UVM driver disables a forked
 * child's mappings) and physical allocations are no longer held. */
void sc_mem_fork_prepare(void);
void sc_mem_fork_parent(void);
void sc_mem_fork_child(void);

/* context.c */
typedef struct sc_ctx {
	CUdevice dev;
	unsigned flags;
	bool primary;
	int refs; /* retains of a primary context */
	unsigned long long id;
	size_t limits[3]; /* stack, printf FIFO, malloc heap; 0: the default */
	struct sc_ctx *next; /* the list of created contexts (ctx_lock) */
} sc_ctx;
/* The threads one context's local memory serves: an H200's 132 SMs of
 * 2048 threads, each with CU_LIMIT_STACK_SIZE bytes. */
#define SC_LOCAL_THREADS (132u * 2048u)
CUresult sc_ctx_require(void);
/* The local memory (stack limit x SC_LOCAL_THREADS) of every live
 * context: device memory the driver's checkpoint copies too. */
uint64_t sc_ctx_local_bytes(void);
CUcontext sc_ctx_current(void);
/* Whether device from's contexts may reach device owner's cuMemAlloc
 * memory: the same device, or peer access enabled from one to the other. */
bool sc_ctx_peer_enabled(CUdevice from, CUdevice owner);

/* stream.c: asynchronous work. A task runs on the stream's worker thread,
 * in FIFO order with the stream's other tasks. */
typedef void (*sc_task_fn)(void *arg);
CUresult sc_stream_submit(CUstream s, sc_task_fn fn, void *arg, size_t arg_size);
/* Waits until every stream's queue is empty. */
void sc_streams_drain(void);
/* The same, until deadline (CLOCK_REALTIME; NULL: for ever); false when
 * work was still queued or running then. */
bool sc_streams_drain_until(const struct timespec *deadline);

/* An interprocess event's memfd (the event's own: not to be closed);
 * CUDA_ERROR_INVALID_VALUE for an event made without
 * CU_EVENT_INTERPROCESS. */
CUresult sc_event_ipc_fd(CUevent e, int *fd);
/* An event over another process's interprocess event, from its memfd fd
 * (the event's from then on). */
CUresult sc_event_ipc_open(int fd, CUevent *e);

/* module.c */
void sc_kernels_load_plugins(void);

/* checkpoint.c */
void sc_checkpoint_start_server(void);
/* In a forked child: the parent's control socket is closed; the child is
 * no CUDA process to the checkpoint API. */
void sc_checkpoint_fork_child(void);

#endif
