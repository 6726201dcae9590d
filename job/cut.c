/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The cut of an NCCL job (stall.h; doc/ARCHITECTURE.md, "NCCL jobs"): no
 * collective may be half launched when the members quiesce. Every traced
 * member is asked at once to hold its NCCL operations back and say how
 * many each communicator has issued; each communicator's target is the
 * largest count any of its ranks reached (targets()); each member runs up
 * to its targets and waits before its next operation. Then the park
 * drains the streams: nothing of a collective is in flight anywhere.
 *
 * targets() takes the counts and nothing else: a job across several
 * nodes feeds it every node's counts from a store they share.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stall.h"

static void *begin_one(void *arg)
{
	part *p = arg;
	p->e = engine_cut_begin(p->k->m[p->i].pid, p->conn, p->k->timeout_ms, &p->comms, &p->ncomms, &p->er);
	return NULL;
}

static void *reach_one(void *arg)
{
	part *p = arg;
	p->e = p->ntargets ? engine_cut_reach(p->k->m[p->i].pid, p->conn, p->targets, p->ntargets, p->k->timeout_ms,
					       &p->er)
			   : 0;
	return NULL;
}

/* One communicator as the members see it: the largest count, and how
 * many members have it. */
typedef struct seen {
	uint64_t id, max;
	int members, nranks;
} seen;

static seen *find_seen(seen *s, size_t n, uint64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (s[i].id == id)
			return &s[i];
	return NULL;
}

/* Each member's targets (v[j].targets), from every member's counts.
 * Errors: -EOPNOTSUPP for a communicator that cannot be cut, -ENOMEM. */
static int targets(part *v, int n, perr *er)
{
	size_t total = 0;
	for (int j = 0; j < n; j++)
		total += v[j].ncomms;
	seen *s = calloc(total ? total : 1, sizeof(*s));
	if (!s)
		return pr_err(er, -ENOMEM, "out of memory");
	size_t ns = 0;
	int e = 0;
	for (int j = 0; j < n && !e; j++)
		for (size_t c = 0; c < v[j].ncomms && !e; c++) {
			const wire_nccl_comm *w = &v[j].comms[c];
			if (w->flags & WIRE_NCCL_UNNAMED) {
				e = pr_err(er, -EOPNOTSUPP,
					   "process %d has an NCCL communicator made before phos saw it: its ranks "
					   "cannot agree on a cut",
					   (int)v[j].k->m[v[j].i].pid);
				break;
			}
			seen *x = find_seen(s, ns, w->id);
			if (!x) {
				x = &s[ns++];
				*x = (seen){ .id = w->id, .nranks = w->nranks };
			}
			x->max = w->count > x->max ? w->count : x->max;
			x->members++;
		}
	for (size_t i = 0; i < ns && !e; i++)
		if (s[i].members != s[i].nranks)
			e = pr_err(er, -EOPNOTSUPP,
				   "NCCL communicator %016" PRIx64 " has %d ranks, %d of them in this job: a cut of "
				   "ranks on other machines is not built yet",
				   s[i].id, s[i].nranks, s[i].members);
	for (int j = 0; j < n && !e; j++) {
		v[j].targets = calloc(v[j].ncomms ? v[j].ncomms : 1, sizeof(*v[j].targets));
		if (!v[j].targets) {
			e = pr_err(er, -ENOMEM, "out of memory");
			break;
		}
		for (size_t c = 0; c < v[j].ncomms; c++)
			v[j].targets[c] = (wire_nccl_target){ v[j].comms[c].id,
							      find_seen(s, ns, v[j].comms[c].id)->max };
		v[j].ntargets = v[j].ncomms;
	}
	free(s);
	return e;
}

/* The cut for status: "PID NAME=TARGET …; …". */
static void describe(ckpt *k, const part *v, int n)
{
	char *out = k->prog->cut;
	size_t cap = sizeof(k->prog->cut), at = 0;
	out[0] = 0;
	for (int j = 0; j < n && at < cap; j++) {
		if (!v[j].ntargets)
			continue;
		at += (size_t)snprintf(out + at, cap - at, "%s%d", at ? "; " : "", (int)k->m[v[j].i].pid);
		for (size_t c = 0; c < v[j].ntargets && at < cap; c++)
			at += (size_t)snprintf(out + at, cap - at, " %016" PRIx64 "=%" PRIu64, v[j].targets[c].id,
					       v[j].targets[c].target);
	}
}

static void free_parts(part *v, int n)
{
	for (int j = 0; j < n; j++) {
		free(v[j].comms);
		free(v[j].targets);
	}
	free(v);
}

int cut_run(ckpt *k, perr *er)
{
	int n = 0;
	part *v = calloc(k->a->ntraced ? (size_t)k->a->ntraced : 1, sizeof(*v));
	if (!v)
		return pr_err(er, -ENOMEM, "out of memory");
	for (int t = 0; t < k->a->ntraced; t++) {
		int i = engine_tree_member(k->m, k->n, k->a->traced[t].pid);
		if (i >= 0)
			v[n++] = (part){ .k = k, .i = i, .conn = k->a->traced[t].conn };
	}
	engine_step(k->prog, STEP_CUT);
	stall_at_once(v, n, begin_one);
	k->cut = true; /* those that answered hold their operations now */
	int e = stall_first_failure(v, n, er);
	size_t comms = 0;
	for (int j = 0; j < n; j++)
		comms += v[j].ncomms;
	if (!e && comms) {
		e = targets(v, n, er);
		if (!e) {
			describe(k, v, n);
			stall_at_once(v, n, reach_one);
			e = stall_first_failure(v, n, er);
		}
	}
	free_parts(v, n);
	return e;
}

void cut_end(ckpt *k)
{
	if (!k->cut)
		return;
	for (int t = 0; t < k->a->ntraced; t++) {
		int i = engine_tree_member(k->m, k->n, k->a->traced[t].pid);
		if (i >= 0 && !k->ms[i].parked)
			engine_cut_end(k->a->traced[t].conn);
	}
	k->cut = false;
}
