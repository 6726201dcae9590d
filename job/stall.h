/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The stall every checkpoint protocol shares (stall.c; internal to
 * job/): quiesce and park, driver lock and checkpoint, CRIU's dump, and
 * one way back (stall_leave) and one undo (stall_free), as CRIU's
 * cr_dump_finish. checkpoint.c strings them together with each
 * protocol's own part.
 */
#ifndef PHOS_JOB_STALL_H
#define PHOS_JOB_STALL_H

#include "checkpoint.h"

/* What each member of the tree went through, so that exactly that is
 * undone. */
typedef struct member_state {
	bool locked, checkpointed, parked;
	pid_t tid; /* a traced member's control thread */
} member_state;

struct ckpt;

/* One member's part in a step all members take at once. */
typedef struct part {
	struct ckpt *k;
	int i;             /* its index in k->m */
	int conn;          /* a traced member's connection */
	bool keep;         /* park: it keeps its memory (WIRE_PARK_KEEP) */
	engine_parked got; /* park: what it handed over */
	wire_nccl_comm *comms; /* cut: its communicators and their counts */
	size_t ncomms;
	wire_nccl_target *targets; /* cut: its targets */
	size_t ntargets;
	const engine_cow *cow; /* unpark: the CoW tables, or NULL */
	uint64_t done_ns;  /* park: when its answer was in (engine_now_ns) */
	perr er;
	int e;
} part;

/* Runs fn on every part of v (n) at once, each on a thread of its own
 * (inline where no thread can be had), and waits for all. */
void stall_at_once(part *v, int n, void *(*fn)(void *));

/* The first failure of v (n) into er, naming how many more failed;
 * returns its error, or 0. */
int stall_first_failure(const part *v, int n, perr *er);

/* A checkpoint under way: what its steps share, and what stall_free
 * undoes, whatever step it failed at. */
typedef struct ckpt {
	bool cut;          /* the members' NCCL operations are held (cut.c) */
	const checkpoint_args *a;
	engine_progress *prog;
	bool recopy, cow;  /* the protocol, as it applies to this tree */
	bool protect;      /* recopy: what is not off the GPU at unpark is CoW */
	bool dumped;       /* CRIU dumped the tree (its pages may still be written: tail) */
	bool resumed;      /* hold: the tree CRIU left stopped runs on again */
	criu_tail tail;    /* a dump whose tree runs on while CRIU writes its pages */
	uint32_t chunk;
	int timeout_ms;     /* each member's quiesce and driver lock */
	int dump_timeout_s; /* CRIU's dump */
	phosimg_member *m; /* the tree, and what each member went through */
	member_state *ms;
	uint32_t n;
	phosimg_meta meta;
	char *cmdline;     /* meta's */
	phosimg_device devs[PHOSIMG_DEVICES_MAX];
	engine_staging staging;
	phosimg_writer *w;
	engine_parked parked;
	engine_shares shares; /* the members' imports of each other's memory */
	engine_cow tables;
	engine_recopy rc;
	engine_copy_opts co;
	engine_copy *copy;
	uint64_t t0;       /* the stall's start */
} ckpt;

/* 0. Before the stall: the tree, its description, the protocol as it
 * applies to it (k->cow, k->recopy), the staging pool (pinning is slow)
 * and the image's writer. Errors: driver_open's, -ESRCH (the process is
 * gone), -EOPNOTSUPP (a TCP connection leaves the tree), -ENOMEM, the
 * staging pool's and the writer's; er says which. */
int stall_begin(ckpt *k, const checkpoint_args *a, perr *er);

/* Takes the tree again as it is now (it ran since stall_begin). Errors:
 * as stall_begin's. */
int stall_retree(ckpt *k, perr *er);

/* 1-2. The stall begins (k->t0): the image is described, an NCCL job is
 * cut (cut_run), and every traced member parks, all at once. From here stall_leave must run.
 * Errors: engine_park's, -ENOMEM, the writer's. */
int stall_enter(ckpt *k, perr *er);

/* 3-4. Every CUDA member is locked, and only then checkpointed in the
 * driver; then CRIU dumps the tree. Where CRIU can, the tree's pages are
 * saved from a snapshot after it runs on (k->tail; stall_pages). Errors:
 * the driver's and criu_dump's (-EIO, -ETIMEDOUT), with er. */
int stall_freeze(ckpt *k, perr *er);

/* 8½. Waits until CRIU has written the pages it saves after the stall
 * (none left: at once), and takes its statistics. Errors: criu_dump's. */
int stall_pages(ckpt *k, perr *er);

/* The cut of an NCCL job (cut.c), the first step of stall_enter: every
 * traced member holds its NCCL operations back and says its counts; each
 * communicator's target is the largest; each member runs up to its
 * targets. A tree without NCCL has nothing to cut. Errors: -EOPNOTSUPP (a
 * communicator the job cannot cut: made unseen, or with ranks outside the
 * tree), -ETIMEDOUT, those of engine_cut_*; er names the process. */
int cut_run(ckpt *k, perr *er);

/* Lets members that were cut and did not park run on again. */
void cut_end(ckpt *k);

/* 6-7. The stall ends: every live member is brought back to running,
 * whatever happened before (e, the checkpoint's result so far); with no
 * error, with its CoW table if the protocol made one. Returns the
 * checkpoint's result; *back says whether bringing them back worked. */
int stall_leave(ckpt *k, int e, bool *back, perr *er);

/* 10. hold (a->hold_ms, the tree dumped and left stopped): where the
 * checkpoint failed (e), the tree runs on at once; else it waits, as
 * stopped, for the release or the deadline, and then ends (SIGKILL) or
 * runs on (SIGCONT, then driver restore, unlock and unpark). Call it
 * before stall_release, which lets go of the parked memory. Returns e, or
 * bring_back's error where the tree did not come back. */
int stall_hold(ckpt *k, int e, perr *er);

/* Lets go of the device memory, the tables and the staging pool (again:
 * nothing). */
void stall_release(ckpt *k);

/* 9. Records the job's step times and counters in the image (its STATS
 * section), then publishes it. Errors: the writer's (-ENOSPC, -EIO, …). */
int stall_publish(ckpt *k, perr *er);

/* The one undo: frees what the checkpoint holds; the image is thrown
 * away unless it was published. */
void stall_free(ckpt *k);

#endif
