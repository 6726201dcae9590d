/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job's progress (progress.c): the steps it goes through, what status
 * shows of it, and the clocks it times them with. Its errors are
 * error.h's.
 */
#ifndef PHOS_ENGINE_PROGRESS_H
#define PHOS_ENGINE_PROGRESS_H

#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "error.h"

#define ENGINE_ERR_MAX PERR_MAX          /* a job's message, as status shows it */
#define ENGINE_SERVED_MAX 64             /* processes whose tracers a restore tells phosfs of */

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
	STEP_CUT,     /* checkpoint: an NCCL job's ranks run up to the cut */
	STEP_PAGES,   /* checkpoint: CRIU writes the pages it saved, the tree running */
	STEP_HOLD,    /* checkpoint with hold: published, the tree stopped until released */
	STEP_DONE,
};

/* How a held tree is let go: it runs on, or it ends; where the hold's
 * deadline passed, it ran on. */
enum { ENGINE_RELEASE_RESUME = 1, ENGINE_RELEASE_KILL, ENGINE_RELEASE_DEADLINE };

/* Name of a step, for status. */
const char *engine_step_name(int step);

/* A job's progress, read by status while the job writes it. */
typedef struct engine_progress {
	_Atomic int step;        /* enum engine_step */
	_Atomic uint64_t done;   /* bytes of device memory copied */
	_Atomic uint64_t total;  /* bytes to copy */
	_Atomic uint64_t stall_ns; /* the process was stopped this long */
	_Atomic bool cancel;     /* asked to stop early */
	/* A checkpoint with hold: how its tree is released (ENGINE_RELEASE_*,
	 * 0 until phosfs says), and, once it was, how it was (the same, or
	 * ENGINE_RELEASE_DEADLINE where nobody said in time). */
	_Atomic int release, released;
	/* Nanoseconds spent in each step so far, and when the current one
	 * began (CLOCK_MONOTONIC); kept by engine_step. */
	_Atomic uint64_t step_ns[STEP_DONE];
	_Atomic uint64_t step_at;
	/* An NCCL job's cut: "PID NAME=TARGET …; …", written before the
	 * stall, for status. */
	char cut[512];
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
	_Atomic uint64_t shadow_pool_bytes; /* CoW: the shadow pools' device memory */
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
	/* Checkpoint: what CRIU's dump measured (its stats-dump image), set
	 * once the dump ended; microseconds freezing the tree, frozen,
	 * collecting pages and writing them; pages written, private and
	 * shared. All 0 where CRIU wrote none. */
	_Atomic uint64_t criu_freezing_us, criu_frozen_us, criu_memdump_us, criu_memwrite_us;
	_Atomic uint64_t criu_pages, criu_shpages;
	/* Checkpoint: the park's parts, in nanoseconds: until every member
	 * had handed its memory over, until each had let go of it (HELD and
	 * its release), and what the job did with it then; the objects it
	 * took. */
	_Atomic uint64_t park_handed_ns, park_released_ns, park_kept_ns, park_objects;
	/* Restore: what ran beside CRIU's restore, in nanoseconds: checking
	 * the checksums of CRIU's page data, and opening the driver and
	 * placing the GPUs; then what CRIU's restore measured
	 * (its stats-restore): microseconds forking the tree and restoring it,
	 * and the pages it restored. */
	_Atomic uint64_t beside_sums_ns, beside_driver_ns;
	_Atomic uint64_t criu_forking_us, criu_restore_us, criu_restored_pages;
	/* cow and recopy: nanoseconds making the CoW tables, in the stall. */
	_Atomic uint64_t cow_prepare_ns;
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


#endif
