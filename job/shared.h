/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What a job process (main.c) shares with phosfs: a memfd both map,
 * made by phosfs (phosfs/spawn.c).
 */
#ifndef PHOS_JOB_SHARED_H
#define PHOS_JOB_SHARED_H

#include <stdatomic.h>
#include <stdint.h>

#include "../engine/progress.h"
#include "request.h"

/* What a job process shares with phosfs: a memfd mapped by both. A job
 * outlives phosfs if phosfs dies, and still finishes (it publishes the
 * image and gives the process back its memory). */
typedef struct job_shared {
	job_request req;      /* what the job is asked; written before it starts */
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
	/* a job started ahead (phosfs/pool.c): 1 once it has loaded the
	 * driver and waits for its request; req is written before the byte
	 * that wakes it */
	_Atomic int pool_ready;
} job_shared;

#endif
