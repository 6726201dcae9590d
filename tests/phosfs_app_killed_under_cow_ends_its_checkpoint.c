/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The process dies (kill -9) while its checkpoint's copy runs beside it
 * under copy-on-write: after a cow checkpoint's stall, and after a recopy
 * checkpoint's final stall. Its memory is phosfs's to copy (the parked
 * objects' handles), but a shadow copy it had queued never ends, so
 * either outcome is sound: the image is published whole and restores to
 * the state of its stall, or the checkpoint fails and publishes nothing.
 * What may not happen: a job that never ends, a half image, or a phosfs
 * that stops answering.
 *
 * phosfs's device-to-host copies run at 4 MB/s (simcuda's
 * $SIMCUDA_D2H_MBPS), so the copy of cow_app's 24 MiB outlasts the stall
 * by seconds.
 */
#include "phosfs_test.h"

/* Checkpoints pid with proto, kills it once the stall is over, and
 * checks how the job ends; the restored process, if any, in *pid. */
static void one(rig *r, pid_t *pid, char *out, const char *proto, int *nverify)
{
	char ctl[160], status[160], st[4096] = "", cmd[64], last[256] = "", image[PATH_MAX];
	rig_files(r, *pid, ctl, status);
	int n = snprintf(cmd, sizeof(cmd), "checkpoint %s name=%s\n", proto, proto);
	int e = rig_ctl(ctl, cmd, (size_t)n);
	int after_stall = 0;
	for (int t = 0; !e && t < 60000 && !after_stall; t += 5) {
		if (!rig_read(status, st, sizeof(st)) || strstr(st, "job: none\n"))
			break;
		after_stall = strstr(st, "stall ms: ") != NULL;
		if (!after_stall)
			usleep(5000);
	}
	if (after_stall)
		kill(*pid, SIGKILL);
	int ended = rig_job_done(r, *pid, 60000, last, sizeof(last));
	snprintf(image, sizeof(image), "%s/%d/%s", r->store, (int)*pid, proto);
	int published = access(image, F_OK) == 0, done = strstr(last, ": done") != NULL;
	char *err = rig_read(status, st, sizeof(st)) ? strstr(st, "error: ") : NULL;
	diag("%s: %s; %.*s", proto, last, err ? (int)strcspn(err, "\n") : 0, err ? err : "");
	for (int i = 0; i < 100 && rig_alive(*pid); i++)
		usleep(20000);
	rig_reap();
	/* Published: whole, and the state of the stall. Failed: nothing. */
	int sound = done ? published && rig_verify(image) : !published;
	int back = done && sound && rig_restore(r, image, pid, st, sizeof(st)) == 0 && rig_alive(*pid) &&
		   rig_cow_verified(*pid, out, nverify, 5000);
	ok(after_stall && ended && sound && (!done || back),
	   "%s: the process killed while its copy ran under CoW; the job ended (%s), %s", proto, last,
	   done ? "its image restores to the stall's state" : "nothing published");
	if (!done) { /* go on with a new process, and its output */
		char app[PATH_MAX], cubin[PATH_MAX], seed[16];
		rig_cow_app_paths(app, cubin);
		snprintf(seed, sizeof(seed), "%u", (unsigned)rand());
		*pid = rig_cow_app(r, app, cubin, "24", seed, 20000);
		if (*pid <= 0)
			bail("cow_app did not start again");
		rig_out(r, *pid, out, PATH_MAX);
		*nverify = 0;
	}
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(4);
	r.opts[0] = "--chunk";
	r.opts[1] = "256K";
	r.opts[2] = "--shadow-pool";
	r.opts[3] = "4M";
	r.fs_env = "SIMCUDA_D2H_MBPS=4";
	char out[PATH_MAX], ctl[160], status[160];
	pid_t pid = rig_cow_start(&r, out, ctl, status);
	int nverify = 0;
	one(&r, &pid, out, "cow", &nverify);
	one(&r, &pid, out, "recopy", &nverify);

	char v[160], buf[64];
	snprintf(v, sizeof(v), "%s/version", r.mnt);
	ok(rig_read(v, buf, sizeof(buf)) != NULL, "phosfs still answers");

	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
