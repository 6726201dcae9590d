/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint (checkpoint.h; doc/ARCHITECTURE.md, "The checkpoint
 * protocols"): the shared stall of stall.c, with each protocol's own
 * short sequence around it.
 *
 *   stop:   enter (park) · copy starts · freeze (lock, dump) · the copy
 *           is off the GPU · leave (unpark) · staging drains into the
 *           image
 *   cow:    enter · freeze · CoW tables and shadow pools · leave, with
 *           the tables · the copy, while the processes run
 *   recopy: track and copy while the processes run · enter · the copy
 *           of what was written starts, CoW-protected · freeze · leave,
 *           with the tables · the copy ends
 *
 * Then, for all three: release the device memory, publish, free. A
 * checkpoint that kills the tree takes stop's sequence (recopy's, with
 * nothing protected). One that holds it takes the same, but CRIU leaves
 * the tree stopped, and after publishing it waits for the release: the
 * tree ends, or runs on (stall_hold); only then is the memory released.
 *
 * The cut of an NCCL job belongs to the stall: a step in stall_enter
 * before its members park, undone in stall_leave. Memory one member
 * imported of another's, and host memory the CPU writes, are copied
 * before they run again, in every protocol: the CoW tables see only each
 * process's own calls.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "stall.h"

/* What the copy out is told, whichever protocol runs it. */
static void copy_opts(ckpt *k)
{
	k->co = (engine_copy_opts){ .chunk = k->chunk,
				    .staging = k->staging.buf,
				    .staging_bytes = k->staging.bytes,
				    .t1_ns = k->t0,
				    .recopy = k->recopy ? &k->rc : NULL,
				    .cow = k->protect ? &k->tables : NULL };
}

/* The parked memory is the job's now, and no process runs on it, so its
 * copy off the GPU starts at once and runs under the driver's checkpoint
 * and CRIU's dump. */
static int copy_start(ckpt *k, perr *er)
{
	copy_opts(k);
	if (!k->parked.n)
		return 0;
	engine_step(k->prog, STEP_COPY);
	int e = engine_copy_begin(&k->parked, k->w, &k->co, k->prog, &k->copy, er);
	if (!e)
		e = engine_shares_record(&k->shares, k->copy, k->w, er);
	/* recopy: what the final stall copies; the rest came from staging. */
	if (!e && k->recopy)
		atomic_store(&k->prog->recopy_dirty,
			     atomic_load(&k->prog->total) - atomic_load(&k->prog->recopy_clean));
	return e;
}

/* The CoW tables of the parked memory, timed for status. */
static int cow_tables(ckpt *k, perr *er)
{
	uint64_t t0 = engine_now_ns();
	int e = engine_cow_prepare(&k->tables, &k->parked, k->chunk, k->a->shadow_pool, COW_MODE_COW, er);
	atomic_store(&k->prog->cow_prepare_ns, engine_now_ns() - t0);
	return e;
}

/* A copy that made no progress for the dump's deadline is stuck (a device
 * copy or the store hangs): it is cancelled, and ended only once the
 * processes run again (copy_drain), since its threads may take a while
 * to let go. */
static int copy_stuck(ckpt *k, perr *er)
{
	engine_copy_cancel(k->copy);
	return pr_err(er, -ETIMEDOUT,
		      "the copy of device memory off the GPU made no progress for %d s while the processes waited "
		      "for it (a device copy or the store hangs; phosfs --dump-timeout): the checkpoint is abandoned",
		      k->dump_timeout_s);
}

/* cow and recopy: waits until what is written where no CoW table sees it
 * (memory members share, host memory) is off the GPU. */
static int copy_shared_off(ckpt *k, perr *er)
{
	if (!k->copy || !k->shares.unseen)
		return 0;
	int e = engine_copy_wait_shared(k->copy, k->dump_timeout_s);
	if (!e)
		return 0;
	if (e == -ETIME)
		return copy_stuck(k, er);
	e = engine_copy_end(k->copy, k->dump_timeout_s, er);
	k->copy = NULL;
	return e ? e : pr_err(er, -EIO, "the memory the processes share was not copied");
}

/* stop: waits until the memory is off the GPU (staging holds what the
 * store has not taken yet). */
static int copy_off(ckpt *k, perr *er)
{
	if (!k->copy)
		return 0;
	engine_step(k->prog, STEP_COPY);
	int e = engine_copy_wait_off(k->copy, k->dump_timeout_s);
	if (!e)
		return 0;
	if (e == -ETIME)
		return copy_stuck(k, er);
	e = engine_copy_end(k->copy, k->dump_timeout_s, er);
	k->copy = NULL;
	return e;
}

/* The copy's end, after the stall: stop's staged memory drains into the
 * image, recopy's protected copy ends. e is the checkpoint's result so
 * far, back whether its processes run again. */
static int copy_drain(ckpt *k, int e, bool back, perr *er)
{
	if (!k->copy)
		return e;
	engine_step(k->prog, k->protect ? STEP_COPY : STEP_DRAIN);
	perr cerr = { 0 };
	int ce = engine_copy_end(k->copy, k->dump_timeout_s, &cerr);
	k->copy = NULL;
	/* A full store fails CRIU's dump as well (its files go there too,
	 * while the copy runs): then the copy says the cause, unless the
	 * processes could not be brought back, which says more. */
	if (ce && (!e || ((ce == -ENOSPC || ce == -EDQUOT) && back))) {
		e = ce;
		pr_copy(er, &cerr);
	}
	return e;
}

/* stop (t1), and a checkpoint that kills: the memory is off the GPU
 * before the processes run again. */
static int run_stop(ckpt *k, perr *er)
{
	int e = stall_enter(k, er);
	if (!e)
		e = copy_start(k, er);
	if (!e)
		e = stall_freeze(k, er);
	if (!e)
		e = copy_off(k, er);
	bool back = false;
	e = stall_leave(k, e, &back, er);
	return copy_drain(k, e, back, er);
}

/* cow (t1): the processes run again right after the dump, with a CoW
 * table and shadow pool each, and their memory is copied while they
 * run. When members share memory (or have host memory), the copy starts
 * in the stall, as recopy's, and that memory is off the GPU before they
 * run. */
static int run_cow(ckpt *k, perr *er)
{
	int e = stall_enter(k, er);
	bool early = !e && k->shares.unseen;
	if (early) {
		k->protect = true;
		e = cow_tables(k, er);
		if (!e)
			e = copy_start(k, er);
	}
	if (!e)
		e = stall_freeze(k, er);
	if (!e && !early)
		e = cow_tables(k, er);
	if (!e)
		e = copy_shared_off(k, er);
	bool back = false;
	e = stall_leave(k, e, &back, er);
	if (early) {
		e = copy_drain(k, e, back, er);
	} else if (!e) {
		engine_step(k->prog, STEP_COPY);
		copy_opts(k);
		k->co.cow = &k->tables;
		e = engine_copy_out(&k->parked, k->w, &k->co, k->prog, er);
	}
	engine_cow_stats(&k->tables, k->prog);
	return e;
}

/* recopy (t2): the processes run on, their writes tracked, while what
 * they do not write is copied; then the final stall copies only what
 * was written meanwhile. What is not off the GPU when they run again is
 * copy-on-write (protected), so the final stall waits neither for the
 * bus nor, past staging, for the store. */
static int run_recopy(ckpt *k, perr *er)
{
	k->meta.t1_ns = engine_clock_ns(CLOCK_REALTIME); /* tracking starts */
	engine_step(k->prog, STEP_TRACK);
	int e = engine_recopy_track(&k->rc, k->a->traced, k->a->ntraced, k->chunk, k->timeout_ms, er);
	if (!e)
		e = engine_recopy_copy(&k->rc, k->staging.buf, k->staging.bytes, k->prog, er);
	/* The tree may have changed while it ran: the final stall takes it
	 * as it is now. */
	if (!e)
		e = stall_retree(k, er);
	if (e)
		return e; /* nothing was stopped */
	e = stall_enter(k, er);
	k->protect = !k->a->kill && k->parked.n;
	if (!e && k->protect)
		e = cow_tables(k, er);
	if (!e)
		e = copy_start(k, er);
	if (!e)
		e = stall_freeze(k, er);
	if (!e && !k->protect)
		e = copy_off(k, er);
	if (!e && k->protect)
		e = copy_shared_off(k, er);
	/* A copy that failed already is not protected. */
	if (!e && k->copy && k->protect && engine_copy_error(k->copy)) {
		e = engine_copy_end(k->copy, k->dump_timeout_s, er);
		k->copy = NULL;
	}
	bool back = false;
	e = stall_leave(k, e, &back, er);
	e = copy_drain(k, e, back, er);
	if (k->protect)
		engine_cow_stats(&k->tables, k->prog);
	return e;
}

int checkpoint_run(const checkpoint_args *a, perr *er)
{
	ckpt k = { 0 };
	int e = stall_begin(&k, a, er);
	if (!e)
		e = k.recopy ? run_recopy(&k, er) : k.cow ? run_cow(&k, er) : run_stop(&k, er);
	/* A copy whose threads did not end leaves staging and the writer to
	 * them: the job process ends at once (job/main.c), and phosfs clears
	 * the half image. */
	bool hold = a->hold_ms && k.dumped;
	if (engine_copy_abandoned()) {
		perr ignored = { 0 };
		criu_dump_wait(&k.tail, &ignored); /* its snapshots end with it */
		return hold ? stall_hold(&k, e ? e : -EIO, er) : e;
	}
	/* A held tree's parked memory is what its unpark gives back. */
	if (!hold)
		stall_release(&k);
	if (!e)
		e = stall_pages(&k, er);
	if (!e)
		e = stall_publish(&k, er);
	if (hold)
		e = stall_hold(&k, e, er);
	stall_free(&k);
	return e;
}
