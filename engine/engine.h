/*
 * engine: the checkpoint protocols, run inside phosfs.
 *
 * The engine talks to a traced process over the wire (common/wire.h), to
 * the CUDA driver through its own context (driver.c), to CRIU by running
 * it (criu.c), and writes images with libphosimg. It knows nothing of the
 * file system or of the registry: the caller hands it a connection, and a
 * way to wait for the process to connect again (engine_tracer).
 *
 * Functions return 0 or a negative errno. Where they fail for a reason a
 * person should read, they also fill `err` (a sentence without the
 * trailing period, e.g. "criu dump failed: …").
 */
#ifndef PHOS_ENGINE_H
#define PHOS_ENGINE_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "../common/cow.h"
#include "../common/wire.h"
#include "../image-format/phosimg.h"

#define ENGINE_ERR_MAX 512
#define ENGINE_CHUNK (4u << 20)          /* default staging, CoW and image chunk size */
#define ENGINE_FILL_THREADS 16           /* threads that fill device memory on restore, at most one a usable CPU */
#define ENGINE_FILL_THREADS_MAX 64
#define ENGINE_SERVED_MAX 64             /* processes whose tracers a restore tells phosfs of */
#define ENGINE_STAGING (4ull << 30)      /* default host staging pool */
#define ENGINE_SHADOW_POOL (2ull << 30)  /* default CoW shadow pool, per process */
#define ENGINE_WRITERS 8                 /* threads, and data files, writing an image */

/* Where a job is; shown in status. */
enum engine_step {
	STEP_IDLE = 0,
	STEP_PARK,
	STEP_LOCK,
	STEP_DUMP,
	STEP_COPY,
	STEP_UNLOCK,
	STEP_UNPARK,
	STEP_PUBLISH,
	STEP_FILL,    /* restore: device memory from the image */
	STEP_RESTORE, /* restore: criu restore */
	STEP_DRAIN,   /* stop: staged memory written into the image, the process running */
	STEP_TRACK,   /* recopy: memory copied while the process runs, its writes tracked */
	STEP_LAZY,    /* lazy restore: device memory filled while the process runs */
	STEP_PREPARE, /* restore: the image opened, this machine's GPUs matched to its */
	STEP_PIDWAIT, /* restore: waiting for the image's pids to be free */
	STEP_DONE,
};

/* Name of a step, for status. */
const char *engine_step_name(int step);

/* A job's progress, read by status while the job writes it. */
typedef struct engine_progress {
	_Atomic int step;        /* enum engine_step */
	_Atomic uint64_t done;   /* bytes of device memory copied */
	_Atomic uint64_t total;  /* bytes to copy */
	_Atomic uint64_t stall_ns; /* the process was stopped this long */
	_Atomic bool cancel;     /* asked to stop early */
	/* Nanoseconds spent in each step so far, and when the current one
	 * began (CLOCK_MONOTONIC); kept by engine_step. */
	_Atomic uint64_t step_ns[STEP_DONE];
	_Atomic uint64_t step_at;
	/* A checkpoint's unpublished gpu.data, and how many bytes at its start
	 * are final (phosimg_writer_data_ready), for readers of the image
	 * while it is written. data_ready is 0 until data_path is set. */
	char data_path[PATH_MAX];
	_Atomic uint64_t data_ready;
	_Atomic uint32_t data_files; /* gpu.data and gpu.data.1, … of the image */
	/* Bytes of device memory whose t1 contents are off the GPU (in
	 * staging or in the image): `done` counts those in the image. */
	_Atomic uint64_t off;
	/* Nanoseconds from t1 until the last t1 byte left the GPU, and until
	 * the image was published; 0 until then. */
	_Atomic uint64_t off_ns, publish_ns;
	/* CoW: shadow copies the tracer made, calls that waited for the copy
	 * (and how long), and calls the safety net held. */
	_Atomic uint64_t shadows, shadow_bytes, waits, wait_ns, net_waits, net_wait_ns;
	_Atomic int protocol; /* PHOSIMG_PROTO_* of the checkpoint */
	_Atomic uint64_t staging_bytes; /* the host staging pool of the copy */
	_Atomic uint64_t staging_pin_ns; /* the time pinning it took (before the stall) */
	/* Recopy: bytes the final stall took from the copy made while the
	 * process ran, and bytes it copied from the GPU (dirty or new). */
	_Atomic uint64_t recopy_clean, recopy_dirty;
	/* Restore: the moves of GPUs it made ("" for none), set before the
	 * driver restore. */
	char devices[512];
	/* Restore: lazy (the tree ran before its device memory was back);
	 * nanoseconds from the start until the tree ran, and until all its
	 * memory was back (0 until then); objects filled because a call
	 * waited for them. A lazy restore's waits are counted in waits and
	 * wait_ns (calls that waited for their buffers), net_waits and
	 * net_wait_ns (calls that waited for everything). */
	_Atomic bool lazy;
	_Atomic uint64_t resume_ns, full_ns, on_demand;
	/* Restore with CPU pages lazy too: nanoseconds from the start until
	 * CRIU's lazy-pages daemon had every page back (0 until then). */
	_Atomic bool lazy_pages;
	_Atomic uint64_t pages_ns;
	/* The fill's workers, summed: nanoseconds reading (and checking) the
	 * image, queueing copies to the device, and waiting for a copy to end
	 * before its buffer is read into again. */
	_Atomic uint64_t fill_read_ns, fill_queue_ns, fill_wait_ns;
} engine_progress;

/* Clock c now, in nanoseconds. */
static inline uint64_t engine_clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The monotonic clock now, in nanoseconds: what jobs time their steps,
 * copies and waits with. */
static inline uint64_t engine_now_ns(void)
{
	return engine_clock_ns(CLOCK_MONOTONIC);
}

/* The moment ms from now on the realtime clock, as
 * pthread_cond_timedwait takes it. */
static inline struct timespec engine_deadline(int ms)
{
	uint64_t t = engine_clock_ns(CLOCK_REALTIME) + (uint64_t)ms * 1000000u;
	return (struct timespec){ .tv_sec = (time_t)(t / 1000000000u), .tv_nsec = (long)(t % 1000000000u) };
}

/* Moves p to step, adding the time since the last move to the step it
 * leaves. STEP_DONE ends the accounting. */
void engine_step(engine_progress *p, int step);

/* The parked memory of the processes of a tree: records, the fds that
 * hold them, and the process each belongs to. One process's objects are
 * consecutive. */
typedef struct engine_parked {
	wire_object *objs;
	int *fds;
	pid_t *pids;
	int n, cap;
	/* engine_park: the process's GPUs as it sees them (WIRE_DEVICES):
	 * ndev UUIDs, by ordinal; 0 when its tracer did not say. */
	uint32_t ndev;
	uint8_t dev_uuid[PHOSIMG_DEVICES_MAX][16];
} engine_parked;

/* Closes the fds and frees the arrays. */
void engine_parked_free(engine_parked *p);

/* Appends n objects of process pid; the fds are then p's. Errors:
 * -ENOMEM (nothing appended, the fds still the caller's). */
int engine_parked_add(engine_parked *p, const wire_object *objs, const int *fds, pid_t pid, int n);

/* Moves every object of from to the end of to (from is left empty).
 * Errors: -ENOMEM (nothing moved). */
int engine_parked_move(engine_parked *to, engine_parked *from);

/* The run of pid's objects in all, as a view into its arrays (not to be
 * freed); empty if pid has none. */
engine_parked engine_parked_of(const engine_parked *all, pid_t pid);

/* A traced process of a tree: its connection, on which the engine sends
 * PARK, and the thread WIRE_WAKE_SIGNAL goes to. */
typedef struct engine_traced {
	pid_t pid;
	int conn;
	pid_t control_tid;
} engine_traced;

/* How the engine meets a woken tracer again, one process at a time. */
typedef struct engine_tracer {
	/* Called before the wake signal is sent: the next HELLO RESUME of pid
	 * must be held for await. */
	int (*expect)(void *arg, pid_t pid);
	/* Waits up to timeout_ms for that connection; *conn is valid until
	 * adopt or drop is called. Returns 0, -ETIMEDOUT. */
	int (*await)(void *arg, pid_t pid, int timeout_ms, int *conn);
	/* The process runs again: its connection serves requests as before. */
	void (*adopt)(void *arg, pid_t pid);
	/* Gives up waiting (after an error): nothing is held any more. */
	void (*drop)(void *arg, pid_t pid);
	void *arg;
} engine_tracer;

/* ---- driver.c: the CUDA driver, loaded at first use ----------------------- */

/* Loads libcuda.so.1 and makes a context current on this thread.
 * Errors: -ENOSYS (no driver), -EIO (cuInit or the context failed). */
int driver_open(char *err, size_t errlen);

/* Whether pid is a CUDA process the driver can checkpoint, and its state
 * (CUprocessState) in *state. Returns 0, -ESRCH (no CUDA state there). */
int driver_process_state(pid_t pid, int *state);

/* Where a restore puts an image's GPUs: device k of the image (the
 * process's ordinal k) goes to this machine's ordinal to[k]. With pairs,
 * the driver is told (gpuPairs: old[i] -> now[i] by UUID, npairs of them);
 * without, every GPU stays where it was. */
typedef struct engine_devmap {
	uint32_t n;
	int to[PHOSIMG_DEVICES_MAX];
	bool pairs;
	uint32_t npairs;
	uint8_t old[PHOSIMG_DEVICES_MAX][16], now[PHOSIMG_DEVICES_MAX][16];
} engine_devmap;

/* The device an image's device k goes to under map (NULL: k itself). */
int engine_devmap_to(const engine_devmap *map, uint32_t k);

/* cuCheckpointProcessLock / Checkpoint / Restore / Unlock on pid; restore
 * passes map's gpuPairs when it has them (map may be NULL).
 * Errors: -EIO with err naming the call and the driver's message. */
int driver_lock(pid_t pid, unsigned timeout_ms, char *err, size_t errlen);
int driver_checkpoint(pid_t pid, char *err, size_t errlen);
int driver_restore(pid_t pid, const engine_devmap *map, char *err, size_t errlen);
int driver_unlock(pid_t pid, char *err, size_t errlen);

/* ---- park.c: the conversation with a traced process ----------------------- */

/* Sends PARK on conn and collects every object of process pid until
 * PARKED, into *out (emptied first). The tracer closes its end
 * afterwards. Errors: -EIO (the tracer refused: err says why), -EPROTO,
 * wire errors. */
int engine_park(pid_t pid, int conn, engine_parked *out, char *err, size_t errlen);

/* Sends ask (WIRE_PARK, WIRE_TRACK) on conn and collects every object of
 * process pid, and the GPUs it sees (WIRE_DEVICES), until done (WIRE_PARKED,
 * WIRE_TRACKED), into *out (emptied first). what names the request in
 * err. Errors: as engine_park. */
int engine_collect(pid_t pid, int conn, uint16_t ask, uint16_t done, const char *what, engine_parked *out, char *err,
		   size_t errlen);

/* Receives one message from pid's tracer within the park timeout, into
 * h, buf (cap bytes) and fds (*nfds). Errors: -EIO when it is ERROR (err
 * has the tracer's words, "process P did not WHAT: …"; its fds are
 * closed), -ETIMEDOUT and wire errors. */
int engine_recv(pid_t pid, int conn, const char *what, wire_header *h, void *buf, size_t cap, int *fds, int *nfds,
		char *err, size_t errlen);

/* ---- cow.c: the tables of a copy-on-write checkpoint (common/cow.h) -------- */

/* One traced process's table, and its shadow pool. */
typedef struct engine_cow_member {
	pid_t pid;
	cow_header *t; /* mapped */
	uint64_t bytes;
	int fd;        /* the table's memfd */
	uint32_t pool_device;
	uint64_t pool_bytes; /* 0: no pool (the GPU had no room) */
	int pool_fd;
	uint64_t pool_h;     /* CUmemGenericAllocationHandle */
	uint64_t pool_va;    /* the pool in the job's context */
} engine_cow_member;

typedef struct engine_cow {
	engine_cow_member *m;
	int n;
	uint32_t chunk;
	int *table_of;      /* per parked object: its member */
	uint64_t *first_of; /* per parked object: its first chunk in that table */
} engine_cow;

/* Makes a table (enum cow_mode) for each process of all, and a shadow
 * pool of up to pool bytes (0: none) on the device where it has most
 * memory. A LAZY table has one state word per object (chunk unused).
 * Errors:
 * -ENOMEM, errno of memfd_create, -EIO (the driver; err says which call). */
int engine_cow_prepare(engine_cow *c, const engine_parked *all, uint32_t chunk, uint64_t pool, uint32_t mode,
		       char *err, size_t errlen);
/* pid's table, or NULL. */
const engine_cow_member *engine_cow_of(const engine_cow *c, pid_t pid);
/* The state word of chunk `chunk` of parked object k, and its table. */
_Atomic uint32_t *engine_cow_chunk(const engine_cow *c, int k, uint64_t chunk, cow_header **t);
/* Tells waiting tracers that a chunk moved. */
void engine_cow_wake(cow_header *t);
/* Ends the copy for every tracer: they stop protecting and drop the
 * table and the pool. */
void engine_cow_end(engine_cow *c);
/* Sums the tracers' counters into p. */
void engine_cow_stats(const engine_cow *c, engine_progress *p);
/* Ends the copy (if it was not) and frees everything. */
void engine_cow_free(engine_cow *c);

/* Wakes the parked process pid through its control thread tid, waits for
 * it to connect again, gives it the objects (the fds are sent, not
 * closed), and with cow (or NULL) its CoW table and pool, and waits until
 * it runs. Errors: -ETIMEDOUT, -EPROTO, -EIO (err says why). */
int engine_unpark(pid_t pid, pid_t tid, const engine_tracer *t, const engine_parked *objs,
		  const engine_cow_member *cow, char *err, size_t errlen);

/* The same for a lazy restore: the objects sent before the process runs
 * are objs, the rest are listed in the LAZY table lazy, and the
 * connection stays open for them: *conn is the caller's to send the
 * objects on as they are filled, then WIRE_END, and to close. Errors: as
 * engine_unpark. */
int engine_unpark_lazy(pid_t pid, pid_t tid, const engine_tracer *t, const engine_parked *objs,
		       const engine_cow_member *lazy, int *conn, char *err, size_t errlen);

/* The tid of pid's tracer control thread ("phos-control"), or -ESRCH. */
pid_t engine_find_control_thread(pid_t pid);

/* ---- tree.c: the processes of a job --------------------------------------- */

/* root and all its descendants, root first and parents before children,
 * as members (pid, ppid, comm; no flags but PHOSIMG_MEMBER_NS_INIT, with
 * each one's ns_pid, when root is the init of a pid namespace) in a
 * malloc'd *out. Errors:
 * -ESRCH (root is gone), -ENOMEM, errno of opendir(/proc). */
int engine_tree(pid_t root, phosimg_member **out, uint32_t *n);

/* A live process's parent and name (comm, NUL-terminated), from
 * /proc/PID/stat. Errors: -ESRCH (gone, or a zombie), -EIO (unreadable). */
int engine_proc_stat(pid_t pid, pid_t *ppid, char comm[PHOSIMG_COMM_MAX]);

/* The index of pid among m[0..n), or -ENOENT. */
int engine_tree_member(const phosimg_member *m, uint32_t n, pid_t pid);

/* ---- tcp.c: a job's TCP connections --------------------------------------- */

/* Whether a TCP connection of the processes m[0..n) has its peer outside
 * them (CRIU would save it without holding its peer off): 1, and what
 * says which (process, addresses); 0 if none. Errors: -ENOMEM, errno of
 * reading /proc. */
int engine_tcp_outside(const phosimg_member *m, uint32_t n, char *what, size_t len);

/* ---- criu.c ------------------------------------------------------------- */

/* CRIU plugins (criu -L): phos's, for device files that forked children
 * of CUDA processes keep. NULL or "" for none. Set once, before jobs. */
extern const char *engine_criu_plugins;

/* Runs `criu dump` of pid's tree into dir, leaving it running unless
 * kill. CRIU's log goes to log. Errors: -EIO (err gives CRIU's first real
 * error, what it names, and what to do), -ENOSPC (the store holding dir
 * was full when it failed). */
int criu_dump(const char *criu, pid_t pid, const char *dir, bool kill, const char *log, char *err,
	      size_t errlen);

/* Runs `criu restore` from dir, detached; *root is then the restored
 * tree's root as this (the host's) pid namespace sees it: its old pid, or
 * any, for a tree CRIU gave a pid namespace of its own. With lazy_dir (a
 * criu_pages_start's work directory), the tree runs before its CPU pages
 * are back. Errors as criu_dump, and -EIO when CRIU says no root. */
int criu_restore(const char *criu, const char *dir, const char *lazy_dir, const char *log, pid_t *root, char *err,
		 size_t errlen);

/* Starts `criu lazy-pages` for the image in dir, with work directory
 * work (its socket; one per restore) and its log at log, and waits until
 * it listens. *daemon is its pid, for criu_pages_wait. Errors: -EIO (it
 * did not start; err gives its first error), fork's errno. */
int criu_pages_start(const char *criu, const char *dir, const char *work, const char *log, pid_t *daemon,
		     char *err, size_t errlen);

/* Waits until the lazy-pages daemon has given back every page and ended.
 * Errors: -EIO (it failed: pages it had not given back are lost; err
 * gives its first error), waitpid's errno. */
int criu_pages_wait(pid_t daemon, const char *log, char *err, size_t errlen);

/* Turns CRIU's log into one sentence for people: its first real error
 * line (harmless warnings skipped), with what that line names and advice
 * for the errors phos knows; "" when the log holds no error. pid is the
 * dumped tree's root (0 for a restore). */
void criu_explain(const char *log, pid_t pid, char *out, size_t len);

/* What this machine's CRIU cannot do, one sentence per limit, for the
 * log at start ("" if nothing): e.g. other users' processes without
 * CAP_SYS_RESOURCE. */
void criu_limits(char *out, size_t len);

/* ---- stop.c: the stop-the-world protocol ---------------------------------- */

typedef struct engine_stop_args {
	pid_t pid;         /* the root of the tree */
	const char *image; /* where the image is published; must not exist */
	const char *criu;  /* the criu binary */
	const char *log;   /* CRIU's log file */
	bool kill;         /* end the tree after the dump */
	/* The traced processes of the tree, which park; the rest of its CUDA
	 * processes are checkpointed by the driver, which copies. */
	const engine_traced *traced;
	int ntraced;
	const engine_tracer *tracer; /* meets woken tracers; NULL if ntraced is 0 */
	engine_progress *prog;
	/* Copy-on-write: the traced processes run again right after the
	 * dump, and their memory is copied while they run. Ignored with
	 * kill (nothing runs) and for a tree with no traced process. */
	bool cow;
	/* Recopy: the traced processes run on while their memory is copied,
	 * their writes tracked; then the final stall copies what was written
	 * meanwhile, and the image holds the state at its end (t2). Ignored
	 * for a tree with no traced process. */
	bool recopy;
	uint64_t staging;  /* host staging pool, bytes (0: ENGINE_STAGING) */
	int staging_fd;    /* phosfs's staging memfd, or -1 */
	uint64_t shadow_pool; /* CoW shadow pool per process, bytes */
	uint32_t chunk;    /* bytes (0: ENGINE_CHUNK) */
} engine_stop_args;

/* Checkpoints the process tree of pid and publishes one image of it: every
 * traced process is parked, every CUDA process driver-checkpointed, then
 * CRIU dumps the tree. With stop, the parked memory is copied before the
 * processes run again; with cow, after. On failure every process runs on
 * (unless it died), nothing is published and earlier images are
 * untouched. */
int engine_stop(const engine_stop_args *a, char *err, size_t errlen);

/* ---- copy.c: device memory to and from images ----------------------------- */

typedef struct phosimg_writer phosimg_writer;
typedef struct phosimg phosimg;

/* ---- recopy.c: the first part of a recopy checkpoint ----------------------- */

/* The objects handed over at the start of tracking, their TRACK tables,
 * and where in staging each chunk copied since then lies. */
typedef struct engine_recopy {
	engine_parked objs;
	engine_cow tables;
	uint32_t chunk;
	uint64_t *first;   /* per object, its first chunk; first[n]: all */
	uint64_t nchunks;
	uint32_t *slot;    /* per chunk: its staging slot, or UINT32_MAX */
	const cow_object **co; /* per object: its entry in its table */
	int *order;        /* the objects by (pid, VA) */
	_Atomic uint64_t copied; /* bytes copied while the processes ran */
	uint64_t copy_ns;
} engine_recopy;

/* Asks every traced process to hand over its device memory and to run on
 * with a TRACK table. Errors: -EIO (a tracer refused; err says why),
 * -EPROTO, -ETIMEDOUT, -ENOMEM, those of engine_cow_prepare. After an
 * error, engine_recopy_free still ends what began. */
int engine_recopy_track(engine_recopy *r, const engine_traced *traced, int ntraced, uint32_t chunk, char *err,
			size_t errlen);
/* Copies every chunk not written since tracking began into staging, in
 * slots 0, 1, … (leaving a few free); what does not fit is left for the
 * final stall. Errors: -EIO (driver), -ECANCELED, -ENOMEM. */
int engine_recopy_copy(engine_recopy *r, void *staging, uint64_t staging_bytes, engine_progress *prog, char *err,
		       size_t errlen);
/* After the final park: which tracked object is object o of pid (the
 * same VA, size, device and kind), or -1. */
int engine_recopy_find(const engine_recopy *r, const wire_object *o, pid_t pid);
/* The staging slot holding the bytes at off of tracked object k, still
 * good at the final park (copied, never written, not freed), or
 * UINT32_MAX. */
uint32_t engine_recopy_slot(const engine_recopy *r, int k, uint64_t off);
/* Ends tracking (if it was not) and frees everything. */
void engine_recopy_free(engine_recopy *r);

/* How a copy out runs. */
typedef struct engine_copy_opts {
	uint32_t chunk;        /* the image's chunk size */
	void *staging;         /* pinned host staging (engine_staging_alloc) */
	uint64_t staging_bytes;
	engine_cow *cow;       /* the processes run: take chunks by their CoW state */
	const engine_recopy *recopy; /* take the chunks it still holds from staging */
	uint64_t t1_ns;        /* CLOCK_MONOTONIC at t1, for prog->off_ns */
} engine_copy_opts;

/* Copies the parked objects into w (one image object each). Copiers move
 * chunks from the device into a pool of pinned host memory at the bus's
 * speed; writers drain the pool into the image at the store's. Objects
 * written most go first; with cow, a chunk a call waits for goes before
 * all, and a chunk is read from its shadow if the tracer made one, and
 * copiers pause while the application moves data to or from the host.
 * Once every chunk is off the GPU, the copy ends for the tracers.
 * Errors: -ECANCELED (prog->cancel), -EIO (driver), image errors. */
int engine_copy_out(const engine_parked *objs, phosimg_writer *w, const engine_copy_opts *o, engine_progress *prog,
		    char *err, size_t errlen);

/* The same in three steps, so that a stop checkpoint lets the process run
 * again once its memory is off the GPU: begin starts the threads (*out is
 * the copy; objs, w, the staging and the CoW tables must outlive it);
 * wait_off returns once every chunk is off the GPU (or the copy failed:
 * its error); end waits for the writers, frees the copy and returns its
 * error (err says what it was). */
typedef struct engine_copy engine_copy;
int engine_copy_begin(const engine_parked *objs, phosimg_writer *w, const engine_copy_opts *o, engine_progress *prog,
		      engine_copy **out, char *err, size_t errlen);
int engine_copy_wait_off(engine_copy *c);
int engine_copy_end(engine_copy *c, char *err, size_t errlen);
/* Stops a copy that is no longer wanted (the checkpoint failed under
 * it): no more chunks are taken or written, and engine_copy_end returns
 * once each thread has finished the chunk it was on, with -ECANCELED
 * unless the copy had failed before. */
void engine_copy_cancel(engine_copy *c);
/* The copy's error so far (0: none), without waiting. */
int engine_copy_error(engine_copy *c);

/* Pinned host memory for copies. */
typedef struct engine_staging {
	void *buf;
	uint64_t bytes;
	bool registered; /* the memfd's pages, registered; else the driver's own */
	uint64_t pin_ns; /* how long making it took */
} engine_staging;

/* Pins up to want bytes (less if the host refuses that much, but at least
 * 4 chunks) for copies: the pages of the staging memfd fd that phosfs made
 * once (mapped and registered with the driver), or where fd is -1 or
 * cannot be registered, new pinned memory. Errors: -ENOMEM. */
int engine_staging_alloc(engine_staging *s, int fd, uint64_t want, uint32_t chunk, char *err, size_t errlen);
/* Unpins and unmaps it (s is emptied). */
void engine_staging_free(engine_staging *s);

/* Makes a new allocation for every object of img (those with sel[k]
 * set; sel NULL: all), on the device map sends its device to (NULL: the
 * same ordinal), fills it from the image, and returns the records, fds
 * and pids in *out, ready for unpark; the records keep the process's own
 * device ordinals. Errors: -ENOMEM, -EIO (the driver), -ECANCELED, the
 * reader's (a chunk that does not check: -EBADMSG); err says which. */
int engine_copy_in(phosimg *img, const engine_devmap *map, const bool *sel, int threads, engine_parked *out,
		   engine_progress *prog, char *err, size_t errlen);

/* Threads that fill device memory from an image, one object or device at
 * a time; they count the bytes in prog->done. */
typedef struct engine_filler engine_filler;
/* Starts `threads` of them (0: ENGINE_FILL_THREADS, or one for each CPU
 * this process may run on where there are fewer; at most
 * ENGINE_FILL_THREADS_MAX), driver_open first; img must outlive them.
 * Errors: -ENOMEM, errno of pthread_create. */
int engine_filler_start(phosimg *img, int threads, engine_progress *prog, engine_filler **out, char *err,
			size_t errlen);
/* Makes new memory for image object k on device dev, fills it, and
 * returns its record (as the tracer knows it) and an fd that holds it.
 * Errors: as engine_copy_in. */
int engine_fill_object(engine_filler *f, uint32_t k, int dev, wire_object *rec, int *fd, char *err, size_t errlen);
/* Stops the threads and frees f (NULL: nothing). */
void engine_filler_stop(engine_filler *f);
/* How the fill's workers run, for bench/fill to try other ways; set it
 * before a filler starts. Zero fields keep the defaults. */
typedef struct engine_fill_tuning {
	int pieces;    /* pinned pieces in a worker's ring, per device (default 2, at most 16) */
	int piece_kib; /* KiB of each (default 2048, at most 16384) */
	bool spin;     /* wait for a copy by polling, not sleeping */
} engine_fill_tuning;
extern engine_fill_tuning engine_fill_tune;

/* ---- a job runs in a process of its own (phosfs/job-process.c) ------------- */

/* What a job process shares with phosfs: a memfd mapped by both. A job
 * outlives phosfs if phosfs dies, and still finishes (it publishes the
 * image and gives the process back its memory). */
typedef struct engine_shared {
	engine_progress prog;
	_Atomic int finished; /* result and err are final */
	int32_t result;       /* 0 or a negative errno */
	_Atomic int32_t pid;  /* restore: the restored pid, once known */
	_Atomic int32_t resumed; /* restore: the job's pid, once the tree runs (a lazy one's memory may still come) */
	/* restore: the processes whose tracers it woke (unparked), written
	 * before resumed; until the job ends it serves them, and then they
	 * register with phosfs again. */
	_Atomic int32_t served[ENGINE_SERVED_MAX];
	_Atomic uint32_t nserved;
	char err[ENGINE_ERR_MAX];
} engine_shared;

/* Whether pid exists (a zombie included). */
bool engine_alive(pid_t pid);

/* Formats an error message into err; returns e. */
int engine_fail(int e, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
