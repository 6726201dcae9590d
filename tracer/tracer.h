/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libphos.so internals: the contract between the tracer's files.
 *
 * The tracer is preloaded into an unmodified GPU process. It wraps driver
 * entry points (however the application finds them: by linking, by dlsym,
 * or through cuGetProcAddress), keeps tables of what the application
 * allocated and loaded, speculates what each call reads and writes, and
 * serves phosfs's requests on a control thread.
 *
 * Functions return CUresult where they stand in for a driver call, and 0
 * or a negative errno otherwise.
 */
#ifndef PHOS_TRACER_H
#define PHOS_TRACER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "../common/cow.h"
#include "../common/cubin.h"
#include "../common/wire.h"

#define TR_EXPORT __attribute__((visibility("default")))

/* log.c: "phos: " lines on stderr. tr_debug only with PHOS_DEBUG=1. */
void tr_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tr_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool tr_enabled(void); /* PHOS_TRACE is not 0 */
/* Whether environment variable name is set and not "0" (unset: unset). */
bool tr_env_on(const char *name, bool unset);

/* hooks.c: the real driver. tr_real resolves a symbol of libcuda.so.1
 * (loading it if needed); NULL if it has none. REAL(sym) caches it. */
void *tr_real(const char *sym);
/* glibc's dlsym, past the override. */
void *tr_dlsym_real(void *handle, const char *sym);
/* The next definition of sym after libphos.so (RTLD_NEXT), or NULL. */
void *tr_real_next(const char *sym);
#define REAL(ret, sym, params)                                                   \
	static ret(*real_##sym) params;                                         \
	if (!real_##sym)                                                        \
		*(void **)&real_##sym = tr_real(#sym);

/* gate.c: every wrapped call that acts on the device enters the gate. The
 * fast path takes no lock. GATE() enters for the rest of the scope. */
void gate_enter(const char *what); /* what: the call, named when quiesce waits for it */
void gate_leave(void);
static inline void gate_cleanup(int *unused)
{
	(void)unused;
	gate_leave();
}
#define GATE()                                                                  \
	__attribute__((cleanup(gate_cleanup))) int gate_scope_ = (gate_enter(__func__), 0); \
	(void)gate_scope_
/* A wrapper of entry point `name` that passes the gate and runs `before`
 * (protecting what the call writes) ahead of the real call. */
#define TR_WRAP(name, params, args, before)      \
	TR_EXPORT CUresult name params;          \
	TR_EXPORT CUresult name params           \
	{                                        \
		REAL(CUresult, name, params);    \
		if (!tr_enabled())               \
			return real_##name args; \
		GATE();                          \
		before;                          \
		return real_##name args;         \
	}
/* Closes the gate and waits until no call is in flight; then synchronises
 * every context; all within timeout_ms. Threads arriving meanwhile wait at
 * the gate, which stays closed either way. Returns 0; -ETIMEDOUT (why
 * names the thread and the call it is inside, or says the device did not
 * finish) or -EIO (the synchronisation failed, said in why). */
int gate_quiesce(int timeout_ms, char *why, size_t len);
/* Opens the gate; waiting threads pass in the order they arrived. */
void gate_resume(void);
bool gate_closed(void);
/* Calls the gate has let through since the process started. */
uint64_t gate_passed(void);

/* context.c: contexts the process made current or created, to synchronise. */
void ctx_note(CUcontext ctx);
/* Synchronises every context, on a thread of its own, waiting for it
 * until deadline (CLOCK_MONOTONIC ns). Returns 0; -ETIMEDOUT or -EIO,
 * with why said in why. A synchronisation given up on ends later. */
int ctx_synchronize_until(uint64_t deadline, char *why, size_t len);
/* Device dev's primary context, retained once for the life of the process
 * (for peer copies the tracer makes); NULL if the driver refuses it. */
CUcontext ctx_primary(CUdevice dev);
/* Lowers the stack limit (CU_LIMIT_STACK_SIZE) of every context to 0,
 * keeping the old values: the local memory it sizes is device memory the
 * driver's checkpoint would save and restore (half of a bare context's).
 * Only while quiesced, by the control thread; PHOS_STACK_SHRINK=0 turns it
 * off. Returns how many contexts it lowered; a refusal is logged. */
int ctx_stack_shrink(void);
/* Sets back the limits ctx_stack_shrink lowered (a failure is logged: the
 * driver grows the stack again for a kernel that needs it). */
void ctx_stack_restore(void);

/* alloc.c: device memory. Every allocation the application asks for is a
 * VMM allocation the tracer made with a POSIX fd handle type (an "object"),
 * or a piece of a slab object for small ones (a "buffer"). */
typedef struct buffer_ref {
	uint32_t id; /* index in the buffer table */
	uint64_t va, size;
} buffer_ref;
CUresult alloc_device(CUdeviceptr *dptr, size_t bytes);
/* Frees an allocation alloc_device made. CUDA_ERROR_NOT_FOUND: dptr is
 * none of them (managed memory, say), for the driver to free;
 * CUDA_ERROR_INVALID_VALUE: it is a mapping of the application's. */
CUresult alloc_free(CUdeviceptr dptr);
/* Peer access from device `from` to device owner's memory was enabled (on)
 * or disabled: every object of owner's is opened to from, or closed, now
 * and whenever it is mapped again (as peer access does for cuMemAlloc
 * memory). CUDA_ERROR_INVALID_DEVICE for ordinals out of range or equal;
 * otherwise cuMemSetAccess's first error. */
CUresult alloc_peer_access(CUdevice from, CUdevice owner, bool on);
/* Finds the buffer containing addr; false if none. */
bool alloc_find(uint64_t addr, buffer_ref *out);
/* Whether buffer id is an allocation the tracer made (not a mapping of
 * the application's own VMM memory). */
bool alloc_owned(uint32_t id);
/* The object of the allocation at addr (one the tracer made), for a
 * legacy IPC handle: its key (VA) and size, where the allocation begins
 * in it, and its device. Errors: -ENOENT (no allocation of the
 * tracer's there). */
int alloc_ipc_of(uint64_t addr, uint64_t *key, uint64_t *size, uint64_t *offset, CUdevice *dev);
/* An fd of object key (of size bytes) for another process, always the
 * same open file (that object's from then on: see object.shared), into
 * *fd, the caller's. Errors: -ENOENT (no such object), -EAGAIN (it is
 * parked, or not back yet), -EIO (the driver would not export it), dup's
 * errno. */
int alloc_share(uint64_t key, uint64_t size, int *fd);
/* Whether a copy of n bytes from src to dst, both ours, goes between two
 * devices of which the current one cannot access both: the driver copies
 * cuMemAlloc memory across devices without peer access, but a plain copy
 * cannot reach VMM memory not opened to its device, so such a copy must be
 * made a peer copy. Their devices in *dst_dev and *src_dev. */
bool alloc_cross(uint64_t dst, uint64_t src, size_t n, CUdevice *dst_dev, CUdevice *src_dev);
/* Counts a read or a write of buffer id by one call. */
void alloc_count(uint32_t id, bool read, bool write);
/* Copies out the buffer table; the caller frees *out. */
int alloc_list(wire_buffer **out, size_t *n);
/* The application's own mappings (vmm.c) are buffers too, for speculation
 * and for phosfs; they have no object of the tracer's. */
int alloc_add_mapping(uint64_t va, uint64_t size, uint32_t device);
/* Drops the mapping buffers lying within [va, va+size). */
void alloc_remove_mappings(uint64_t va, uint64_t size);
/* Marks the process stop-only: reason, a sentence for phosfs and the log,
 * and what, a short phrase for the state table (common/state.h). */
void alloc_mark_stop_only(const char *what, const char *reason);
/* Whether the process cannot be parked, and why (copied into why). */
bool alloc_stop_only(char *why, size_t n);
/* Exports every object's fd and gives records+fds to emit in batches,
 * in the order of last use; the objects stay mapped. A park's first step
 * (the gate is closed), and a recopy's tracking (the process runs on).
 * Errors: those of emit, -EIO (an export failed), errno of dup. */
typedef int (*alloc_emit_fn)(const wire_object *objs, const int *fds, int n, void *arg);
int alloc_export(alloc_emit_fn emit, void *arg);
/* A park's second step, once phosfs holds every fd: unmaps and releases
 * every object. */
void alloc_release(void);

/* batch.c: objects go to emit in batches; each fd added is the batch's, and
 * is closed once sent (or, after an error, not sent). */
#define OBJ_BATCH 64
typedef struct obj_batch {
	wire_object recs[OBJ_BATCH];
	int fds[OBJ_BATCH];
	int n, err;
	alloc_emit_fn emit;
	void *arg;
} obj_batch;
void batch_init(obj_batch *b, alloc_emit_fn emit, void *arg);
void batch_add(obj_batch *b, const wire_object *rec, int fd);
/* Sends what is left; returns the first error of emit. */
int batch_finish(obj_batch *b);
/* Unpark: maps the given fds at their objects' VAs again. */
int alloc_unpark(const wire_object *objs, const int *fds, int n);
/* A lazy restore: maps objects that arrive while the process runs at
 * their VAs; one the application freed meanwhile (or whose VA now holds
 * another object) is skipped, its fd not kept. Errors: -EIO (the driver
 * refused an import or a map; the rest are still mapped). */
int alloc_arrive(const wire_object *objs, const int *fds, int n);
/* In a forked child: closes the fds kept for the next park (they would
 * keep the parent's device memory alive), without taking the lock. */
void alloc_forget_fds(void);
bool alloc_parked(void);
/* Describes the first object still parked into what. */
void alloc_missing(char *what, size_t n);
/* Live buffers and objects, for the debug summary. */
void alloc_stats(uint64_t *buffers, uint64_t *objects, uint64_t *bytes);

/* vmm.c: appends v (of size bytes) to the array *arr (*n of *cap
 * elements), growing it; false when out of memory (nothing appended). */
bool tr_push(void *arr, uint32_t *n, uint32_t *cap, const void *v, size_t size);

/* vmm.c: the application's own VMM allocations. The wrappers of the VMM
 * calls go through these, which translate the application's handles. */
void vmm_created(CUmemGenericAllocationHandle h, uint64_t size, CUmemLocation where);
CUmemGenericAllocationHandle vmm_current(CUmemGenericAllocationHandle app);
CUresult vmm_release(CUmemGenericAllocationHandle app);
CUresult vmm_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle app,
		 unsigned long long flags);
CUresult vmm_unmap(CUdeviceptr va, size_t size);
void vmm_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult vmm_retain(CUmemGenericAllocationHandle *out, void *addr);
/* Park (export, then let go) and unpark, as alloc_export, alloc_release
 * and alloc_unpark, for these; their records carry WIRE_OBJ_APP. */
int vmm_export(alloc_emit_fn emit, void *arg);
void vmm_let_go(void);
int vmm_unpark(const wire_object *objs, const int *fds, int n);
/* Memory another process exported, as the application imports it
 * (cuMemImportFromShareableHandle, then cuMemMap) or opens it
 * (cuIpcOpenMemHandle; open false: closed). An import from a POSIX fd of
 * device memory is kept (a dup of os) and parked like the application's
 * own handles, its records carrying WIRE_OBJ_IMPORTED too; any other is
 * noted, and vmm_shared says whether any of it is mapped now, and why
 * that stops a park (into why). */
void vmm_imported(CUmemGenericAllocationHandle h, CUmemAllocationHandleType type, void *os);
/* The application exported its handle app as POSIX fd fd: a dup is kept,
 * which names the memory to phosfs as the importer's fd does. */
void vmm_exported(CUmemGenericAllocationHandle app, int fd);
void vmm_ipc_opened(CUdeviceptr va, bool open);
bool vmm_shared(char *why, size_t n);
/* As alloc_forget_fds, for the application's own handles. */
void vmm_forget_fds(void);
bool vmm_parked(void);
/* Whether a handle is still parked; describes the first into what. */
bool vmm_missing(char *what, size_t n);

/* ipc.c: legacy CUDA IPC between traced processes, with handles of the
 * tracer's own (the driver gives none for VMM memory). */
/* A handle of the allocation at dptr (one the tracer made), served to
 * other processes from then on. CUDA_ERROR_NOT_FOUND: no allocation of
 * the tracer's there (the driver's to answer); CUDA_ERROR_INVALID_VALUE:
 * out is NULL; CUDA_ERROR_OPERATING_SYSTEM: it cannot be served (said in
 * the log). */
CUresult ipc_get(CUipcMemHandle *out, CUdeviceptr dptr);
/* Whether h is one of the tracer's handles (else the driver's). */
bool ipc_is_ours(const CUipcMemHandle *h);
/* Opens a handle of the tracer's: maps its object, fetched from its
 * exporter, as an import (vmm.c), and gives where the allocation begins;
 * an open handle again gives the same address. CUDA_ERROR_INVALID_CONTEXT:
 * it is this process's own (as the driver answers);
 * CUDA_ERROR_INVALID_VALUE or _INVALID_HANDLE: its exporter did not give
 * it (said in the log); the driver's errors of the mapping. */
CUresult ipc_open(CUdeviceptr *dptr, const CUipcMemHandle *h);
/* Closes an open handle's mapping at dptr (at its last close); *mine:
 * dptr was one (else it is the driver's). */
CUresult ipc_close(CUdeviceptr dptr, bool *mine);
/* A park lets go of the memory: stop serving handles (the socket
 * closes); and serve again at unpark. */
void ipc_park(void);
void ipc_unpark(void);
/* In a forked child: the parent's server is not its own. */
void ipc_forget(void);

/* module.c: modules, libraries and their functions. */
/* PARAM_PTR_INDIRECT: a pointer to pointers (T**): what it points to
 * points further, where speculation cannot follow. */
typedef enum { PARAM_SCALAR, PARAM_PTR_CONST, PARAM_PTR_MUT, PARAM_UNKNOWN, PARAM_PTR_INDIRECT } param_kind;
typedef struct kernel_info {
	char *name;
	int nparams; /* -1: layout unknown */
	/* It writes memory its arguments do not point to: NCCL's kernels
	 * reach their peers' buffers through the communicator. */
	bool indirect;
	cubin_param params[CUBIN_MAX_PARAMS];
	param_kind kinds[CUBIN_MAX_PARAMS];
	/* Counters, updated with relaxed atomics. */
	atomic_uint_fast64_t launches, reads, writes, bytes_written;
	atomic_uint_fast64_t net_waits; /* launches the CoW safety net held */
} kernel_info;
void module_loaded(void *module, const void *image, size_t size);
void module_unloaded(void *module);
/* Records that fn, a function handle or (is_kernel) a kernel handle, is
 * kernel `name` of module (or of library). */
void module_function(void *module, void *fn, const char *name, bool is_kernel);
/* The information of a launched function (found or built on first use). */
kernel_info *module_kernel(CUfunction fn);
/* Calls emit with batches of wire_kernel records (with their names) of
 * every kernel known; returns emit's first error. */
typedef int (*module_emit_fn)(const void *payload, uint32_t len, uint32_t count, void *arg);
int module_list(module_emit_fn emit, void *arg);
/* Kernels known, those with a parameter layout, and launches. */
void module_stats(uint64_t *kernels, uint64_t *with_layout, uint64_t *launches);

/* demangle.c: what each parameter of a kernel is, from its mangled name.
 * Returns the number of parameters, or -1 if the name is not understood. */
int demangle_params(const char *mangled, param_kind *kinds, int max);

/* spec.c: the read and write sets of calls. Each is counted, and while a
 * CoW copy runs, the chunks written are protected (cow.c) before the call
 * goes on stream s. A launch whose write set cannot be bounded (no
 * layout, or a T** parameter) goes through the safety net. */
void spec_launch(kernel_info *k, void **params, void **extra, CUstream s);
void spec_range(uint64_t addr, size_t len, bool read, bool write, CUstream s);
/* The safety net of a call whose read or write set cannot be bounded
 * (kernel k, or NULL): it waits until a lazy restore has brought every
 * object back, and until a CoW copy has every t1 byte off the GPU. */
void spec_net(kernel_info *k);

/* The stream a call of entry point `name` runs on: s, or for a call given
 * none, the default stream that entry point uses (the per-thread one for
 * the _ptsz and _ptds variants). name is a literal, so this folds away. */
static inline CUstream tr_stream_of(const char *name, CUstream s)
{
	size_t n = __builtin_strlen(name);
	bool per_thread = n > 5 && (!__builtin_strcmp(name + n - 5, "_ptsz") || !__builtin_strcmp(name + n - 5, "_ptds"));
	return s ? s : per_thread ? CU_STREAM_PER_THREAD : NULL;
}

/* table.c: what cow.c and lazy.c share. A table a job handed this
 * process (common/cow.h), and what guards it. */
typedef struct tr_table {
	/* Readers: calls that look the table up; writer: begin and drop. */
	pthread_rwlock_t lock;
	/* Read without the lock on the fast path; the mapping lives until
	 * table_drop_locked, under the lock held for writing, so a reader
	 * holding it for reading may use the table. */
	_Atomic(cow_header *) t;
	uint64_t bytes; /* guarded by lock: the mapping's size */
	int job_fd;     /* guarded by lock: a pidfd of the job, readable once it ended */
} tr_table;
#define TR_TABLE_INIT { .lock = PTHREAD_RWLOCK_INITIALIZER, .t = NULL, .bytes = 0, .job_fd = -1 }
/* CLOCK_MONOTONIC, in ns. */
uint64_t table_now_ns(void);
/* The table moved on: its progress counter goes up, and waiters wake. */
void table_bump(cow_header *t);
/* Sleeps until t's progress moves from seen, or a slice (50 ms) passes. */
void table_wait(cow_header *t, uint32_t seen);
/* Maps the table of c from fd, and checks its magic and version. Errors:
 * -EPROTO (too small, or not a table of this version), errno of mmap. */
int table_map(const wire_cow *c, int fd, cow_header **out);
/* Holds t (bytes long) in tb, with a copy of the job's pidfd; tb's lock
 * held for writing. */
void table_hold(tr_table *tb, cow_header *t, uint64_t bytes, int job_fd);
/* Whether t's job is gone (its pidfd is readable) and was still marked
 * active: then it is marked ended, waiters wake, and the log says
 * "WHAT (phosfs job N) is gone: SO". tb's lock held for reading. */
bool table_job_gone(tr_table *tb, cow_header *t, const char *what, const char *so);
/* The first object of t that ends above addr (objects sorted by VA). */
uint32_t table_first_above(const cow_header *t, uint64_t addr);
/* The application freed or unmapped [va, va+size): the objects there are
 * marked freed, and waiters wake. */
void table_freed(tr_table *tb, uint64_t va, uint64_t size);
/* The table leaves tb: calls see none from here on (they look without
 * the lock), though it is still mapped. Returns it, or NULL. tb's lock
 * held for writing. */
cow_header *table_take_locked(tr_table *tb);
/* Unmaps t (taken from tb) and closes the job's pidfd. */
void table_unmap(tr_table *tb, cow_header *t);
/* Both: takes tb's table and unmaps it; tb's lock held for writing, or
 * in a forked child, where no other thread runs. */
void table_drop_locked(tr_table *tb);

/* cow.c: copy-on-write while phosfs copies the t1 memory (common/cow.h). */
/* Maps the table (fds[0]) and the shadow pool (fds[1]) of WIRE_COW and
 * starts protecting; called before the gate opens. Errors: -EPROTO (a
 * bad table), errno of mmap. A pool that cannot be mapped is not an
 * error: writes then wait for the copy. */
int cow_begin(const wire_cow *c, const int *fds, int nfds);
bool cow_active(void);
/* Makes the t1 bytes of [addr, addr+len) safe from a write queued next
 * on stream s: shadows them, or waits. */
void cow_before_write(uint64_t addr, uint64_t len, CUstream s);
/* The safety net: waits until every t1 byte is off the GPU; counts the
 * wait for kernel k (NULL: not a kernel). */
void cow_net(kernel_info *k);
/* Whether a TRACK table (a recopy) is mapped and tracking. */
bool cow_tracking(void);
/* Ends tracking (the gate is closed: no write is queued any more) and
 * waits for the reaper to drop the table. Returns 0, -EBUSY. */
int cow_track_end(void);
/* The application freed or unmapped [va, va+size): the t1 objects there
 * are no longer written through those addresses. */
void cow_freed(uint64_t va, uint64_t size);
/* After an allocation failed with CUDA_ERROR_OUT_OF_MEMORY: where a CoW
 * copy holds a shadow pool, waits until every t1 byte is off the GPU and
 * the pool is let go of; within a short grace after that, waits a
 * moment. Whether the allocation should be tried again (*until, 0 at the
 * first try, keeps the grace's end between tries). */
bool cow_oom_wait(uint64_t *until);
/* Counts the application's host transfers in flight, for the copier. */
void cow_transfer(int delta);
/* Before a park: drops an ended copy's table and pool (after any shadow
 * copy still queued). -EBUSY while a copy still runs. */
int cow_settle(void);
/* In a forked child: forgets the parent's copy. */
void cow_forget(void);

/* lazy.c: a lazy restore's objects, back while the process runs (common/cow.h). */
/* Maps the LAZY table (fds[0]) of WIRE_LAZY, with the job's pidfd
 * (fds[1]); called before the gate opens. Errors: -EPROTO (a bad table),
 * -EBUSY (a fill is still going on), errno of mmap. */
int lazy_begin(const wire_cow *c, const int *fds, int nfds);
bool lazy_active(void);
/* Returns once every object of [addr, addr+len) is back (mapped again),
 * asking the job for it first; at once when none is missing. */
void lazy_need(uint64_t addr, uint64_t len);
/* The safety net: returns once every object is back; counts the wait for
 * kernel k (NULL: not a kernel). */
void lazy_net(kernel_info *k);
/* The objects of recs arrived and were mapped (or were freed meanwhile):
 * calls waiting for them go on. */
void lazy_arrived(const wire_object *recs, int n);
/* The application freed [va, va+size): objects there need not come back. */
void lazy_freed(uint64_t va, uint64_t size);
/* The fill ended (END, or the job's connection is gone): drops the table;
 * calls still waiting go on. */
void lazy_end(void);
/* In a forked child: forgets the parent's restore. */
void lazy_forget(void);

/* state.c: the state table shared with phosfs (common/state.h). */
/* Makes the table and fills it; returns its fd (owned by state.c) or a
 * negative errno. Called by the control thread. */
int state_open(void);
/* Unmaps and closes it (at park, and in a forked child, which drops the
 * parent's table). Takes no lock. */
void state_close(void);
/* Mirrors a buffer; returns its slot, or -1 if not mirrored. Called with
 * the allocation lock held. */
int state_add(uint64_t va, uint64_t size, uint32_t device, uint32_t state);
void state_remove(int slot);
void state_set(int slot, uint32_t state);
/* Counts the application's host transfers in flight (+1 before, -1 after). */
void state_transfer(int delta);
/* Marks the table STATE_STOP_ONLY, saying what (a short phrase); called
 * with the allocation lock held. */
void state_stop_only(const char *what);
/* alloc.c: takes the allocation lock, publishes a new table (state_publish)
 * and puts every live buffer into it. */
struct state_header;
void alloc_state_fill(struct state_header *t, int fd);
void state_publish(struct state_header *t, int fd);

/* control.c: the channel to phosfs and the park/unpark protocol. */
void control_start(void);

/* nccl.c: NCCL, interposed. nccl_note_real: the application's function
 * name, as dlsym found it in the library it asked (a dlopen'd NCCL).
 * nccl_list: the communicators and their counts, malloc'd into *out (*n
 * of them); -ENOMEM. */
void nccl_note_real(const char *name, void *fn);
int nccl_list(wire_nccl_comm **out, size_t *n);
/* The cut: holds every NCCL operation back, and lists the counts as
 * nccl_list. Errors: -ENOMEM (the cut is on all the same). */
int nccl_cut_begin(wire_nccl_comm **out, size_t *n);
/* Lets each communicator named in t (n) run up to its target, and waits
 * until all have, until deadline (CLOCK_MONOTONIC ns). Errors:
 * -ETIMEDOUT, why saying which communicator is short. */
int nccl_cut_reach(const wire_nccl_target *t, size_t n, uint64_t deadline, char *why, size_t len);
/* Ends the cut (if any): held operations go on. */
void nccl_cut_end(void);
/* In a forked child: the NCCL calls in flight were the parent's threads'
 * (only the forking thread's group goes on here), and no cut holds. */
void nccl_forked(void);

#endif
