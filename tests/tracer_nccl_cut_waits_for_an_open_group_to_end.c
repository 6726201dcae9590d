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
 *     the group ends and a new one opens and ends.
 */
#include <poll.h>

#include "../engine/cut.h"
#include "../engine/park.h"
#include "tracer_test.h"

/* CUT to t with deadline ms: its one communicator's count, or -1. */
static long cut_begin(traced *t, int ms, wire_nccl_target *target)
{
	perr er = { 0 };
	wire_nccl_comm *v = NULL;
	size_t n = 0;
	if (engine_cut_begin(t->pid, t->p.conn, ms, &v, &n, &er) || n != 1) {
		diag("CUT: %s (%zu communicators)", er.msg, n);
		free(v);
		return -1;
	}
	*target = (wire_nccl_target){ v[0].id, v[0].count };
	long count = (long)v[0].count;
	free(v);
	return count;
}

int main(int argc, char **argv)
{
	TRACER_TEST_MAIN(argc, argv);
	char stub[PATH_MAX];
	snprintf(stub, sizeof(stub), "%s", test_path("PHOS_NCCL_STUB", "apps/libnccl.so.2"));
	if (access(stub, R_OK))
		skip_all("tests/apps/libnccl.so.2 is not built");
	setenv("PHOS_NCCL_STUB", stub, 1);
	plan(5);
	traced t;
	if (traced_start(&t, argv[0], 1) || traced_hello(&t, 5000))
		bail("the traced program did not start");
	wire_nccl_target target;
	ok(traced_cmd(&t, 'g') == 'y' && cut_begin(&t, 5000, &target) == 1,
	   "a rank inside an open group with one all-reduce counts 1 at the cut");

	struct pollfd pf = { t.p.conn, POLLIN, 0 };
	int sent = wire_send(t.p.conn, WIRE_TARGETS, &target, sizeof(target), 1, NULL, 0);
	ok(!sent && poll(&pf, 1, 500) == 0, "with its group still open, the tracer does not say the cut is reached");

	perr er = { 0 };
	wire_header h;
	uint8_t buf[512];
	int fds[WIRE_MAX_FDS], nfds = 0;
	int ended = traced_cmd(&t, 'e') == 'y';
	int e = engine_recv_within(t.pid, t.p.conn, "reach the cut", 5000, &h, buf, sizeof(buf), fds, &nfds, &er);
	ok(ended && !e && h.type == WIRE_CUT_DONE, "once the group ends, the tracer answers CUT_DONE (%s)",
	   e ? er.msg : "done");
	engine_cut_end(t.p.conn);

	/* A second group, left open past a short deadline. */
	er = (perr){ 0 };
	long c = traced_cmd(&t, 'g') == 'y' ? cut_begin(&t, 300, &target) : -1;
	e = c == 2 ? engine_cut_reach(t.pid, t.p.conn, &target, 1, 300, &er) : -EINVAL;
	ok(e == -EIO && strstr(er.msg, "have not returned"), "past the cut's deadline with the group open, the cut fails: %s",
	   er.msg);
	engine_cut_end(t.p.conn); /* the tracer ended it itself when the cut failed */
	ok(traced_cmd(&t, 'e') == 'y' && traced_cmd(&t, 'g') == 'y' && traced_cmd(&t, 'e') == 'y',
	   "the process runs on: the group ends, and another opens and ends");
	traced_stop(&t);
	return done();
}
