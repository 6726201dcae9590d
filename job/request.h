/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job request: what phosfs asks of a job process, typed. phosfs fills
 * it into the memfd it shares with the job (job_shared, shared.h) before
 * the job starts; the job copies it out and checks it before it acts on
 * anything (request.c). The job's command line only names it for people
 * reading ps: `phosfs --job stop --pid ROOT --shared FD`, or
 * `phosfs --job restore --shared FD`.
 */
#ifndef PHOS_JOB_REQUEST_H
#define PHOS_JOB_REQUEST_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../engine/cgroup.h"
#include "../engine/error.h"

#define JOB_REQUEST_MAGIC 0x4a524850u /* "PHRJ" in memory, little-endian */
#define JOB_REQUEST_VERSION 4
#define JOB_MEMBERS_MAX 256 /* traced processes of one checkpointed tree */
#define JOB_DEVICES_MAX 4096 /* the longest list of GPU moves, with its NUL */
#define JOB_TIMEOUT_MAX_MS 3600000u /* the longest quiesce a checkpoint may wait */
#define JOB_HOLD_MAX_MS 3600000u /* the longest a checkpoint may hold its tree stopped */
#define JOB_DUMP_TIMEOUT_MAX_S 86400u /* the longest --dump-timeout: a day */

enum job_kind { JOB_CHECKPOINT = 1, JOB_RESTORE };

/* A traced process of the tree, with the connection phosfs handed over
 * (an fd left open in the job) and its tracer's control thread. */
typedef struct job_member {
	int32_t pid, conn, control_tid;
	uint64_t devices; /* bit d: it holds device memory on GPU d */
	uint32_t buffers; /* its live allocations: the objects it hands over are as many or fewer */
	uint32_t flags;   /* JOB_MEMBER_* */
} job_member;
/* A stop-only process (WIRE_HELLO_STOP_ONLY) in a stop checkpoint: it
 * parks without handing its memory over (WIRE_PARK_KEEP), and the
 * driver's checkpoint saves that memory with the process. */
#define JOB_MEMBER_KEEP 0x1u

/* What a checkpoint job is asked. */
typedef struct job_checkpoint_req {
	int32_t pid;          /* the root of the tree */
	bool kill, cow, recopy;
	uint32_t hold_ms;     /* with kill: the tree held stopped until released (checkpoint.h); 0: none */
	uint64_t staging;     /* bytes of host staging */
	int32_t staging_fd;   /* phosfs's staging memfd, or -1 */
	uint32_t chunk;       /* bytes, a power of two */
	uint32_t timeout_ms;  /* each member's quiesce; 0: the default */
	uint32_t dump_timeout_s; /* CRIU's dump, and a copy waited for without progress; 0: the default */
	uint64_t shadow_pool; /* bytes per process, 0 for none */
	uint32_t nmembers;
	job_member members[JOB_MEMBERS_MAX];
} job_checkpoint_req;

/* What a restore job is asked. */
typedef struct job_restore_req {
	char devices[JOB_DEVICES_MAX]; /* OLD=NEW,… or "" */
	int32_t fill_threads;  /* 0: the default */
	int32_t timeout_s;     /* each step's deadline; 0: none */
	bool lazy, lazy_pages;
	bool growing; /* the image's data files are still being written (phosimg_open_growing) */
	/* The cgroups the tree goes into, as /proc/PID/cgroup says them
	 * (those of the process that asked); "": the image's. */
	char cgroups[ENGINE_CGROUPS_TEXT_MAX];
} job_restore_req;

typedef struct job_request {
	uint32_t magic, version, size; /* JOB_REQUEST_*, sizeof(job_request) */
	uint32_t kind;                 /* enum job_kind */
	char image[PATH_MAX];   /* checkpoint: where it is published; restore: what */
	char criu[PATH_MAX];    /* the criu binary */
	char log[PATH_MAX];     /* CRIU's log */
	char plugins[PATH_MAX]; /* CRIU's plugin folder, "" for none */
	job_checkpoint_req checkpoint;
	job_restore_req restore;
} job_request;

/* Empties r and makes it a request of kind, for image, with CRIU's
 * binary, log and plugin folder (NULL or "" for none). Errors:
 * -ENAMETOOLONG (a path does not fit its field). */
int job_request_init(job_request *r, enum job_kind kind, const char *image, const char *criu, const char *log,
		     const char *plugins);

/* Copies s into a field of cap bytes. Errors: -ENAMETOOLONG (it does not
 * fit; the field is left empty). */
int job_request_set(char *field, size_t cap, const char *s);

/* The word a request of kind has on the job's command line ("stop",
 * "restore"), or NULL. */
const char *job_kind_name(uint32_t kind);

/* Checks a request as the job found it: magic, version and size, the
 * kind, every string ended inside its field and present where needed,
 * numbers in range, and every fd it names open. Errors: -EINVAL or
 * -EBADF, with er naming the field. */
int job_request_check(const job_request *r, perr *er);

#endif
