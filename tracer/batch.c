/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Batches of parked objects on their way to phosfs (tracer.h, obj_batch). */
#include <unistd.h>

#include "tracer.h"

void batch_init(obj_batch *b, alloc_emit_fn emit, void *arg)
{
	b->n = 0;
	b->err = 0;
	b->emit = emit;
	b->arg = arg;
}

static void flush(obj_batch *b)
{
	if (b->n && !b->err)
		b->err = b->emit(b->recs, b->fds, b->n, b->arg);
	for (int k = 0; k < b->n; k++)
		close(b->fds[k]);
	b->n = 0;
}

void batch_add(obj_batch *b, const wire_object *rec, int fd)
{
	b->recs[b->n] = *rec;
	b->fds[b->n++] = fd;
	if (b->n == OBJ_BATCH)
		flush(b);
}

int batch_finish(obj_batch *b)
{
	flush(b);
	return b->err;
}
