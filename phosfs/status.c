/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The status files of /phos (phosfs.h: status_proc, status_root,
 * status_restore): key: value lines, one fact a line, made whole at open.
 * status.json is made from them (status-json.c), so the two say the same.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/pidns.h"
#include "../image-format/phosimg.h"
#include "phosfs.h"

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

/* A checkpoint's copy: where its bytes are, and what CoW cost. */
static void copy_status(const engine_progress *p, text *out)
{
	uint64_t total = atomic_load(&p->total);
	int proto = atomic_load(&p->protocol);
	text_add(out, "protocol: %s\n", proto == PHOSIMG_PROTO_COW ? "cow" : proto == PHOSIMG_PROTO_RECOPY ? "recopy" : "stop");
	if (p->cut[0])
		text_add(out, "nccl cut: %.*s\n", (int)sizeof(p->cut), p->cut);
	if (atomic_load(&p->park_handed_ns))
		text_add(out, "park ms: handed over %.1f released %.1f kept %.1f (%" PRIu64 " objects)\n",
		    ms(atomic_load(&p->park_handed_ns)), ms(atomic_load(&p->park_released_ns)),
		    ms(atomic_load(&p->park_kept_ns)), atomic_load(&p->park_objects));
	if (atomic_load(&p->criu_frozen_us))
		text_add(out,
		    "criu dump ms: freezing %.1f frozen %.1f memdump %.1f memwrite %.1f\n"
		    "criu pages: %" PRIu64 " written, %" PRIu64 " shared\n",
		    atomic_load(&p->criu_freezing_us) / 1e3, atomic_load(&p->criu_frozen_us) / 1e3,
		    atomic_load(&p->criu_memdump_us) / 1e3, atomic_load(&p->criu_memwrite_us) / 1e3,
		    atomic_load(&p->criu_pages), atomic_load(&p->criu_shpages));
	text_add(out, "off gpu: %" PRIu64 "/%" PRIu64 " bytes\n", atomic_load(&p->off), total);
	text_add(out, "in image: %" PRIu64 "/%" PRIu64 " bytes\n", atomic_load(&p->done), total);
	text_add(out, "staging: %" PRIu64 " bytes (pinned in %.1f ms)\n", atomic_load(&p->staging_bytes),
	    ms(atomic_load(&p->staging_pin_ns)));
	if (atomic_load(&p->off_ns))
		text_add(out, "off gpu at ms: %.1f\n", ms(atomic_load(&p->off_ns)));
	if (atomic_load(&p->publish_ns))
		text_add(out, "published at ms: %.1f\n", ms(atomic_load(&p->publish_ns)));
	static const char *const released[] = { "", "resume (it ran on)", "kill (it ended)",
						"none in time (it ran on)" };
	int how = atomic_load(&p->released);
	if (how > 0 && how <= ENGINE_RELEASE_DEADLINE)
		text_add(out, "released: %s\n", released[how]);
	if (proto == PHOSIMG_PROTO_RECOPY)
		text_add(out, "recopy: %" PRIu64 " bytes from the copy while running, %" PRIu64 " dirty bytes in the final stall\n",
		    atomic_load(&p->recopy_clean), atomic_load(&p->recopy_dirty));
	if (proto == PHOSIMG_PROTO_COW || proto == PHOSIMG_PROTO_RECOPY)
		text_add(out,
		    "cow tables ms: %.1f\ncow shadow pool: %" PRIu64 " bytes\ncow shadows: %" PRIu64 " (%" PRIu64
		    " bytes)\ncow waits: %" PRIu64 " (%.1f ms)\n"
		    "safety-net waits: %" PRIu64 " (%.1f ms)\n",
		    ms(atomic_load(&p->cow_prepare_ns)), atomic_load(&p->shadow_pool_bytes), atomic_load(&p->shadows),
		    atomic_load(&p->shadow_bytes),
		    atomic_load(&p->waits),
		    ms(atomic_load(&p->wait_ns)), atomic_load(&p->net_waits), ms(atomic_load(&p->net_wait_ns)));
}

/* What a restore showed: how long until the tree ran and until all its
 * memory was back, and the calls that waited for memory meanwhile. */
static void restore_status(engine_progress *p, text *out)
{
	bool lazy = atomic_load(&p->lazy);
	text_add(out, "restore: %s\n", lazy ? "lazy" : "eager");
	if (atomic_load(&p->resume_ns))
		text_add(out, "resumed ms: %.1f\n", ms(atomic_load(&p->resume_ns)));
	if (atomic_load(&p->full_ns))
		text_add(out, "fully restored ms: %.1f\n", ms(atomic_load(&p->full_ns)));
	if (atomic_load(&p->beside_driver_ns))
		text_add(out, "beside criu ms: page checksums %.1f driver %.1f\n", ms(atomic_load(&p->beside_sums_ns)),
		    ms(atomic_load(&p->beside_driver_ns)));
	if (atomic_load(&p->criu_restore_us))
		text_add(out, "criu restore ms: forking %.1f restore %.1f\ncriu pages restored: %" PRIu64 "\n",
		    atomic_load(&p->criu_forking_us) / 1e3, atomic_load(&p->criu_restore_us) / 1e3,
		    atomic_load(&p->criu_restored_pages));
	if (atomic_load(&p->lazy_pages))
		text_add(out, "cpu pages: lazy\n");
	if (atomic_load(&p->pages_ns))
		text_add(out, "cpu pages back ms: %.1f\n", ms(atomic_load(&p->pages_ns)));
	if (lazy)
		text_add(out,
		    "on-demand waits: %" PRIu64 " (%.1f ms)\nsafety-net waits: %" PRIu64 " (%.1f ms)\n"
		    "filled on demand: %" PRIu64 " objects\n",
		    atomic_load(&p->waits), ms(atomic_load(&p->wait_ns)), atomic_load(&p->net_waits),
		    ms(atomic_load(&p->net_wait_ns)), atomic_load(&p->on_demand));
	/* Written once, before the process runs (restore_begin). */
	if (*p->devices)
		text_add(out, "moved gpus: %.*s\n", (int)sizeof(p->devices), p->devices);
}

/* "last checkpoint: N" from the store, for a pid whose checkpoints an
 * earlier phosfs made. */
static void stored_latest(pid_t pid, text *out)
{
	char p[PATH_MAX], link[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%d/latest", phosfs_store, (int)pid);
	ssize_t n = readlink(p, link, sizeof(link) - 1);
	if (n > 0 && (size_t)n < sizeof(link)) {
		link[n] = 0;
		text_add(out, "last checkpoint: %s\n", link);
	}
}

/* The job part of a process's status. */
static void job_status(pid_t pid, target *t, text *out)
{
	/* Before t's lock: the schedule's is taken before it elsewhere. */
	schedule_status(pid, out);
	if (!t) {
		text_add(out, "job: none\n");
		stored_latest(pid, out);
		text_add(out, "error: none\n");
		return;
	}
	pthread_mutex_lock(&t->lock);
	if (t->busy && !t->sh) {
		text_add(out, "job: %s\nstep: waiting\n", t->job);
	} else if (t->busy && t->sh) {
		engine_progress *p = &t->sh->prog;
		text_add(out, "job: %s\n", t->job);
		text_add(out, "step: %s\n", engine_step_name(atomic_load(&p->step)));
		text_add(out, "progress: %" PRIu64 "/%" PRIu64 " bytes\n", atomic_load(&p->done), atomic_load(&p->total));
		if (t->kind == CTL_CHECKPOINT) {
			if (atomic_load(&p->stall_ns))
				text_add(out, "stall ms: %.1f\n", ms(atomic_load(&p->stall_ns)));
			text_add(out, "steps ms:");
			for (int st = STEP_PARK; st < STEP_DONE; st++)
				if (atomic_load(&p->step_ns[st]))
					text_add(out, " %s %.1f", engine_step_name(st), ms(atomic_load(&p->step_ns[st])));
			text_add(out, "\n");
			copy_status(p, out);
		}
	} else {
		text_add(out, "job: none\n");
		if (*t->job)
			text_add(out, "last job: %s: %s\n", t->job, t->result ? "failed" : "done");
		if (*t->job && t->kind == CTL_CHECKPOINT)
			text_add(out, "stall ms: %.1f\n", t->last_stall_ns / 1e6);
		if (*t->job && t->kind == CTL_CHECKPOINT) {
			/* In the order the job goes through them. */
			static const int ckpt[] = { STEP_CUT,    STEP_PARK,   STEP_LOCK,  STEP_DUMP,   STEP_COPY,
						    STEP_UNLOCK, STEP_UNPARK, STEP_DRAIN, STEP_PAGES,  STEP_PUBLISH, STEP_HOLD };
			text_add(out, "steps ms:");
			for (size_t i = 0; i < sizeof(ckpt) / sizeof(*ckpt); i++)
				if (t->last_step_ns[ckpt[i]])
					text_add(out, " %s %.1f", engine_step_name(ckpt[i]), t->last_step_ns[ckpt[i]] / 1e6);
			text_add(out, "\n");
			copy_status(&t->last_prog, out);
		}
	}
	if (*t->last)
		text_add(out, "last checkpoint: %s\n", t->last);
	else
		stored_latest(pid, out);
	text_add(out, "error: %s\n", *t->error ? t->error : "none");
	pthread_mutex_unlock(&t->lock);
}

/* The restore's steps, in the order it goes through them. */
static void restore_steps(engine_progress *p, text *out)
{
	static const int rest[] = { STEP_PREPARE, STEP_PIDWAIT, STEP_FILL, STEP_RESTORE,
				    STEP_UNLOCK,  STEP_UNPARK,  STEP_LAZY };
	text_add(out, "steps ms:");
	for (size_t i = 0; i < sizeof(rest) / sizeof(*rest); i++)
		if (atomic_load(&p->step_ns[rest[i]]))
			text_add(out, " %s %.1f", engine_step_name(rest[i]), ms(atomic_load(&p->step_ns[rest[i]])));
	text_add(out, "\n");
}

static const char *const restore_state_name[] = { "queued", "running", "resumed", "done", "failed" };

/* One restore, as /restores/<id> shows it. */
void status_restore(restore_view *v, text *out)
{
	bool live = v->state == RESTORE_RUNNING || v->state == RESTORE_RESUMED;
	text_add(out, "id: %u\njob: %s\nstate: %s\n", v->id, v->job, restore_state_name[v->state]);
	if (v->state == RESTORE_QUEUED)
		text_add(out, "queue position: %d\n", v->position);
	if (live) {
		engine_progress *p = &v->prog;
		text_add(out, "step: %s\n", engine_step_name(atomic_load(&p->step)));
		text_add(out, "progress: %" PRIu64 "/%" PRIu64 " bytes\n", atomic_load(&p->done), atomic_load(&p->total));
	}
	if (v->pid > 0)
		text_add(out, "restored pid: %d\n", (int)v->pid);
	if (v->state != RESTORE_QUEUED) {
		restore_status(&v->prog, out);
		restore_steps(&v->prog, out);
	}
	text_add(out, "log: %s\n", v->log);
	if (v->state == RESTORE_FAILED) {
		const char *name = strerrorname_np(-v->result);
		text_add(out, "errno: %d (%s)\n", -v->result, name ? name : "?");
	}
	text_add(out, "error: %s\n", v->state == RESTORE_FAILED ? v->error : "none");
}

/* /status: the restores running and queued, and the outcome of the last
 * one that ended. */
int status_root(text *out)
{
	restore_view *v;
	size_t n;
	int running, queued;
	if (restore_views(&v, &n, &running, &queued))
		return -ENOMEM;
	text_add(out, "restores: %d running, %d queued (at most %d side by side, %d queued)\n", running, queued,
	    phosfs_restores, phosfs_restore_queue);
	restore_view *live = NULL, *last = NULL, *pid = NULL;
	for (size_t i = 0; i < n; i++) {
		bool ended = v[i].state == RESTORE_DONE || v[i].state == RESTORE_FAILED;
		if (!ended && v[i].state != RESTORE_QUEUED && !live)
			live = &v[i];
		if (ended && !last)
			last = &v[i];
		if (v[i].pid > 0 && v[i].state != RESTORE_FAILED && !pid)
			pid = &v[i];
	}
	/* Oldest first, as they were asked for. */
	for (size_t i = n; i-- > 0;)
		if (v[i].state != RESTORE_DONE && v[i].state != RESTORE_FAILED)
			text_add(out, "restore %u: %s %s\n", v[i].id, restore_state_name[v[i].state], v[i].job);
	if (live) {
		text_add(out, "job: %s\n", live->job);
		text_add(out, "step: %s\n", engine_step_name(atomic_load(&live->prog.step)));
		text_add(out, "progress: %" PRIu64 "/%" PRIu64 " bytes\n", atomic_load(&live->prog.done),
		    atomic_load(&live->prog.total));
		restore_status(&live->prog, out);
	} else {
		text_add(out, "job: none\n");
	}
	if (last) {
		text_add(out, "last job: %s: %s\n", last->job, last->result ? "failed" : "done");
		restore_steps(&last->prog, out);
		if (!live)
			restore_status(&last->prog, out);
	}
	if (pid)
		text_add(out, "restored pid: %d\n", (int)pid->pid);
	text_add(out, "error: %s\n", last && last->result ? last->error : "none");
	free(v);
	return 0;
}

/* Whether pid has the CUDA driver library loaded. */
static bool loads_cuda(pid_t pid)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, "/libcuda.so") != NULL;
	if (f)
		fclose(f);
	return found;
}

/* A restore's processes whose tracers it serves (job_served). */
typedef struct served {
	pid_t pid[ENGINE_SERVED_MAX];
	int n;
} served;

static bool is_served(const served *s, pid_t pid)
{
	for (int i = 0; i < s->n; i++)
		if (s->pid[i] == pid)
			return true;
	return false;
}

/* The processes of root's tree, and which of them use the GPU: traced
 * (parked by a job, or registered), restoring (its tracer served by the
 * restore under way, sv), forked from either (the driver library is
 * loaded but CUDA is not fork-safe: it does not use the GPU), untraced
 * CUDA, or none. */
static void add_members(pid_t root, const target *tg, const served *sv, text *t)
{
	phosimg_member *m;
	uint32_t n;
	if (engine_tree(root, &m, &n))
		return;
	bool *traced = calloc(n, sizeof(*traced));
	text_add(t, "members: %u\n", n);
	for (uint32_t i = 0; traced && i < n; i++) {
		proc *p = registry_get(m[i].pid);
		traced[i] = p != NULL;
		if (p)
			registry_put(p);
		for (int k = 0; tg && k < tg->nparked; k++)
			traced[i] = traced[i] || (tg->busy && tg->parked[k] == m[i].pid);
		bool restoring = !traced[i] && is_served(sv, m[i].pid);
		const char *gpu = "none";
		if (traced[i] || restoring) {
			gpu = restoring ? "restoring" : "traced";
			traced[i] = true; /* for its children, forked from it */
		} else if (loads_cuda(m[i].pid)) {
			int up = engine_tree_member(m, i, m[i].ppid);
			gpu = up >= 0 && traced[up] ? "forked" : "untraced";
		}
		text_add(t, "member: %d %s gpu=%s\n", (int)m[i].pid, m[i].comm, gpu);
	}
	free(traced);
	free(m);
}

int status_proc(pid_t pid, text *t)
{
	pid_t root = job_root(pid), name = job_name(pid);
	served sv;
	sv.n = job_served(sv.pid, ENGINE_SERVED_MAX);
	bool back = is_served(&sv, pid);
	target *tg = target_get(name, false);
	bool busy = false;
	if (tg) {
		pthread_mutex_lock(&tg->lock);
		busy = tg->busy;
		pthread_mutex_unlock(&tg->lock);
	}
	text_add(t, "pid: %d\n", (int)pid);
	pid_t inner = pidns_inner(pid);
	if (inner > 0 && inner != pid)
		text_add(t, "pid in its namespace: %d\n", (int)inner);
	if (name != pid)
		text_add(t, "job pid: %d\n", (int)name);
	if (root != pid)
		text_add(t, "job root: %d (a checkpoint takes its whole tree)\n", (int)root);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	bool alive = access(path, F_OK) == 0;
	proc *p = registry_get(pid);
	wire_buffer *v = NULL;
	size_t n = 0;
	if (p && proc_list(p, &v, &n) == 0) {
		uint64_t bytes = 0;
		for (size_t i = 0; i < n; i++)
			bytes += v[i].size;
		text_add(t, "state: %s\n", busy ? "checkpointing" : "running");
		text_add(t, "traced: yes\n");
		char why[128];
		const char *so = proc_stop_only(p, why, sizeof(why));
		text_add(t, "stop-only: %s\n", so ? so : "no");
		text_add(t, "buffers: %zu\n", n);
		text_add(t, "device bytes: %" PRIu64 "\n", bytes);
		text_add(t, "app transfers pending: %u\n", p->table ? atomic_load(&p->table->pcie_pending) : 0);
	} else {
		text_add(t, "state: %s\n",
		    busy     ? "checkpointing"
		    : !alive ? "gone"
		    : back   ? "restoring"
			     : "running");
		text_add(t, "traced: %s\n",
		    busy && tg->traced        ? "yes (parked)"
		    : back && alive           ? "restoring"
					      : "no");
	}
	free(v);
	if (p)
		registry_put(p);
	if (alive) {
		if (tg)
			pthread_mutex_lock(&tg->lock);
		add_members(root, tg, &sv, t);
		if (tg)
			pthread_mutex_unlock(&tg->lock);
	}
	job_status(name, tg, t);
	return 0;
}
