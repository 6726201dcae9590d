/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The tracer's side of the state table (common/state.h): made at each
 * registration, kept in step with the buffer table, dropped at park.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/state.h"
#include "tracer.h"

/* Guarded by the allocation lock (alloc.c calls in with it held); closed
 * by the control thread at park, when the gate keeps allocations out. */
static state_header *table;
static int table_fd = -1;
static uint32_t *free_slots;
static uint32_t nfree;

int state_open(void)
{
	if (table)
		return table_fd;
	int fd = memfd_create("phos-state", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)STATE_BYTES) == 0)
		p = mmap(NULL, STATE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = -errno;
		close(fd);
		return e;
	}
	state_header *t = p;
	t->magic = STATE_MAGIC;
	t->version = STATE_VERSION;
	t->pid = getpid();
	t->capacity = STATE_SLOTS;
	/* Published and filled under the allocation lock, so that no
	 * allocation sees it half made. */
	alloc_state_fill(t, fd);
	return fd;
}

void state_publish(state_header *t, int fd)
{
	table = t;
	table_fd = fd;
	nfree = 0;
}

void state_close(void)
{
	if (!table)
		return;
	munmap(table, STATE_BYTES);
	close(table_fd);
	table = NULL;
	table_fd = -1;
	free(free_slots);
	free_slots = NULL;
	nfree = 0;
}

int state_add(uint64_t va, uint64_t size, uint32_t device, uint32_t state)
{
	if (!table)
		return -1;
	uint32_t i;
	if (nfree) {
		i = free_slots[--nfree];
	} else {
		i = atomic_load(&table->used);
		if (i == table->capacity)
			return -1; /* not mirrored; LIST still has it */
		atomic_store(&table->used, i + 1);
	}
	state_slot *s = &state_slots(table)[i];
	s->size = size;
	s->device = device;
	atomic_store(&s->state, state);
	atomic_store(&s->va, va);
	atomic_fetch_add(&table->generation, 1);
	return (int)i;
}

void state_remove(int slot)
{
	if (!table || slot < 0)
		return;
	state_slot *s = &state_slots(table)[slot];
	atomic_store(&s->va, 0);
	atomic_fetch_add(&table->generation, 1);
	uint32_t *v = realloc(free_slots, (nfree + 1) * sizeof(*v));
	if (v) {
		free_slots = v;
		free_slots[nfree++] = (uint32_t)slot;
	}
}

void state_set(int slot, uint32_t state)
{
	if (!table || slot < 0)
		return;
	atomic_store(&state_slots(table)[slot].state, state);
	atomic_fetch_add(&table->generation, 1);
}

void state_stop_only(const char *what)
{
	if (!table)
		return;
	snprintf(table->stop_only, sizeof(table->stop_only), "%s", what);
	atomic_fetch_or(&table->flags, STATE_STOP_ONLY);
	atomic_fetch_add(&table->generation, 1);
}

void state_transfer(int delta)
{
	cow_transfer(delta);
	state_header *t = table;
	if (t)
		atomic_fetch_add_explicit(&t->pcie_pending, (uint32_t)delta, memory_order_relaxed);
}
