/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A rank whose count is at its cut's target may still be inside a group
 * it has not ended: NCCL launches the group's kernels in ncclGroupEnd,
 * and its peers, having launched theirs, would wait for it on the device
 * while the park waits for them. So the tracer answers TARGETS only once
 * every counted call has returned and every group has ended:
 *   - with a group left open (tests/tracer_app.h, command 'g'), the cut
 *     is not reached, though the count is at its target;
 *   - once the group ends ('e'), the tracer answers CUT_DONE;
 *   - a cut whose deadline passes with the group still open fails,
 *     saying a call or group has not returned, and the process runs on:
 *     the group ends and a new one opens and ends;
 *   - a group whose next call the cut holds ('a', on a communicator at
 *     its target) has launched nothing, and launches only after the
 *     checkpoint: the cut is reached, and once it ends the call goes on
 *     and the group ends.
 */
#include <poll.h>

#include "../engine/cut.h"
#include "../engine/park.h"
#include "tracer_test.h"

#define MAXC 4

/* CUT to t with deadline ms: each communicator's count as its target
 * (t[], *n of them); the sum of the counts, or -1. */
static long cut_begin(traced *tr, int ms, wire_nccl_target *t, size_t *n)
{
	perr er = { 0 };
	wire_nccl_comm *v = NULL;
	*n = 0;
	if (engine_cut_begin(tr->pid, tr->p.conn, ms, &v, n, &er) || *n > MAXC) {
		diag("CUT: %s (%zu communicators)", er.msg, *n);
		free(v);
		return -1;
	}
	long sum = 0;
	for (size_t i = 0; i < *n; i++) {
		t[i] = (wire_nccl_target){ v[i].id, v[i].count };
		sum += (long)v[i].count;
	}
	free(v);
	return sum;
}

/* Waits up to ms for CUT_DONE from tr: 1, or 0 (er says why). */
static int cut_done(traced *tr, int ms, perr *er)
{
	wire_header h;
	uint8_t buf[512];
	int fds[WIRE_MAX_FDS], nfds = 0;
	int e = engine_recv_within(tr->pid, tr->p.conn, "reach the cut", ms, &h, buf, sizeof(buf), fds, &nfds, er);
	return !e && h.type == WIRE_CUT_DONE;
}

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	tracer_nccl_stub();
	plan(7);
	traced t;
	if (traced_start(&t, argv[0], 1) || traced_hello(&t, 5000))
		bail("the traced program did not start");
	wire_nccl_target target[MAXC];
	size_t n = 0;
	ok(traced_cmd(&t, 'g') == 'y' && cut_begin(&t, 5000, target, &n) == 1,
	   "a rank inside an open group with one all-reduce counts 1 at the cut");

	struct pollfd pf = { t.p.conn, POLLIN, 0 };
	int sent = wire_send(t.p.conn, WIRE_TARGETS, target, (uint32_t)(n * sizeof(*target)), (uint32_t)n, NULL, 0);
	ok(!sent && poll(&pf, 1, 500) == 0, "with its group still open, the tracer does not say the cut is reached");

	perr er = { 0 };
	int ended = traced_cmd(&t, 'e') == 'y';
	int reached = cut_done(&t, 5000, &er);
	ok(ended && reached, "once the group ends, the tracer answers CUT_DONE (%s)", reached ? "done" : er.msg);
	engine_cut_end(t.p.conn);

	/* A second group, left open past a short deadline. */
	er = (perr){ 0 };
	long c = traced_cmd(&t, 'g') == 'y' ? cut_begin(&t, 300, target, &n) : -1;
	int e = c == 2 ? engine_cut_reach(t.pid, t.p.conn, target, n, 300, &er) : -EINVAL;
	ok(e == -EIO && strstr(er.msg, "have not returned"), "past the cut's deadline with the group open, the cut fails: %s",
	   er.msg);
	engine_cut_end(t.p.conn); /* the tracer ended it itself when the cut failed */
	ok(traced_cmd(&t, 'e') == 'y' && traced_cmd(&t, 'g') == 'y' && traced_cmd(&t, 'e') == 'y',
	   "the process runs on: the group ends, and another opens and ends");

	/* A group whose next call the cut holds. */
	er = (perr){ 0 };
	c = traced_cmd(&t, 'g') == 'y' ? cut_begin(&t, 5000, target, &n) : -1;
	char a = 'a';
	int asked = c == 4 && write(t.fd, &a, 1) == 1;
	usleep(100000); /* it waits in the held all-reduce now */
	sent = asked ? wire_send(t.p.conn, WIRE_TARGETS, target, (uint32_t)(n * sizeof(*target)), (uint32_t)n, NULL, 0)
		     : -1;
	reached = !sent && cut_done(&t, 2000, &er);
	ok(reached, "a group held at its next call by the cut launched nothing: the cut is reached (%s)",
	   reached ? "done" : er.msg);
	engine_cut_end(t.p.conn);
	char r = 0;
	pf = (struct pollfd){ t.fd, POLLIN, 0 };
	int went = poll(&pf, 1, 5000) == 1 && read(t.fd, &r, 1) == 1 && r == 'y';
	ok(went && traced_cmd(&t, 'e') == 'y', "once the cut ends, the held call goes on and the group ends");
	traced_stop(&t);
	return done();
}
