/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * engine: the mechanisms of checkpoint and restore, run in job processes
 * (doc/ARCHITECTURE.md); the protocols that string them together are the
 * job layer's (job/). This header is the engine's whole contract: each
 * part has its own, one page each.
 *
 *   error.h     one way to report an error: pr_err, carried in a perr
 *   progress.h  a job's steps, progress and clocks
 *   tree.h      the processes of a job, their TCP connections
 *   park.h      parking: the conversation with a traced process
 *   cow.h       the CoW, TRACK and LAZY tables and the shadow pool
 *   driver.h    the CUDA driver: process checkpoint API, GPU moves
 *   criu.h      running CRIU
 *   copy-out.h  device memory into an image, through staging
 *   fill.h      an image back into device memory
 *   recopy.h    tracking writes while memory is copied (recopy)
 *   sockets.h   socket names a restore finds taken
 *   timewait.h  closed connections that hold a restore's TCP ports
 *   criu-image.h  reading CRIU's images: files.img, stats-dump
 *   at-once.h   one step taken by several processes at once
 *
 * The engine talks to a traced process over the wire (common/wire.h), to
 * the CUDA driver through its own context, to CRIU by running it, and
 * writes images with libphosimg. It knows nothing of the file system or
 * of the registry: the caller hands it a connection, and a way to wait
 * for the process to connect again (engine_tracer).
 *
 * Functions return 0 or a negative errno. Where they fail for a reason a
 * person should read, they also say it in `er` (error.h: a sentence
 * without the trailing period, e.g. "criu dump failed: …").
 */
#ifndef PHOS_ENGINE_H
#define PHOS_ENGINE_H

#include "at-once.h"
#include "copy-out.h"
#include "cow.h"
#include "criu.h"
#include "cut.h"
#include "driver.h"
#include "error.h"
#include "fill.h"
#include "park.h"
#include "progress.h"
#include "recopy.h"
#include "shared.h"
#include "sockets.h"
#include "timewait.h"
#include "tree.h"

#endif
