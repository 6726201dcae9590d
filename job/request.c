/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Job requests (request.h): made by phosfs, checked by the job.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "../engine/engine.h"
#include "request.h"

int job_request_init(job_request *r, enum job_kind kind, const char *image, const char *criu, const char *log,
		     const char *plugins)
{
	memset(r, 0, sizeof(*r));
	r->magic = JOB_REQUEST_MAGIC;
	r->version = JOB_REQUEST_VERSION;
	r->size = sizeof(*r);
	r->kind = kind;
	r->checkpoint.staging_fd = -1;
	if (job_request_set(r->image, sizeof(r->image), image) || job_request_set(r->criu, sizeof(r->criu), criu) ||
	    job_request_set(r->log, sizeof(r->log), log) ||
	    job_request_set(r->plugins, sizeof(r->plugins), plugins ? plugins : ""))
		return -ENAMETOOLONG;
	return 0;
}

int job_request_set(char *field, size_t cap, const char *s)
{
	size_t n = strlen(s);
	if (n >= cap) {
		*field = 0;
		return -ENAMETOOLONG;
	}
	memcpy(field, s, n + 1);
	return 0;
}

const char *job_kind_name(uint32_t kind)
{
	return kind == JOB_CHECKPOINT ? "stop" : kind == JOB_RESTORE ? "restore" : NULL;
}

/* Whether field (cap bytes) holds a string that ends inside it, and is
 * not empty unless empty_ok. */
static bool string_ok(const char *field, size_t cap, bool empty_ok)
{
	size_t n = strnlen(field, cap);
	return n < cap && (n > 0 || empty_ok);
}

static bool fd_open(int fd)
{
	return fd >= 0 && fcntl(fd, F_GETFD) != -1;
}

static int check_checkpoint(const job_request *r, perr *er)
{
	const job_checkpoint_req *c = &r->checkpoint;
	if (c->pid <= 0)
		return pr_err(er, -EINVAL, "the job request names no process (pid %d)", (int)c->pid);
	if (c->chunk < (64u << 10) || c->chunk > (256u << 20) || (c->chunk & (c->chunk - 1)))
		return pr_err(er, -EINVAL, "the job request's chunk size %u is not a power of two from 64 KiB to 256 MiB",
			      c->chunk);
	if (c->hold_ms > JOB_HOLD_MAX_MS)
		return pr_err(er, -EINVAL, "the job request's hold of %u ms is longer than %u ms", c->hold_ms,
			      JOB_HOLD_MAX_MS);
	if (c->hold_ms && !c->kill)
		return pr_err(er, -EINVAL, "the job request holds its tree (%u ms) without ending it after the dump (kill)",
			      c->hold_ms);
	if (c->timeout_ms > JOB_TIMEOUT_MAX_MS)
		return pr_err(er, -EINVAL, "the job request's timeout of %u ms is longer than %u ms", c->timeout_ms,
			      JOB_TIMEOUT_MAX_MS);
	if (c->dump_timeout_s > JOB_DUMP_TIMEOUT_MAX_S)
		return pr_err(er, -EINVAL, "the job request's dump timeout of %u s is longer than a day",
			      c->dump_timeout_s);
	if (c->cow && c->recopy)
		return pr_err(er, -EINVAL, "the job request asks for both cow and recopy");
	if (c->staging_fd != -1 && !fd_open(c->staging_fd))
		return pr_err(er, -EBADF, "the job request's staging fd %d is not open", (int)c->staging_fd);
	if (c->nmembers > JOB_MEMBERS_MAX)
		return pr_err(er, -EINVAL, "the job request lists %u traced processes, more than %d",
			      c->nmembers, JOB_MEMBERS_MAX);
	for (uint32_t i = 0; i < c->nmembers; i++) {
		const job_member *m = &c->members[i];
		if (m->pid <= 0 || m->control_tid <= 0 || !fd_open(m->conn))
			return pr_err(er, -EBADF,
				      "the job request's traced process %u (pid %d, connection %d, thread %d) is not valid",
				      i, (int)m->pid, (int)m->conn, (int)m->control_tid);
	}
	return 0;
}

static int check_restore(const job_request *r, perr *er)
{
	if (!string_ok(r->restore.devices, sizeof(r->restore.devices), true))
		return pr_err(er, -EINVAL, "the job request's device moves do not end");
	if (!string_ok(r->restore.cgroups, sizeof(r->restore.cgroups), true))
		return pr_err(er, -EINVAL, "the job request's cgroups do not end");
	if (r->restore.fill_threads < 0 || r->restore.fill_threads > ENGINE_FILL_THREADS_MAX)
		return pr_err(er, -EINVAL, "the job request asks for %d fill threads (0 to %d)",
			      (int)r->restore.fill_threads, ENGINE_FILL_THREADS_MAX);
	if (r->restore.timeout_s < 0)
		return pr_err(er, -EINVAL, "the job request's timeout %d is negative",
			      (int)r->restore.timeout_s);
	return 0;
}

int job_request_check(const job_request *r, perr *er)
{
	if (r->magic != JOB_REQUEST_MAGIC || r->version != JOB_REQUEST_VERSION || r->size != sizeof(*r))
		return pr_err(er, -EINVAL,
			      "the job request is not one this phosfs makes (magic %#x, version %u, %u bytes)",
			      r->magic, r->version, r->size);
	if (!job_kind_name(r->kind))
		return pr_err(er, -EINVAL, "the job request's kind %u is unknown", r->kind);
	static const struct {
		size_t off;
		const char *what;
		bool empty_ok;
	} strings[] = {
		{ offsetof(job_request, image), "image", false },
		{ offsetof(job_request, criu), "criu", false },
		{ offsetof(job_request, log), "log", false },
		{ offsetof(job_request, plugins), "plugins", true },
	};
	for (size_t i = 0; i < sizeof(strings) / sizeof(*strings); i++)
		if (!string_ok((const char *)r + strings[i].off, PATH_MAX, strings[i].empty_ok))
			return pr_err(er, -EINVAL, "the job request's %s is %s", strings[i].what,
				      strings[i].empty_ok ? "not ended" : "empty or not ended");
	return r->kind == JOB_CHECKPOINT ? check_checkpoint(r, er) : check_restore(r, er);
}
