/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * restore DIR lazy-pages: CPU pages come back while the process runs too
 * (CRIU's lazy-pages daemon, through userfaultfd), as its device memory
 * does in a lazy restore:
 *
 *   1. cow_app (which keeps a host copy of all its device memory, and
 *      checks one against the other on SIGUSR1) is checkpointed and killed;
 *   2. restored with `lazy lazy-pages`: it runs, status says its CPU pages
 *      are lazy and when the last came back, and every byte of its device
 *      memory matches its host copies, both having come back on demand;
 *   3. the same with `eager lazy-pages`;
 *   4. a malformed or doubled word is refused.
 *
 * Skips where CRIU says userfaultfd is missing.
 */
#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	char check[PATH_MAX + 64];
	snprintf(check, sizeof(check), "'%s' check --feature uffd-noncoop >/dev/null 2>&1", r.criu);
	if (system(check) != 0)
		skip_all("CRIU says this kernel has no userfaultfd (criu check --feature uffd-noncoop)");
	plan(7);
	char out[PATH_MAX], ctl[160], status[160], st[4096], last[256] = "", image[PATH_MAX];
	pid_t pid = rig_cow_start(&r, out, ctl, status);
	int e = rig_ctl(ctl, "checkpoint name=c\n", 18);
	int ckd = !e && rig_job_done(&r, pid, 60000, last, sizeof(last)) && strstr(last, "done");
	snprintf(image, sizeof(image), "%s/%d/c", r.store, (int)pid);
	ok(ckd && rig_verify(image), "cow_app is checkpointed (%s)", last);

	static const char *const modes[] = { "lazy lazy-pages", "eager lazy-pages" };
	int nverify = 0;
	rig_cow_verified(pid, out, &nverify, 5000);
	for (int i = 0; i < 2; i++) {
		r.restore_mode = modes[i];
		int back = rig_kill_restore(&r, &pid, ckd, image, st, sizeof(st));
		int filled = back && rig_restore_done(&r, 60000, st, sizeof(st));
		int said = filled && strstr(st, "cpu pages: lazy\n") && strstr(st, "cpu pages back ms: ");
		int intact = back && rig_cow_verified(pid, out, &nverify, 10000);
		ok(back && said && intact,
		   "restore %s: it runs, its CPU pages come back (status says when), and its device memory matches its "
		   "host copies",
		   modes[i]);
		if (!(back && said && intact))
			diag("back=%d said=%d intact=%d: %s", back, said, intact, st);
	}
	ok(rig_verify(image), "the image stays good");

	char rootctl[160], cmd[PATH_MAX + 64];
	snprintf(rootctl, sizeof(rootctl), "%s/ctl", r.mnt);
	int n = snprintf(cmd, sizeof(cmd), "restore %s lazy-pages lazy-pages\n", image);
	int twice = rig_ctl(rootctl, cmd, (size_t)n);
	n = snprintf(cmd, sizeof(cmd), "restore %s lazy-page\n", image);
	int typo = rig_ctl(rootctl, cmd, (size_t)n);
	ok(twice == EINVAL && typo == EINVAL, "lazy-pages twice, or misspelt, is refused (EINVAL)");
	ok(rig_alive(pid), "the restored process runs on");
	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
