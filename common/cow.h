/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The CoW table: what a copy-on-write checkpoint shares between the job
 * that copies a process's memory (engine/cow.c, in phosfs) and the tracer
 * in that process (tracer/cow.c). The job makes it, as a memfd, during the
 * stall, and sends it with WIRE_COW before WIRE_UNPARK; the tracer maps it
 * until the copy ends.
 *
 *   header   sizes, the copy's end, counters both sides read
 *   objects  the process's device memory objects at t1, sorted by VA
 *   chunks   one 32-bit state per chunk of every object
 *   shadows  a bitmap of the shadow pool's slots in use
 *
 * A chunk's t1 bytes leave the GPU once. Its state moves
 *
 *   PENDING -> COPYING -> OFF                    (the job copies the object)
 *   PENDING -> SHADOWING -> SHADOWED -> READING -> OFF
 *        (a call is about to write it: the tracer copies it device to
 *         device into a shadow slot on the call's stream first; the job
 *         copies the shadow)
 *
 * A table in TRACK mode serves a recopy checkpoint instead: it is sent
 * while the process runs on (WIRE_TRACK), has no pool, and every call
 * that may write a chunk sets its COW_DIRTY bit (an unbounded write sets
 * all_dirty); nothing waits. The job copies the chunks that are not dirty
 * (PENDING -> COPYING -> OFF) and, at the final stall, copies again those
 * that are dirty by then. Tracking ends when the process parks.
 *
 * A table in LAZY mode serves a lazy restore: it is sent (WIRE_LAZY)
 * before the restored process runs, has no pool, and holds one state word
 * per object (its `first` is its own index, and `chunk` is unused):
 *
 *   LAZY_ABSENT -> LAZY_FILLING -> LAZY_SENT -> LAZY_PRESENT
 *        (the job makes and fills new memory, sends its fd on the
 *         connection; the tracer maps it at the old VA)
 *
 * A call whose read or write set touches an object that is not PRESENT
 * sets its COW_URGENT bit, which the job fills next, and waits; a call
 * whose set cannot be bounded waits until `off` (objects PRESENT, or freed
 * and skipped) reaches nobjs. The job ends the fill with WIRE_END.
 *
 * Every move is a compare-and-swap, so exactly one side owns each step.
 * The slot of a shadowed chunk is in bits 8-31 of its state. The job
 * bumps `progress` (a futex word) after every move it makes and wakes
 * waiters; the tracer bumps it when a shadow is complete.
 */
#ifndef PHOS_COW_H
#define PHOS_COW_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define COW_MAGIC 0x57434850u /* "PHCW" */
#define COW_VERSION 2

enum cow_chunk_state {
	COW_PENDING = 0,   /* t1 bytes only in the object */
	COW_COPYING = 1,   /* the job is copying them off the object */
	COW_SHADOWING = 2, /* a device-to-device copy into a shadow is queued */
	COW_SHADOWED = 3,  /* the shadow holds them */
	COW_READING = 4,   /* the job is copying the shadow */
	COW_OFF = 5,       /* off the GPU */
};
#define COW_STATE_MASK 0x3fu
#define COW_DIRTY 0x40u  /* TRACK: written since tracking began */
#define COW_URGENT 0x80u /* a call waits for this chunk: copy it first */
#define COW_SLOT_SHIFT 8

enum cow_mode {
	COW_MODE_COW = 0,   /* protect the t1 bytes of a copy-on-write checkpoint */
	COW_MODE_TRACK = 1, /* mark the chunks written, for a recopy checkpoint */
	COW_MODE_LAZY = 2,  /* objects come back while the restored process runs */
};

/* LAZY: the state of an object (its state word, with COW_URGENT). */
enum lazy_object_state {
	LAZY_ABSENT = 0,  /* not back: a call that touches it waits */
	LAZY_FILLING = 1, /* the job is filling new memory from the image */
	LAZY_SENT = 2,    /* its fd is on the way to the tracer */
	LAZY_PRESENT = 3, /* mapped at its VA again (or freed, and skipped) */
};
#define COW_NO_SLOT 0xffffffu

typedef struct cow_header {
	uint32_t magic;
	uint32_t version;
	int32_t pid;       /* the traced process */
	int32_t job;       /* the copying process: if it is gone, the copy is */
	uint32_t nobjs;
	uint32_t chunk;    /* bytes per chunk */
	uint64_t nchunks;
	uint32_t nslots;   /* shadow slots, each `chunk` bytes; 0: no pool */
	uint32_t pool_device;
	uint64_t pool_bytes;
	_Atomic uint32_t active;   /* 1 while the copy runs */
	_Atomic uint32_t progress; /* futex word, bumped on every move */
	_Atomic uint32_t waiters;  /* tracer threads waiting on progress */
	_Atomic uint32_t urgent;   /* chunks marked COW_URGENT and not yet taken */
	_Atomic uint32_t pcie_pending; /* the application's host transfers in flight */
	uint32_t mode;             /* enum cow_mode */
	_Atomic uint64_t off;      /* chunks OFF */
	/* Kept by the tracer. */
	_Atomic uint64_t shadows, shadow_bytes;
	_Atomic uint64_t waits, wait_ns;
	_Atomic uint64_t net_waits, net_wait_ns;
	_Atomic uint32_t all_dirty; /* TRACK: a write the tracer could not bound */
	uint8_t pad[12];
} cow_header;

typedef struct cow_object {
	uint64_t va, size;
	uint64_t first;         /* index of its first chunk */
	uint32_t device;
	_Atomic uint32_t freed; /* the application freed it: nothing writes it */
} cow_object;

static inline uint64_t cow_table_bytes(uint32_t nobjs, uint64_t nchunks, uint32_t nslots)
{
	return sizeof(cow_header) + (uint64_t)nobjs * sizeof(cow_object) + nchunks * sizeof(uint32_t) +
	       ((uint64_t)nslots + 63) / 64 * 8 + 8;
}

static inline cow_object *cow_objects(cow_header *h)
{
	return (cow_object *)(h + 1);
}

static inline _Atomic uint32_t *cow_chunks(cow_header *h)
{
	return (_Atomic uint32_t *)(cow_objects(h) + h->nobjs);
}

static inline _Atomic uint64_t *cow_slots(cow_header *h)
{
	uintptr_t p = (uintptr_t)(cow_chunks(h) + h->nchunks);
	return (_Atomic uint64_t *)((p + 7) & ~(uintptr_t)7);
}

/* The futex word w: wake every waiter, or wait while it holds seen (at
 * most ns nanoseconds). */
static inline void cow_futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline void cow_futex_wait(_Atomic uint32_t *w, uint32_t seen, long ns)
{
	struct timespec ts = { ns / 1000000000L, ns % 1000000000L };
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static inline uint64_t cow_chunks_of(uint64_t size, uint32_t chunk)
{
	return (size + chunk - 1) / chunk;
}

#endif
