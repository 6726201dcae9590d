/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Two independent traced CUDA processes in one job:
 *
 *   phos run -- sh -c 'counter 24 & counter 40 & wait'
 *
 * The shell's pid is checkpointed with `recopy` (both are tracked while
 * they run, and their images hold each one's memory), then with `stop`:
 * both counters park and are
 * driver-checkpointed together, and one image holds the tree. Each
 * counter's device memory in the image is checked byte for byte against
 * the pattern it wrote, and is that counter's alone. The tree is killed
 * with -9 and restored; each counter then checks every byte of its device
 * memory (SIGUSR1) and counts on.
 *
 * The job runs in a pid namespace of its own (phos run's default): the
 * tree's root, and its first member, is phos's init, and the restore
 * gives the tree a new namespace, with new pids on this machine.
 */
#include "phosfs_test.h"

/* The counter's pattern byte at off (examples/counter.c). */
static uint8_t pattern(uint64_t off)
{
	uint64_t x = (off / 8) * 0x9E3779B97F4A7C15ull;
	return (uint8_t)(x >> (8 * (off % 8)));
}

/* Whether object obj holds a counter's data of mib MiB: the pattern,
 * except the first 8 bytes of a page, which hold a count or the pattern. */
static int holds_counter_data(phosimg *img, uint32_t obj, int mib)
{
	static uint8_t buf[4 << 20];
	for (uint64_t at = 0; at < (uint64_t)mib << 20; at += sizeof(buf)) {
		if (phosimg_read(img, obj, at, buf, sizeof(buf)))
			return 0;
		for (uint64_t k = 0; k < sizeof(buf); k++) {
			uint64_t off = at + k;
			if (off % 4096 < 8)
				continue;
			if (buf[k] != pattern(off)) {
				diag("object %u: byte %llu differs", obj, (unsigned long long)off);
				return 0;
			}
		}
	}
	return 1;
}

static int count_lines(const char *file, const char *prefix)
{
	FILE *f = fopen(file, "r");
	char l[256];
	int n = 0;
	while (f && fgets(l, sizeof(l), f))
		n += !strncmp(l, prefix, strlen(prefix));
	if (f)
		fclose(f);
	return n;
}

/* Opens the image: its members, traced members, and how many of those
 * hold their own counter's data in their largest object (its MiB in
 * owners[]). */
static void inspect(const char *image, int *members, int *ntraced, int *good, int owners[2])
{
	phosimg *img;
	if (phosimg_open(image, &img) != 0)
		return;
	const phosimg_info *in = phosimg_get_info(img);
	*members = (int)in->meta.member_count;
	for (uint32_t i = 0; i < in->meta.member_count; i++) {
		const phosimg_member *m = &in->meta.members[i];
		if (!(m->flags & PHOSIMG_MEMBER_TRACED))
			continue;
		/* Its largest object is its data: 24 or 40 MiB, its own. */
		uint32_t big = UINT32_MAX;
		for (uint32_t k = m->first_object; k < m->first_object + m->object_count; k++)
			if (big == UINT32_MAX || in->objects[k].size > in->objects[big].size)
				big = k;
		int mib = big == UINT32_MAX ? 0 : in->objects[big].size >= (40u << 20) ? 40 : 24;
		if (*ntraced < 2)
			owners[*ntraced] = mib;
		(*ntraced)++;
		*good += big != UINT32_MAX && in->objects[big].pid == m->pid && holds_counter_data(img, big, mib);
	}
	phosimg_close(img);
}

/* The two children of pid (the counters), into kids. */
static void children_of(pid_t pid, pid_t kids[2])
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	FILE *f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d %d", &kids[0], &kids[1]) != 2)
			kids[0] = kids[1] = 0;
		fclose(f);
	}
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(7);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	char script[PATH_MAX * 2 + 64];
	snprintf(script, sizeof(script), "'%s' 24 & '%s' 40 & wait", r.counter, r.counter);
	pid_t sh = rig_shell_job(&r, script);
	char out[PATH_MAX], path[256], st[4096];
	rig_out(&r, sh, out, sizeof(out));
	/* Both have started once two "ready" lines are out. */
	int ready = 0;
	for (int i = 0; i < 300 && !ready; i++, usleep(50000))
		ready = count_lines(out, "counter: ") >= 2 && count_lines(out, "count ") >= 6;
	snprintf(path, sizeof(path), "%s/%d/status", r.mnt, (int)sh);
	int traced = 0;
	for (int i = 0; i < 100 && traced < 2; i++, usleep(50000)) {
		rig_read(path, st, sizeof(st));
		traced = 0;
		for (char *s = st; (s = strstr(s, "gpu=traced")); s++)
			traced++;
	}
	ok(ready && traced == 2, "both counters run under one shell, and status shows both traced");

	/* recopy: both are tracked while they run, then stopped together. */
	snprintf(path, sizeof(path), "%s/%d/ctl", r.mnt, (int)sh);
	int e = rig_ctl(path, "checkpoint recopy name=tracked\n", 31);
	char last[256] = "", rimage[PATH_MAX];
	int rdone = e == 0 && rig_job_done(&r, sh, 30000, last, sizeof(last)) && strstr(last, "done");
	snprintf(rimage, sizeof(rimage), "%s/%d/tracked", r.store, (int)sh);
	int rmembers = 0, rtraced = 0, rgood = 0, rowners[2] = { 0, 0 };
	if (rdone)
		inspect(rimage, &rmembers, &rtraced, &rgood, rowners);
	ok(rdone && rig_verify(rimage) && rmembers == 4 && rtraced == 2 && rgood == 2 &&
		   rowners[0] + rowners[1] == 64 && rig_counts_past(out, rig_count(out) + 2, 5000),
	   "checkpoint recopy of the shell's pid tracks both, and its image holds each one's memory; they count on (%s)",
	   e ? strerror(e) : last);

	e = rig_ctl(path, "checkpoint stop name=two\n", 25);
	ok(e == 0 && rig_job_done(&r, sh, 30000, last, sizeof(last)) && strstr(last, "done"),
	   "checkpoint stop of the shell's pid (%s)", e ? strerror(e) : last);

	char image[PATH_MAX];
	snprintf(image, sizeof(image), "%s/%d/two", r.store, (int)sh);
	int members = 0, ntraced = 0, good = 0;
	int owners[2] = { 0, 0 };
	inspect(image, &members, &ntraced, &good, owners);
	ok(members == 4 && ntraced == 2 && good == 2 && owners[0] + owners[1] == 64,
	   "one image: 4 members (phos's init, the shell, the counters), 2 traced, each with its own device memory, byte for byte (%d, %d MiB)", owners[0],
	   owners[1]);

	pid_t kids[2] = { 0, 0 };
	children_of(sh, kids);
	/* The init dies with -9, and the namespace with it. */
	kill(rig_job_root(sh), SIGKILL);
	for (int i = 0; i < 100 && (rig_alive(sh) || rig_alive(kids[0]) || rig_alive(kids[1])); i++)
		usleep(50000);
	rig_reap();
	int verified = count_lines(out, "verify ok");
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "restore %s\n", image);
	pid_t old = sh;
	e = rig_restore_cmd(&r, cmd, &sh, st, sizeof(st));
	if (e)
		sh = 0;
	kids[0] = kids[1] = 0;
	if (sh > 0)
		children_of(sh, kids);
	ok(e == 0 && sh > 0 && rig_alive(sh) && kids[0] && rig_alive(kids[0]) && rig_alive(kids[1]),
	   "after kill -9 the tree is restored: the shell (%d, was %d) and both counters (%s)", (int)sh, (int)old,
	   e ? strerror(e) : "ok");
	if (e)
		diag("%s", st);
	usleep(300000);
	kill(kids[0], SIGUSR1);
	kill(kids[1], SIGUSR1);
	int now = verified;
	for (int i = 0; i < 100 && now < verified + 2; i++, usleep(50000))
		now = count_lines(out, "verify ok");
	ok(now == verified + 2 && !rig_line(out, "verify FAILED", 0, NULL, 0),
	   "each restored counter checks every byte of its device memory: intact");
	long before = rig_count(out);
	ok(rig_counts_past(out, before + 3, 5000), "and they count on");

	pid_t all[] = { sh, kids[0], kids[1] };
	rig_kill_all(all, sizeof(all) / sizeof(*all));
	rig_cleanup(&r);
	return done();
}
