/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Device memory the members of a tree share (shared.h).
 */
#include <errno.h>
#include <linux/kcmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shared.h"

/* How the open files of fds a and b (of this process) compare in the
 * kernel's order (kcmp: 0 one file, <0 a first, >0 b first); 2 when the
 * kernel does not order them. */
static int file_order(int a, int b)
{
	pid_t me = getpid();
	long r = syscall(SYS_kcmp, me, me, KCMP_FILE, a, b);
	return r == 0 ? 0 : r == 1 ? -1 : r == 2 ? 1 : 2;
}

/* An open file that may own imports: an object's fd (the application's
 * own, or one the tracer gave another process for a legacy IPC handle),
 * or an alias's (an fd its owner exported), with the index of the object
 * in rest. */
typedef struct owner_file {
	int fd, owner;
	int seq; /* objects before aliases, each in order: the first wins */
} owner_file;

static int by_seq(const void *a, const void *b)
{
	const owner_file *x = a, *y = b;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

/* By the kernel's order of open files, then by seq; *unordered (arg) is
 * set where the kernel does not order two files. */
static int by_file(const void *a, const void *b, void *unordered)
{
	int c = file_order(((const owner_file *)a)->fd, ((const owner_file *)b)->fd);
	if (c == 2) {
		*(bool *)unordered = true;
		c = 0;
	}
	return c ? c : by_seq(a, b);
}

/* The files that own imports (*n of them, the caller frees them; NULL:
 * out of memory), sorted by by_file, or by seq alone where the kernel
 * does not order them (*sorted false). */
static owner_file *owner_files(const engine_parked *rest, const engine_parked *alias, const int *at, int *n,
			       bool *sorted)
{
	owner_file *v = calloc((size_t)(rest->n + alias->n) + 1, sizeof(*v));
	*n = 0;
	if (!v)
		return NULL;
	for (int k = 0; k < rest->n; k++)
		if (rest->objs[k].flags & (WIRE_OBJ_APP | WIRE_OBJ_EXPORTED)) {
			v[*n] = (owner_file){ rest->fds[k], k, *n };
			++*n;
		}
	for (int k = 0; k < alias->n; k++)
		if (at[k] >= 0) {
			v[*n] = (owner_file){ alias->fds[k], at[k], *n };
			++*n;
		}
	bool unordered = false;
	qsort_r(v, (size_t)*n, sizeof(*v), by_file, &unordered);
	if (unordered)
		qsort(v, (size_t)*n, sizeof(*v), by_seq);
	*sorted = !unordered;
	return v;
}

/* The index in rest of the object whose file (files, n) is fd's open
 * file; or -1. Sorted files are searched in log time, others one by one. */
static int owner_of(const owner_file *files, int n, bool sorted, int fd)
{
	int lo = 0;
	if (sorted) { /* the first file not before fd's */
		for (int hi = n; lo < hi;) {
			int mid = lo + (hi - lo) / 2;
			if (file_order(files[mid].fd, fd) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
	} else {
		while (lo < n && file_order(files[lo].fd, fd) != 0)
			lo++;
	}
	return lo < n && file_order(files[lo].fd, fd) == 0 ? files[lo].owner : -1;
}

/* Splits parked into rest, imports and aliases (their fds moved, not
 * duplicated); -ENOMEM leaves parked whole and the three to be freed
 * without their fds. */
static int split(const engine_parked *parked, engine_parked *rest, engine_parked *imp, engine_parked *alias)
{
	for (int k = 0; k < parked->n; k++) {
		uint32_t f = parked->objs[k].flags;
		engine_parked *to = f & WIRE_OBJ_ALIAS ? alias : f & WIRE_OBJ_IMPORTED ? imp : rest;
		if (engine_parked_add(to, &parked->objs[k], &parked->fds[k], parked->pids[k], 1))
			return -ENOMEM;
	}
	return 0;
}

/* The index in rest of the application's object `key` of process pid,
 * or -1. */
static int object_of(const engine_parked *rest, pid_t pid, uint64_t key)
{
	for (int k = 0; k < rest->n; k++)
		if (rest->pids[k] == pid && rest->objs[k].key == key && (rest->objs[k].flags & WIRE_OBJ_APP))
			return k;
	return -1;
}

int engine_shares_take(engine_parked *parked, engine_shares *out, perr *er)
{
	memset(out, 0, sizeof(*out));
	int nmove = 0;
	for (int k = 0; k < parked->n; k++) {
		nmove += (parked->objs[k].flags & (WIRE_OBJ_IMPORTED | WIRE_OBJ_ALIAS)) != 0;
		if (parked->objs[k].flags & WIRE_OBJ_HOST) { /* the CPU writes it */
			parked->objs[k].flags |= WIRE_OBJ_SHARED;
			out->unseen++;
		}
	}
	if (!nmove)
		return 0;
	engine_parked rest = { 0 }, imp = { 0 }, alias = { 0 };
	int *owner = NULL, *at = NULL, nfiles = 0;
	owner_file *files = NULL;
	bool sorted = false;
	int e = split(parked, &rest, &imp, &alias);
	if (!e) {
		owner = calloc(imp.n ? (size_t)imp.n : 1, sizeof(*owner));
		at = calloc(alias.n ? (size_t)alias.n : 1, sizeof(*at));
		e = owner && at ? 0 : -ENOMEM;
	}
	if (!e) {
		for (int k = 0; k < alias.n; k++)
			at[k] = object_of(&rest, alias.pids[k], alias.objs[k].key);
		/* Sorted once, the owners are found in log time each. */
		files = owner_files(&rest, &alias, at, &nfiles, &sorted);
		e = files ? 0 : -ENOMEM;
	}
	if (e) {
		pr_err(er, e, "out of memory");
		goto fail;
	}
	for (int i = 0; i < imp.n && !e; i++) {
		int k = owner_of(files, nfiles, sorted, imp.fds[i]);
		if (k < 0)
			e = pr_err(er, -EOPNOTSUPP,
				   "process %d maps device memory (at 0x%llx) that another process exported, and that "
				   "process is not a traced member of the checkpoint",
				   (int)imp.pids[i], (unsigned long long)imp.objs[i].va);
		else
			owner[i] = k;
	}
	if (e)
		goto fail;
	for (int i = 0; i < imp.n; i++) {
		out->unseen += !(rest.objs[owner[i]].flags & WIRE_OBJ_SHARED);
		rest.objs[owner[i]].flags |= WIRE_OBJ_SHARED;
		imp.objs[i].size = rest.objs[owner[i]].size;
		imp.objs[i].device = rest.objs[owner[i]].device;
	}
	free(files);
	free(at);
	rest.ndev = parked->ndev;
	memcpy(rest.dev_uuid, parked->dev_uuid, sizeof(rest.dev_uuid));
	engine_parked_drop(parked);
	*parked = rest;
	out->imported = imp;
	out->owner = owner;
	out->aliases = alias;
	return 0;
fail:
	free(files);
	free(at);
	free(owner);
	engine_parked_drop(&rest);
	engine_parked_drop(&imp);
	engine_parked_drop(&alias);
	out->unseen = 0;
	return e;
}

void engine_shares_free(engine_shares *s)
{
	engine_parked_free(&s->imported);
	engine_parked_free(&s->aliases);
	free(s->owner);
	memset(s, 0, sizeof(*s));
}

int engine_shares_view(const engine_parked *all, const engine_shares *s, pid_t pid, engine_parked *out)
{
	memset(out, 0, sizeof(*out));
	engine_parked mine = engine_parked_of(all, pid), theirs = engine_parked_of(&s->imported, pid),
		      names = engine_parked_of(&s->aliases, pid);
	if ((mine.n && engine_parked_add(out, mine.objs, mine.fds, pid, mine.n)) ||
	    (theirs.n && engine_parked_add(out, theirs.objs, theirs.fds, pid, theirs.n)) ||
	    (names.n && engine_parked_add(out, names.objs, names.fds, pid, names.n))) {
		engine_parked_drop(out);
		return -ENOMEM;
	}
	return 0;
}

int engine_shares_restored(const phosimg_info *in, const engine_parked *filled, const bool *sel, pid_t pid,
			   engine_parked *out)
{
	memset(out, 0, sizeof(*out));
	engine_parked mine = engine_parked_of(filled, pid);
	if (mine.n && engine_parked_add(out, mine.objs, mine.fds, pid, mine.n))
		goto oom;
	for (uint32_t i = 0; i < in->share_count; i++) {
		const phosimg_share *sh = &in->shares[i];
		if (sh->pid != pid)
			continue;
		int at = 0; /* its place among the filled objects */
		for (uint32_t k = 0; k < sh->object; k++)
			at += !sel || sel[k];
		if ((sel && !sel[sh->object]) || at >= filled->n) {
			engine_parked_drop(out);
			return -EBADMSG;
		}
		const phosimg_object *o = &in->objects[sh->object];
		wire_object rec = { .key = sh->key, .size = o->size, .device = o->device,
				    .flags = WIRE_OBJ_APP | WIRE_OBJ_IMPORTED };
		if (engine_parked_add(out, &rec, &filled->fds[at], pid, 1))
			goto oom;
	}
	return 0;
oom:
	engine_parked_drop(out);
	return -ENOMEM;
}

int engine_shares_record(const engine_shares *s, const engine_copy *c, phosimg_writer *w, perr *er)
{
	for (int i = 0; i < s->imported.n; i++) {
		phosimg_share sh = { .pid = s->imported.pids[i],
				     .key = (uint32_t)s->imported.objs[i].key,
				     .object = engine_copy_object_id(c, s->owner[i]) };
		int e = phosimg_writer_add_share(w, &sh);
		if (e)
			return pr_perror(er, e, "recording process %d's import of another member's memory",
					 (int)sh.pid);
	}
	return 0;
}
