/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint of processes that share device memory (NCCL's ranks)
 * finds, for every import, the object it came from (engine_shares_take,
 * engine/shared.c): by the open file the importer got, which is the
 * owner's object itself or an fd the owner exported of it (an alias).
 *
 *   - two processes with 300 objects, each exporting 100 that the other
 *     imports: every import gets its owner, the owner is marked shared,
 *     and the import takes its size;
 *   - a process that imports its own object directly finds it;
 *   - an import whose owner is not parked fails with EOPNOTSUPP, naming
 *     the process, and leaves the parked objects as they were.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../engine/shared.h"
#include "tap.h"

static void add(engine_parked *p, pid_t pid, uint64_t key, uint32_t flags, uint64_t size, int fd)
{
	wire_object o = { .key = key, .size = size, .flags = flags };
	if (fd < 0 || engine_parked_add(p, &o, &fd, pid, 1))
		bail("cannot add a record: %s", fd < 0 ? strerror(errno) : "out of memory");
}

static int memfd(void)
{
	return memfd_create("obj", MFD_CLOEXEC);
}

int main(void)
{
	plan(3);

	/* 1. Two ranks, 300 objects each, 100 shared each way, in a mixed
	 * order; object k of pid p has size (p * 1000 + k) pages. */
	engine_parked p = { 0 };
	for (pid_t pid = 1; pid <= 2; pid++)
		for (int k = 0; k < 300; k++)
			add(&p, pid, (uint64_t)k, WIRE_OBJ_APP, ((uint64_t)pid * 1000 + (uint64_t)k) << 12, memfd());
	for (int k = 99; k >= 0; k--)
		for (pid_t pid = 1; pid <= 2; pid++) {
			int fd = memfd();
			add(&p, pid, (uint64_t)k * 3, WIRE_OBJ_APP | WIRE_OBJ_ALIAS, 0, fd);
			add(&p, 3 - pid, 5000u + (uint64_t)k, WIRE_OBJ_APP | WIRE_OBJ_IMPORTED, 0, dup(fd));
		}
	engine_shares s;
	perr er = { 0 };
	int e = engine_shares_take(&p, &s, &er);
	int right = 0, shared = 0;
	for (int i = 0; !e && i < s.imported.n; i++) {
		const wire_object *imp = &s.imported.objs[i], *own = &p.objs[s.owner[i]];
		pid_t owner_pid = 3 - s.imported.pids[i];
		uint64_t k = (imp->key - 5000u) * 3;
		right += p.pids[s.owner[i]] == owner_pid && own->key == k &&
			 own->size == ((uint64_t)owner_pid * 1000 + k) << 12 && imp->size == own->size;
	}
	for (int i = 0; !e && i < p.n; i++)
		shared += (p.objs[i].flags & WIRE_OBJ_SHARED) != 0;
	ok(!e && p.n == 600 && s.imported.n == 200 && s.aliases.n == 200 && right == 200 && shared == 200,
	   "200 imports between two processes of 300 objects each find their owners (%d right, %d shared; %d)", right,
	   shared, e);
	engine_shares_free(&s);
	engine_parked_free(&p);

	/* 2. A process that imports its own object, by that object's fd. */
	memset(&p, 0, sizeof(p));
	int own = memfd();
	add(&p, 7, 1, WIRE_OBJ_APP, 4096, memfd());
	add(&p, 7, 2, WIRE_OBJ_APP, 8192, own);
	add(&p, 7, 9, WIRE_OBJ_APP | WIRE_OBJ_IMPORTED, 0, dup(own));
	e = engine_shares_take(&p, &s, &er);
	ok(!e && s.imported.n == 1 && p.objs[s.owner[0]].key == 2 && s.imported.objs[0].size == 8192,
	   "a process that imports its own object finds it (%d)", e);
	engine_shares_free(&s);
	engine_parked_free(&p);

	/* 3. An import nobody parked. */
	memset(&p, 0, sizeof(p));
	add(&p, 7, 1, WIRE_OBJ_APP, 4096, memfd());
	add(&p, 8, 2, WIRE_OBJ_APP | WIRE_OBJ_IMPORTED, 0, memfd());
	er = (perr){ 0 };
	e = engine_shares_take(&p, &s, &er);
	ok(e == -EOPNOTSUPP && strstr(er.msg, "process 8") && p.n == 2,
	   "an import whose owner is not parked fails, naming its process: %s", er.msg);
	engine_parked_free(&p);
	return done();
}
