/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phosfs internals: the registry of traced processes and the file system
 * that shows them. Functions return 0 or a negative errno.
 */
#ifndef PHOSFS_H
#define PHOSFS_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "../common/state.h"
#include "../common/wire.h"
#include "../job/job.h"
#include "ctl.h"
#include "text.h"

#define PHOS_VERSION "0.1"

/* Set by main before anything starts; read-only afterwards. */
extern const char *phosfs_store; /* --store: where images go */
extern const char *phosfs_criu;  /* --criu or $PHOS_CRIU: the criu binary */
extern const char *phosfs_self;  /* this binary, to start jobs with */
extern const char *phosfs_criu_plugins; /* --criu-plugins: criu -L, or "" */
extern uint64_t phosfs_staging;     /* --staging: pinned host staging of a copy, bytes */
extern uint64_t phosfs_chunk;       /* --chunk: chunk of copies and images, bytes */
extern uint64_t phosfs_shadow_pool; /* --shadow-pool: CoW shadows per process, bytes */
extern int phosfs_fill_threads;     /* --fill-threads: threads that fill device memory on restore (0: default) */
extern int phosfs_restores;         /* --restores: restores that run side by side */
extern int phosfs_restore_queue;    /* --restore-queue: restores that may wait beyond those */
extern int phosfs_restore_timeout;  /* --restore-timeout: seconds a restore's longest step may take */
extern uint32_t phosfs_checkpoint_timeout_ms; /* --checkpoint-timeout: each process's quiesce, ms */
extern int phosfs_dump_timeout; /* --dump-timeout: CRIU's dump, and a copy waited for without progress, s */
extern int phosfs_checkpoint_wait;  /* --checkpoint-wait: seconds a checkpoint waits for a restore of its tree */
extern int phosfs_job_pool;         /* --job-pool: restore jobs started ahead, the driver loaded */
extern const char *phosfs_metrics_textfile; /* --metrics-textfile: where phos.prom goes, or NULL */

/* staging.c: the host staging pool, made once (a memfd jobs map and pin). */
/* Makes it, of bytes (its pages come with the first job that uses
 * them). Errors: errno of memfd_create or ftruncate. */
int staging_start(uint64_t bytes);
/* Its fd for one job at a time, or -1 (in use, or none: that job pins
 * its own); staging_give when the job has ended. */
int staging_take(void);
void staging_give(void);

/* A traced process, as registered. Owned by the registry; callers get
 * references through registry_get and give them back with registry_put. */
typedef struct proc {
	pid_t pid;
	uid_t uid; /* the process owner, from /proc */
	wire_hello hello;
	pthread_mutex_t lock; /* guards conn: one request at a time */
	int conn;
	state_header *table; /* mapped, or NULL */
	int refs;            /* guarded by the registry's lock */
	_Atomic bool gone;   /* the connection ended */
	struct proc *next;
} proc;

/* registry.c: listens on path for tracers. Starts a thread. */
int registry_start(const char *path);
void registry_stop(void);
/* A registered process by pid, or NULL; registry_put gives it back. */
proc *registry_get(pid_t pid);
void registry_put(proc *p);
/* The pids registered now; *out is malloc'd. */
int registry_pids(pid_t **out, size_t *n);

/* Takes p's connection away from the registry (for a job that parks the
 * process): p is dropped, and the caller owns the returned fd, or -1. */
int registry_take(proc *p);

/* Why p's memory cannot be parked (its HELLO's reason, or what its state
 * table says it found since), into why (n bytes); NULL when it can. */
const char *proc_stop_only(const proc *p, char *why, size_t n);

/* Requests to a process; the replies are malloc'd. */
int proc_list(proc *p, wire_buffer **out, size_t *n);
/* Raw KERNELS payloads, concatenated: wire_kernel records with names. */
int proc_kernels(proc *p, uint8_t **out, size_t *len, uint32_t *count);
/* Its NCCL communicators (wire_nccl_comm), *n of them. */
int proc_nccl(proc *p, wire_nccl_comm **out, size_t *n);


/* A pid phosfs has been asked about: its job, last error and last
 * checkpoint. Targets live as long as phosfs. */
typedef struct target {
	pid_t pid;                  /* 0: the root target, of /ctl */
	pthread_mutex_t lock;       /* guards every field below */
	pthread_cond_t done;        /* broadcast when a job ends */
	uid_t uid;                  /* the process owner */
	bool busy;                  /* a job runs */
	bool traced;                /* the running job parks the process */
	pid_t parked[64];           /* the traced processes the running job parks (while busy) */
	int nparked;
	int kind;                   /* enum ctl_verb of the job */
	char job[160];              /* the job, as status shows it */
	char name[CTL_NAME_MAX + 1];/* the checkpoint being written */
	job_shared *sh;          /* the running job's progress */
	int result;                 /* of the last job */
	uint64_t last_stall_ns;
	uint64_t last_step_ns[STEP_DONE]; /* the last job's time in each step */
	engine_progress last_prog;  /* the last job's progress, as it ended */
	char last[CTL_NAME_MAX + 1];/* the last checkpoint this phosfs made */
	char error[ENGINE_ERR_MAX + 200]; /* the last error, "" if none */
	struct target *next;        /* guarded by the list's lock */
} target;

/* jobs.c */
/* The job pid belongs to: the root of the `phos run` job whose tree holds
 * it (the session leader that phos run started, which carries PHOS_JOB),
 * else pid itself. */
pid_t job_root(pid_t pid);
/* The processes whose tracers the restore under way serves (until it
 * ends they are not registered, and their trees cannot be checkpointed):
 * up to max pids into out; their number (0 when no restore runs). */
int job_served(pid_t *out, int max);
/* The pid that names pid's job in /phos and the store: what `phos run`
 * printed. The root, or, when the root is the init of the job's own pid
 * namespace, the job it started (pid 2 there). */
pid_t job_name(pid_t pid);
target *target_get(pid_t pid, bool create);
int target_pids(pid_t **out, size_t *n);
void targets_free(void);
/* Records an error for status (and syslog). */
void target_error(target *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether checkpoint `name` is being written. */
bool target_in_progress(target *t, const char *name);
/* Waits up to ms for checkpoint `name` to be written (published, or
 * failed); whether it still is being written. */
bool target_wait_written(target *t, const char *name, int ms);
/* How many data files (gpu.data, gpu.data.1, …) the checkpoint being
 * written has; 0 when none is. */
uint32_t target_data_files(target *t);
/* For a reader of checkpoint `name`'s gpu.data while it is written: 1 and
 * how many bytes at its start are final in *ready (and, once known, the
 * unpublished file's path in path), or 0 when it is not being written
 * (any more). Never blocks. */
int target_stream(target *t, const char *name, char *path, size_t len, uint64_t *ready);
/* Starts a checkpoint job. Errors: -EBUSY, -EEXIST, -EOPNOTSUPP, … with er. */
int job_checkpoint(target *t, const ctl_cmd *c, perr *er);
/* Asks the running job to stop early. Errors: -EINVAL (none runs). */
int job_cancel(target *t, perr *er);

/* Lets t's checkpoint with hold (published, its tree stopped) end the
 * tree (end) or let it run on. Errors: -EINVAL (no such checkpoint runs),
 * -EBUSY (it is not published yet), with er saying so. */
int job_release(target *t, bool end, perr *er);

/* spawn.c: a job process (`phosfs --job ARGS…`), and the memfd it shares. */
typedef struct spawn {
	job_shared *sh; /* mapped; the caller unmaps it once the job has ended */
	pid_t child;
} spawn;
/* Starts a job process for req (request.h), which it finds in the
 * memory it shares with phosfs, with the fds req names (its members'
 * connections, the staging memfd) left open in it. Errors: errno of
 * memfd_create, mmap or fork, with er. */
int spawn_job(const job_request *req, spawn *s, perr *er);
/* A memfd of a job_shared, mapped (its fd, close-on-exec, in *fd); NULL
 * with errno set if it cannot be made. */
job_shared *job_shared_make(int *fd);

/* pool.c: restore jobs started ahead, the driver loaded (--job-pool). */
/* Starts n of them (0: none). Errors: -ENOMEM. */
int pool_start(int n);
/* Hands req to a ready one, into *s as spawn_job would, and starts
 * another in its place. Errors: -EAGAIN (none is ready: start one). */
int pool_take(const job_request *req, spawn *s);
/* Lets go of those that wait: they end. */
void pool_stop(void);

/* restores.c: restores side by side, and their queue. */
enum restore_state { RESTORE_QUEUED, RESTORE_RUNNING, RESTORE_RESUMED, RESTORE_DONE, RESTORE_FAILED };
/* A restore as status shows it: a copy. */
typedef struct restore_view {
	unsigned id;
	enum restore_state state;
	int position;          /* queued: its place in the queue (1: next) */
	char job[160];         /* "restore DIR lazy", as status shows it */
	char log[PATH_MAX];    /* CRIU's log, named for this restore alone */
	pid_t pid;             /* the restored job's pid, once it runs */
	int result;            /* once ended: 0 or a negative errno */
	char error[ENGINE_ERR_MAX + 200];
	engine_progress prog;  /* as it is now, or as it ended */
} restore_view;
/* Submits a restore; *id names it in /restores. It starts at once, or
 * waits its turn. The restored tree goes into cgroups (as
 * /proc/PID/cgroup says them; "": those the image names). Errors: -EBUSY
 * (the queue is full), -ENOMEM, errno of pthread_create; er says why. */
int restore_submit(const ctl_cmd *c, const char *cgroups, unsigned *id, perr *er);
/* Every restore still known (newest first) into *out (malloc'd), with
 * how many run and wait now. Errors: -ENOMEM. */
int restore_views(restore_view **out, size_t *n, int *running, int *queued);
/* Restore id, as it is now. Errors: -ENOENT (unknown, or forgotten). */
int restore_view_get(unsigned id, restore_view *out);
/* The number of state changes of restores so far: for
 * restores_await_change. */
unsigned restores_changes(void);
/* Waits up to ms until restores changed state since restores_changes
 * returned seen (at once if they did already). */
void restores_await_change(unsigned seen, int ms);
/* Frees the restores that ended (at exit). */
void restores_free(void);

/* status.c: the status files, as key: value lines into t. */
/* /PID/status: the process, its tree and its job. Errors: -ENOMEM. */
int status_proc(pid_t pid, text *t);
/* /status: the restores running and queued, the last one's outcome.
 * Errors: -ENOMEM. */
int status_root(text *t);
/* /restores/ID: one restore. */
void status_restore(restore_view *v, text *t);

/* status-json.c: a status file's lines (s, len bytes) as one JSON object
 * into out (the shapes it gives values: status-json.c). Errors: -ENOMEM. */
int status_json(const char *s, size_t len, text *out);

/* events.c: /events, the events of checkpoints and restores as lines
 * of JSON (its header says how they are read). */
#define EVENTS_KEEP 1024
struct fuse_pollhandle;
/* Records event ("checkpoint.published", …) of the job of pid (0: none),
 * with fields (a JSON object, or NULL), which it takes. An event that
 * cannot be made is left out. */
void events_emit(const char *event, pid_t pid, json_t *fields);
/* A reader's place: the next event it reads, how much of it it has
 * read, and how many it missed, to say so first. */
typedef struct events_cursor {
	uint64_t seq;
	size_t off;
	uint64_t lost;
} events_cursor;
/* Whether a read that waits (for an event, for the bytes of an image
 * being written) gives up now: its reader interrupted it (killed it),
 * phosfs is ending (its FUSE loop joins every thread at exit), or it has
 * waited FS_WAIT_MAX_MS since since_ns (engine_now_ns). The read then
 * returns -EINTR, which readers retry. */
#define FS_WAIT_MAX_MS 60000
bool fs_wait_over(uint64_t since_ns);
/* readers.c: that checkpoint name of pid was looked at through the mount
 * (opened > 0: a file of it opened; < 0: one closed; 0: looked up).
 * Returns 0, or -ENOENT when a prune has claimed it (readers_claim). */
int readers_touch(pid_t pid, const char *name, int opened);
/* For a prune: claims checkpoint name of pid, unless it is being read (a
 * file of it is open, or it was looked at in the last 5 seconds: a copy
 * goes from one file to the next); claimed, it is gone to readers.
 * Whether it was claimed (else the prune leaves it for later). */
bool readers_claim(pid_t pid, const char *name);
/* After a prune removed a claimed checkpoint: its name may be used again. */
void readers_forget(pid_t pid, const char *name);
/* The sequence number the next event will have: a new reader's start. */
uint64_t events_next(void);
/* Lines of events from c on into buf (size bytes), advancing c: whole
 * lines, or the next part of one longer than size; waits for one unless
 * nonblock. Returns the bytes, or -EAGAIN (nonblock and none; or too many
 * reads wait already), -EINTR (the wait gave up: fs_wait_over). */
int events_read(events_cursor *c, char *buf, size_t size, bool nonblock);
/* For poll(2): POLLIN in *revents when c has something to read; else ph
 * (taken) is told at the next event. Returns 0. */
int events_poll(const events_cursor *c, struct fuse_pollhandle *ph, unsigned *revents);
/* Frees what is kept (at exit). */
void events_free(void);

/* metrics.c: /metrics, what checkpoints and restores cost, in the
 * Prometheus text format (the series: metrics.c). */
/* Counts a checkpoint that ended (proto "cow", "recopy" or "stop";
 * result 0 or a negative errno), with its progress and step times. */
void metrics_checkpoint(const char *proto, int result, const engine_progress *p, const uint64_t *step_ns);
/* Counts a restore that ended (asked lazy or eager). */
void metrics_restore(bool lazy, int result, const engine_progress *p);
/* The metrics as the exposition format into t. Errors: -ENOMEM. */
int metrics_text(text *t);
/* Waits up to ms until the metrics changed since version seen; the
 * version now (0 at first). */
unsigned metrics_wait(unsigned seen, int ms);
/* Ends every metrics_wait, now and later (at exit); metrics_stopping
 * then says true. */
void metrics_wake(void);
bool metrics_stopping(void);
/* metrics-textfile.c: writes DIR/phos.prom now, and then in a thread of
 * its own after each change and every 15 s. Errors: -ENAMETOOLONG,
 * -errno of writing it (an unwritable DIR), of pthread_create. */
int metrics_textfile_start(const char *dir);
/* Writes it a last time and ends the thread. */
void metrics_textfile_stop(void);

/* schedule.c: periodic checkpoints of a job (its header says how the
 * interval is chosen). */
/* Starts (or, given again, replaces; with c->off, ends) the schedule of
 * the job pid names. Errors: -ENOMEM, errno of pthread_create, with er. */
int schedule_set(pid_t pid, const ctl_cmd *c, perr *er);
/* The job's schedule, as status lines into t (none: nothing). */
void schedule_status(pid_t pid, text *t);
/* Ends every schedule's thread at its next wake (at exit). */
void schedule_stop_all(void);
/* Removes what a prune left half removed in a store's PID folder dir when
 * phosfs stopped (its .pruned-N folders), at start. */
void schedule_clear_pruned(const char *dir);

/* logs.c: the store's log folders. */
#define LOGS_KEEP 64
/* Makes the log folder dir if it is not there, and removes its oldest
 * files beyond the newest LOGS_KEEP - 1: room for one more log. */
void logs_make_room(const char *dir);

/* thread.c: the signals that end phosfs. */
struct fuse_session;

/* Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in every
 * thread it starts), and ignores SIGPIPE. Call before any thread starts. */
void phosfs_signals_block(void);

/* Starts the thread that takes those signals: it ends session se and
 * wakes its loop with a request to mount mnt. Errors: pthread_create's
 * (a positive errno). */
int phosfs_signals_start(struct fuse_session *se, const char *mnt);

/* Ends that thread (at once where no signal came); the signal that ended
 * phosfs, or 0. */
int phosfs_signals_stop(void);

#endif
