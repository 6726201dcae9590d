/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A job of its own pid and mount namespace (phos run --pid-ns) restores
 * as a clone from any path of this machine, also from paths its own
 * mount namespace lacks (they failed with "Restoring FAILED." and no
 * cause: CRIU reads some image files once inside the restored namespace):
 *
 *   1. cow_app runs, is checkpointed, and runs on;
 *   2. its image restores twice from /phos/PID/checkpoints/N, the mount's
 *      view of the store, beside the original: two clones, each checking
 *      its device memory;
 *   3. a copy on a tmpfs mounted after the job started restores, and so
 *      does the image through a bind mount made after it started;
 *   4. the original still checks.
 */
#include <sys/mount.h>

#include "phosfs_test.h"

/* Restores dir, and checks the clone's device memory; its pid, or 0. */
static pid_t clone_of(rig *r, const char *dir, const char *out, int *nverify, pid_t orig)
{
	char st[8192];
	pid_t c = 0;
	int e = rig_restore(r, dir, &c, st, sizeof(st));
	if (e || c <= 0 || c == orig || !rig_alive(c) || !rig_cow_verified(c, out, nverify, 10000)) {
		diag("restore of %s: %s: %s", dir, strerror(e), st);
		return 0;
	}
	return c;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(6);
	char out[PATH_MAX], ctl[160], status[160], last[256] = "";
	pid_t pid = rig_cow_start(&r, out, ctl, status);
	int nverify = 0;
	int saved = rig_checkpoint(&r, pid, "checkpoint name=a\n", last, sizeof(last));
	char image[PATH_MAX], via[PATH_MAX];
	snprintf(image, sizeof(image), "%s/%d/a", r.store, (int)pid);
	snprintf(via, sizeof(via), "%s/%d/checkpoints/a", r.mnt, (int)pid);
	ok(saved && rig_verify(image), "cow_app is checkpointed and runs on (%s)", last);

	pid_t c1 = clone_of(&r, via, out, &nverify, pid);
	pid_t c2 = c1 ? clone_of(&r, via, out, &nverify, pid) : 0;
	ok(c1 && c2 && c1 != c2, "from %s, two clones (%d, %d) run beside the original and check", via, (int)c1,
	   (int)c2);

	char tmp[PATH_MAX], copy[PATH_MAX + 8], bind[PATH_MAX], cmd[3 * PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s/later", r.dir);
	snprintf(copy, sizeof(copy), "%s/a", tmp);
	snprintf(bind, sizeof(bind), "%s/bound", r.dir);
	mkdir(tmp, 0700);
	mkdir(bind, 0700);
	/* Room for the copy: twice the image (under ASan its CRIU pages are
	 * larger), and 64 MiB more. */
	unsigned long long bytes = 0;
	snprintf(cmd, sizeof(cmd), "du -sb '%s'", image);
	FILE *du = popen(cmd, "r");
	if (!du || fscanf(du, "%llu", &bytes) != 1)
		bytes = 256ull << 20;
	if (du)
		pclose(du);
	char size[64];
	snprintf(size, sizeof(size), "size=%llum", (2 * bytes >> 20) + 64);
	int mounted = mount("phos-test", tmp, "tmpfs", 0, size) == 0;
	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", image, copy);
	pid_t c3 = mounted && system(cmd) == 0 ? clone_of(&r, copy, out, &nverify, pid) : 0;
	ok(c3, "a copy on a tmpfs mounted after the job started restores (clone %d)", (int)c3);
	char bound[PATH_MAX + 8];
	snprintf(bound, sizeof(bound), "%s/a", bind);
	int bm = mount(image, bound, NULL, MS_BIND, NULL) == 0 || (mkdir(bound, 0700) == 0 &&
		 mount(image, bound, NULL, MS_BIND, NULL) == 0);
	pid_t c4 = bm ? clone_of(&r, bound, out, &nverify, pid) : 0;
	ok(c4, "the image through a bind mount made after the job started restores (clone %d)", (int)c4);

	ok(rig_cow_verified(pid, out, &nverify, 10000), "the original still checks");
	pid_t all[] = { pid, c1, c2, c3, c4 };
	rig_kill_all(all, 5);
	if (bm)
		umount2(bound, MNT_DETACH);
	if (mounted)
		umount2(tmp, MNT_DETACH);
	rig_cleanup(&r);
	return done();
}
