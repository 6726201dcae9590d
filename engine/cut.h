/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The cut of an NCCL job (cut.c): the conversation with one traced
 * process. The job layer asks every rank at once and agrees the targets
 * (job/cut.c).
 */
#ifndef PHOS_ENGINE_CUT_H
#define PHOS_ENGINE_CUT_H

#include <stddef.h>
#include <sys/types.h>

#include "../common/wire.h"
#include "error.h"

/* Sends CUT (timeout_ms is the cut's deadline): pid holds its NCCL
 * operations back and answers its communicators' counts, malloc'd into
 * *out (*n of them). Errors: -EIO (its tracer refused: er says why),
 * -ETIMEDOUT, -EPROTO, -ENOMEM, wire errors. */
int engine_cut_begin(pid_t pid, int conn, int timeout_ms, wire_nccl_comm **out, size_t *n, perr *er);

/* Sends pid its targets (t, n) and waits until it says it reached them,
 * within timeout_ms and a grace. Errors: as engine_cut_begin. */
int engine_cut_reach(pid_t pid, int conn, const wire_nccl_target *t, size_t n, int timeout_ms, perr *er);

/* Tells pid the checkpoint does not go on: its held operations go on. */
void engine_cut_end(int conn);

#endif
