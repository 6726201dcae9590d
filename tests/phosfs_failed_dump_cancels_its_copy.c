/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A stop checkpoint whose CRIU dump fails: the copy of device memory that
 * began when the memory was parked stops there, rather than write the
 * rest of a checkpoint that is thrown away. The error is CRIU's, the
 * store holds nothing of it, and the process runs on.
 *
 * CRIU here is a wrapper whose dump fails at once (anything else goes to
 * the real CRIU), and phosfs's device-to-host copies run at 128 MB/s
 * (simcuda's $SIMCUDA_D2H_MBPS), so the copy of 512 MiB cannot have
 * finished by then.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	plan(3);
	char real[PATH_MAX], wrap[200];
	snprintf(real, sizeof(real), "%s", r.criu);
	snprintf(wrap, sizeof(wrap), "%s/criu-fails-dump", r.dir);
	rig_script(wrap,
		   "#!/bin/sh\n"
		   "if [ \"$1\" = dump ]; then\n"
		   "\techo '(00.010) Error (criu/cr-dump.c:2100): a dump that fails on purpose'\n"
		   "\texit 1\n"
		   "fi\n"
		   "exec '%s' \"$@\"\n",
		   real);
	snprintf(r.criu, sizeof(r.criu), "%s", wrap);
	r.fs_env = "SIMCUDA_D2H_MBPS=128";
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");

	pid_t p = rig_counter(&r, 512);
	char out[160], ctl[160], status[160], line[256], st[4096];
	rig_out(&r, p, out, sizeof(out));
	rig_files(&r, p, ctl, status);
	if (!rig_line(out, "count 3", 30000, NULL, 0))
		bail("the counter did not start");
	int e = rig_ctl(ctl, "checkpoint stop name=x\n", 23);
	int ended = e == 0 && rig_job_done(&r, p, 60000, line, sizeof(line));
	rig_read(status, st, sizeof(st));
	char *err = strstr(st, "error: ");
	diag("%.*s", err ? (int)strcspn(err, "\n") : 0, err ? err : "");
	ok(ended && strstr(line, "failed") && err && strstr(err, "fails on purpose") && !strstr(err, "cancelled"),
	   "the checkpoint fails with CRIU's error, not the copy's");

	unsigned long long in = 0, total = 0;
	char *at = strstr(st, "in image: ");
	int got = at && sscanf(at, "in image: %llu/%llu", &in, &total) == 2;
	diag("in image: %llu of %llu bytes", in, total);
	ok(got && total >= 512ull << 20 && in < total, "its copy stopped before all of the memory was written");

	char dir[200];
	snprintf(dir, sizeof(dir), "%s/%d/x", r.store, (int)p);
	struct stat sb;
	long c0 = rig_count(out);
	ok(stat(dir, &sb) != 0 && rig_alive(p) && rig_counts_past(out, c0, 5000),
	   "nothing of it is in the store, and the process runs on");
	kill(p, SIGKILL);
	rig_unmount(&r, SIGTERM);
	rig_cleanup(&r);
	return done();
}
