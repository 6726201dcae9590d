/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * job: the protocols, run in a job process of their own (main.c;
 * doc/ARCHITECTURE.md). This header is the layer's contract to phosfs:
 *
 *   request.h     what phosfs asks of a job, typed, and its check
 *   shared.h      the memory a job shares with phosfs: the request, the
 *                 job's progress and its result
 *   checkpoint.h  a checkpoint: the shared stall (stall.c) and each
 *                 protocol's sequence (checkpoint.c)
 *   restore.h     a restore: one sequence (restore.c), eager or lazy
 *                 (lazy.c), onto these GPUs or others (devices.c)
 *
 * The job layer calls the engine's mechanisms (engine/engine.h) and
 * nothing above it: it knows nothing of FUSE, targets or the restore
 * queue.
 */
#ifndef PHOS_JOB_H
#define PHOS_JOB_H

#include "checkpoint.h"
#include "request.h"
#include "restore.h"
#include "shared.h"

/* The main of `phosfs --job stop|restore --shared FD …`, a job's own
 * process: maps FD, checks the request in it, runs it, and reports
 * through the same memory. Returns its exit status: 0 on success, 1 on
 * failure, 2 when it has no request that checks. */
int job_main(int argc, char **argv);

#endif
