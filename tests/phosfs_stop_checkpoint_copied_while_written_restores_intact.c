/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The whole flow on a real mount with real CRIU: a process holding 256 MiB
 * of known device data (examples/counter, on simcuda) is checkpointed with
 * `checkpoint stop` while `cp -r` copies the checkpoint, keeps running,
 * is killed with -9 and restored from the copy through /ctl. The image
 * holds the device bytes the program wrote; after the restore the program
 * checks every byte of its device memory and counts on. A second job
 * while one runs gets EBUSY.
 */
#include "phosfs_test.h"

#define MIB 256

/* The counter's pattern byte at off (examples/counter.c). */
static uint8_t pattern(uint64_t off)
{
	uint64_t x = (off / 8) * 0x9E3779B97F4A7C15ull;
	return (uint8_t)(x >> (8 * (off % 8)));
}

/* Whether the image holds the counter's data object: every byte is the
 * pattern's, except the first 8 of a page, which hold a count <= max. */
static int image_holds_data(const char *path, long max)
{
	phosimg *img;
	if (phosimg_open(path, &img))
		return 0;
	const phosimg_info *in = phosimg_get_info(img);
	int found = 0, good = 1;
	static uint8_t buf[4 << 20];
	for (uint32_t i = 0; i < in->object_count && !found; i++) {
		if (in->objects[i].size < (uint64_t)MIB << 20)
			continue;
		found = 1;
		for (uint64_t at = 0; good && at < (uint64_t)MIB << 20; at += sizeof(buf)) {
			if (phosimg_read(img, i, at, buf, sizeof(buf))) {
				good = 0;
				break;
			}
			for (uint64_t k = 0; k < sizeof(buf) && good; k++) {
				uint64_t off = at + k;
				if (off % 4096 == 0) {
					uint64_t v;
					memcpy(&v, buf + k, 8);
					int pat = 1;
					for (int b = 0; b < 8; b++)
						pat &= buf[k + b] == pattern(off + b);
					if (!pat && (v == 0 || v > (uint64_t)max)) {
						diag("page at %llu holds %llu", (unsigned long long)off, (unsigned long long)v);
						good = 0;
					}
					k += 7;
				} else if (buf[k] != pattern(off)) {
					diag("byte %llu differs", (unsigned long long)off);
					good = 0;
				}
			}
		}
	}
	phosimg_close(img);
	return found && good;
}

int main(void)
{
	rig r;
	rig_require(&r);
	plan(13);
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	pid_t pid = rig_counter(&r, MIB);
	char out[160], ctl[160], status[160], ck[200], copy[160], line[256], st[4096];
	rig_out(&r, pid, out, sizeof(out));
	snprintf(ctl, sizeof(ctl), "%s/%d/ctl", r.mnt, (int)pid);
	snprintf(status, sizeof(status), "%s/%d/status", r.mnt, (int)pid);
	snprintf(ck, sizeof(ck), "%s/%d/checkpoints/first", r.mnt, (int)pid);
	snprintf(copy, sizeof(copy), "%s/copy", r.dir);
	ok(pid > 0 && rig_line(out, "count 10", 20000, NULL, 0) && rig_read(status, st, sizeof(st)) &&
		   strstr(st, "traced: yes"),
	   "phos run starts the counter under the tracer and phosfs shows it");

	const char *cmd = "checkpoint stop name=first\n";
	int e = rig_ctl(ctl, cmd, strlen(cmd));
	int busy = rig_ctl(ctl, "checkpoint stop\n", 16);
	char cp[512];
	snprintf(cp, sizeof(cp), "cp -r %s %s", ck, copy);
	int cpst = system(cp);
	ok(e == 0, "checkpoint stop is accepted (%s)", strerror(e));
	ok(busy == EBUSY, "a second checkpoint while one runs gets EBUSY (%s)", strerror(busy));
	long at_copy = rig_count(out);
	ok(cpst == 0 && rig_verify(copy), "cp -r during the checkpoint yields a complete image that verifies");
	ok(image_holds_data(copy, at_copy + 10), "the image holds the program's %d MiB of device data byte for byte",
	   MIB);
	rig_job_done(&r, pid, 20000, line, sizeof(line));
	diag("%s", line);
	rig_read(status, st, sizeof(st));
	const char *steps = strstr(st, "steps ms: ");
	ok(steps && strstr(steps, " park ") && strstr(steps, " criu-dump ") && strstr(steps, " copy ") &&
		   strstr(steps, " unpark "),
	   "status tells the time of each step of the checkpoint");
	if (steps)
		diag("%.*s", (int)strcspn(steps, "\n"), steps);
	/* CRIU's own measure of its dump (its stats-dump image). */
	double frozen = 0;
	unsigned long long pages = 0;
	const char *cs = strstr(st, "criu dump ms: "), *cpg = strstr(st, "criu pages: ");
	bool measured = cs && sscanf(cs, "criu dump ms: freezing %*f frozen %lf", &frozen) == 1 && frozen > 0 && cpg &&
			sscanf(cpg, "criu pages: %llu written", &pages) == 1 && pages > 0;
	double handed = -1, released = -1, kept = -1;
	unsigned long long objs = 0;
	const char *pk = strstr(st, "park ms: ");
	bool parted = pk && sscanf(pk, "park ms: handed over %lf released %lf kept %lf (%llu objects)", &handed, &released,
				    &kept, &objs) == 4 && objs > 0;
	ok(parted, "status tells the park's parts: handed over in %.1f ms, released in %.1f, kept in %.1f (%llu objects)",
	   handed, released, kept, objs);
	ok(measured, "status tells what CRIU's dump measured: frozen %.1f ms, %llu pages written", frozen, pages);
	ok(rig_line(out, "count", 0, NULL, 0) && rig_count(out) > at_copy - 1 && rig_alive(pid) &&
		   rig_line(out, "count", 0, NULL, 0),
	   "the process keeps running after the checkpoint");
	usleep(300000);
	long before_kill = rig_count(out);

	kill(pid, SIGKILL);
	for (int i = 0; i < 100 && rig_alive(pid); i++)
		usleep(20000);
	e = rig_restore(&r, copy, &pid, st, sizeof(st));
	ok(e == 0, "restore from the copy brings back pid %d (%s)", (int)pid, strerror(e));
	if (e)
		diag("%s", st);
	usleep(300000);
	kill(pid, SIGUSR1);
	ok(rig_line(out, "verify ok", 20000, line, sizeof(line)), "after the restore every device byte is intact");
	diag("%s (counted to %ld before the kill)", line, before_kill);
	long resumed = atol(line + strlen("verify ok count "));
	ok(resumed >= 10, "it resumed from the checkpoint's count (at least 10), not from zero");
	ok(rig_counts_past(out, resumed, 5000) && rig_alive(pid), "and it goes on counting");
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
