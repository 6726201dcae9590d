/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The host staging pool, made once: a memfd of --staging bytes. Each
 * checkpoint's job maps the part it needs and registers (pins) it with
 * the driver. Its pages are allocated and cleared by the first job that
 * touches them, and stay in the memfd for the next ones, so no later job
 * pays for that again.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

#include "phosfs.h"

static int fd = -1;         /* set once at start, before any job */
static _Atomic bool in_use; /* a job has it: one at a time */

int staging_start(uint64_t bytes)
{
	fd = memfd_create("phos-staging", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
		int e = -errno;
		if (fd >= 0)
			close(fd);
		fd = -1;
		return e;
	}
	return 0;
}

int staging_take(void)
{
	bool no = false;
	return fd >= 0 && atomic_compare_exchange_strong(&in_use, &no, true) ? fd : -1;
}

void staging_give(void)
{
	atomic_store(&in_use, false);
}
