/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The cut of an NCCL job, with one traced process (cut.h; the wire
 * messages CUT, TARGETS, CUT_DONE and CUT_END of common/wire.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cut.h"
#include "park.h"

int engine_cut_begin(pid_t pid, int conn, int timeout_ms, wire_nccl_comm **out, size_t *n, perr *er)
{
	static _Thread_local uint8_t buf[WIRE_MAX_PAYLOAD + 1];
	*out = NULL;
	*n = 0;
	wire_park p = { (uint32_t)timeout_ms, (uint32_t)timeout_ms, 0, 0 };
	int e = wire_send(conn, WIRE_CUT, &p, sizeof(p), 1, NULL, 0);
	if (e)
		return pr_err(er, e, "cannot ask process %d for its NCCL counts: %s", (int)pid, strerror(-e));
	for (;;) {
		wire_header h;
		int fds[WIRE_MAX_FDS], nfds = 0;
		e = engine_recv_within(pid, conn, "say its NCCL counts", ENGINE_ANSWER_GRACE_MS, &h, buf, sizeof(buf),
				       fds, &nfds, er);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		if (e)
			break;
		if (h.type == WIRE_END)
			return 0;
		if (h.type != WIRE_NCCL || h.length != h.count * sizeof(wire_nccl_comm)) {
			e = pr_err(er, -EPROTO, "process %d answered CUT with message %u", (int)pid, h.type);
			break;
		}
		wire_nccl_comm *v = realloc(*out, (*n + h.count) * sizeof(*v));
		if (!v) {
			e = pr_err(er, -ENOMEM, "out of memory");
			break;
		}
		memcpy(v + *n, buf, h.length);
		*out = v;
		*n += h.count;
	}
	free(*out);
	*out = NULL;
	*n = 0;
	return e;
}

int engine_cut_reach(pid_t pid, int conn, const wire_nccl_target *t, size_t n, int timeout_ms, perr *er)
{
	static _Thread_local uint8_t buf[512];
	if (n * sizeof(*t) > WIRE_MAX_PAYLOAD)
		return pr_err(er, -E2BIG, "process %d has more NCCL communicators than one message holds", (int)pid);
	int e = wire_send(conn, WIRE_TARGETS, t, (uint32_t)(n * sizeof(*t)), (uint32_t)n, NULL, 0);
	if (e)
		return pr_err(er, e, "cannot send process %d its NCCL targets: %s", (int)pid, strerror(-e));
	wire_header h;
	int fds[WIRE_MAX_FDS], nfds = 0;
	e = engine_recv_within(pid, conn, "reach the cut", timeout_ms + ENGINE_ANSWER_GRACE_MS, &h, buf, sizeof(buf),
			       fds, &nfds, er);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (!e && h.type != WIRE_CUT_DONE)
		e = pr_err(er, -EPROTO, "process %d answered TARGETS with message %u", (int)pid, h.type);
	return e;
}

void engine_cut_end(int conn)
{
	wire_send(conn, WIRE_CUT_END, NULL, 0, 0, NULL, 0);
}
