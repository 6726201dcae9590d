/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The state table: a memfd the tracer creates and passes to phosfs with its
 * HELLO, mapped shared by both, for coordination that must cost no system
 * call on the application's hot path.
 *
 *   header   who, how many slots, and counters both sides read
 *   slots    one per live allocation: VA, size, device, state
 *
 * The tracer writes the slots (under its allocation lock), the
 * pcie_pending counter and the flags; phosfs writes `copying`. The tracer unmaps and
 * closes the table when it parks, and makes a new one, sent with its
 * resuming HELLO, when it unparks.
 */
#ifndef PHOS_STATE_H
#define PHOS_STATE_H

#include <stdatomic.h>
#include <stdint.h>

#define STATE_MAGIC 0x54534850u /* "PHST" */
#define STATE_VERSION 1
#define STATE_SLOTS (1u << 20)

typedef struct state_header {
	uint32_t magic;
	uint32_t version;
	int32_t pid;
	uint32_t capacity;          /* slots */
	_Atomic uint32_t used;      /* slots ever used: phosfs scans [0, used) */
	_Atomic uint32_t pcie_pending; /* the application's transfers to or from the host in flight */
	_Atomic uint32_t copying;   /* set by phosfs while it copies device memory */
	_Atomic uint32_t flags;     /* STATE_* */
	_Atomic uint64_t generation; /* bumped on every change of a slot */
	char stop_only[24];         /* with STATE_STOP_ONLY: what it cannot park, a short phrase */
} state_header;
/* The process uses memory the tracer cannot park (managed memory, say),
 * found since its HELLO: only a stop checkpoint, which lets the driver's
 * checkpoint save that memory, can take it. */
#define STATE_STOP_ONLY 0x1u

typedef struct state_slot {
	_Atomic uint64_t va; /* 0: a free slot */
	uint64_t size;
	uint32_t device;
	_Atomic uint32_t state; /* enum wire_buffer_state */
	uint64_t reserved;
} state_slot;

#define STATE_BYTES (sizeof(state_header) + (uint64_t)STATE_SLOTS * sizeof(state_slot))

static inline state_slot *state_slots(state_header *h)
{
	return (state_slot *)(h + 1);
}

#endif
