/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint's image keeps what the checkpoint cost (format 1.6, its
 * STATS section), so that it can be read later, wherever the image went:
 * `phos-image info --json` on the image gives the same stall as phosfs's
 * status said (stall ms), the time of each step status named (but
 * publish, which comes after), and the job's counters: the device bytes
 * status counted, the staging pool, when the memory was off the GPU,
 * and, for cow, the copy-on-write counters, which a stop checkpoint does
 * not have. Its JSON parses with Python's json module, and `phos-image
 * info` prints the same stall.
 *
 * examples/counter (32 MiB of device memory) runs under phos on simcuda
 * and is checkpointed twice: cow (the default), then stop. Needs root,
 * FUSE and CRIU.
 */
#include <jansson.h>

#include "imgtest.h"
#include "phosfs_test.h"

/* The value of stats' key, or -1 where it has none. */
static double stat_of(json_t *stats, const char *key)
{
	json_t *v = json_object_get(stats, key);
	return json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
}

/* Whether a time in ns is the one status showed in ms, to its 0.1 ms. */
static int same_ms(double ns, double ms)
{
	return ns >= 0 && ms >= 0 && ns / 1e6 >= ms - 0.0501 && ns / 1e6 <= ms + 0.0501;
}

/* Checks the steps of status's "steps ms:" line (in st) against the
 * image's stats: each step but publish is there with its time, and the
 * image has no step status did not name. Puts what differs into why. */
static int same_steps(const char *st, json_t *stats, char *why, size_t len)
{
	const char *l = strstr(st, "steps ms:");
	int nstatus = 0, bad = 0;
	*why = 0;
	if (!l)
		return snprintf(why, len, "status has no steps"), 0;
	l += strlen("steps ms:");
	char name[64];
	double ms;
	int used;
	while (!bad && *l != '\n' && sscanf(l, " %63s %lf%n", name, &ms, &used) == 2) {
		l += used;
		if (!strcmp(name, "publish"))
			continue;
		char key[96];
		snprintf(key, sizeof(key), "step_ns.%s", name);
		nstatus++;
		if (!same_ms(stat_of(stats, key), ms))
			bad = snprintf(why, len, "%s: status %.1f ms, the image %.0f ns", key, ms, stat_of(stats, key));
	}
	int nimage = 0;
	const char *key;
	json_t *v;
	json_object_foreach(stats, key, v)
		nimage += !strncmp(key, "step_ns.", 8);
	if (!bad && nimage != nstatus)
		bad = snprintf(why, len, "status names %d steps, the image %d", nstatus, nimage);
	return !bad && nstatus > 0;
}

/* The total of status's "off gpu: N/TOTAL bytes". */
static double status_total(const char *st)
{
	const char *l = strstr(st, "off gpu: ");
	const char *slash = l ? strchr(l, '/') : NULL;
	return slash ? atof(slash + 1) : -1;
}

typedef struct seen {
	int parses;     /* python3's json module parses it */
	json_t *j;      /* the JSON, as jansson reads it */
	json_t *stats;  /* its stats */
	char text[256]; /* `phos-image info`'s stall_ns line */
} seen;

/* Runs phos-image info --json and info on image (output into dir). */
static void look(const char *image, const char *dir, seen *s)
{
	char out[PATH_MAX + 16], cmd[2 * PATH_MAX + 96];
	memset(s, 0, sizeof(*s));
	snprintf(out, sizeof(out), "%s/info.json", dir);
	if (run_tool(out, "info", "--json", image) != 0)
		return;
	snprintf(cmd, sizeof(cmd), "python3 -c 'import json,sys; json.load(sys.stdin)' < '%s'", out);
	s->parses = system(cmd) == 0;
	json_error_t err;
	s->j = json_load_file(out, 0, &err);
	if (!s->j)
		diag("%s: not JSON: %s (line %d)", out, err.text, err.line);
	s->stats = json_object_get(s->j, "stats");
	snprintf(out, sizeof(out), "%s/info.txt", dir);
	if (run_tool(out, "info", image, NULL) == 0)
		rig_line(out, "stat stall_ns: ", 0, s->text, sizeof(s->text));
}

/* Checkpoints pid with cmd into the image name; its status after, into
 * st. 1 when done and the image verifies. */
static int checkpoint(rig *r, pid_t pid, const char *cmd, const char *name, char *image, char *st, size_t len)
{
	char last[256] = "", ctl[160], status[160];
	snprintf(image, PATH_MAX, "%s/%d/%s", r->store, (int)pid, name);
	int done = rig_checkpoint(r, pid, cmd, last, sizeof(last));
	rig_files(r, pid, ctl, status);
	rig_read(status, st, len);
	if (!done)
		diag("%s: %s", cmd, last);
	return done && rig_verify(image);
}

int main(void)
{
	rig r;
	rig_require(&r);
	if (system("python3 -c 'import json' 2>/dev/null") != 0)
		skip_all("needs python3");
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	plan(11);
	pid_t pid = rig_counter(&r, 32);
	char out[PATH_MAX], image[PATH_MAX], st[8192] = "", why[256];
	rig_out(&r, pid, out, sizeof(out));
	int up = pid > 0 && rig_line(out, "count 3", 20000, NULL, 0) && rig_traced(&r, pid, 5000);
	ok(up, "examples/counter runs under the tracer");
	if (!up)
		bail("examples/counter did not start (%s)", out);

	int saved = checkpoint(&r, pid, "checkpoint name=a\n", "a", image, st, sizeof(st));
	ok(saved && strstr(st, "protocol: cow\n"), "a cow checkpoint is published and verifies");
	seen s;
	look(image, r.dir, &s);
	ok(s.parses && json_is_object(s.stats), "phos-image info --json on its image parses with Python's json module");
	double stall = stat_of(s.stats, "stall_ns"), ms = rig_stat(st, "stall ms: ");
	ok(stall > 0 && same_ms(stall, ms), "stats.stall_ns (%.0f) is the stall status said (%.1f ms)", stall, ms);
	int steps = same_steps(st, s.stats, why, sizeof(why));
	ok(steps && stat_of(s.stats, "step_ns.park") > 0 && stat_of(s.stats, "step_ns.driver-checkpoint") > 0 &&
		   stat_of(s.stats, "step_ns.criu-dump") > 0 && stat_of(s.stats, "step_ns.publish") < 0,
	   "each step status named has its time in the image (park, driver-checkpoint, criu-dump…), publish none%s%s",
	   *why ? ": " : "", why);
	double total = status_total(st);
	ok(stat_of(s.stats, "device_bytes") == total && total >= 32 << 20 && stat_of(s.stats, "staging_bytes") > 0 &&
		   stat_of(s.stats, "off_gpu_ns") > 0 && stat_of(s.stats, "park_objects") > 0,
	   "the counters: device bytes as status counted them (%.0f), the staging pool, when it was off the GPU, the "
	   "objects parked",
	   total);
	ok(stat_of(s.stats, "cow_shadows") >= 0 && stat_of(s.stats, "cow_waits") >= 0 &&
		   stat_of(s.stats, "safety_net_waits") >= 0 && stat_of(s.stats, "cow_shadow_bytes") >= 0 &&
		   stat_of(s.stats, "recopy_dirty_bytes") < 0,
	   "a cow checkpoint's image has the copy-on-write counters, not recopy's");
	int criu = strstr(st, "criu dump ms: ") != NULL;
	ok(!criu || (stat_of(s.stats, "criu_frozen_us") > 0 && stat_of(s.stats, "criu_pages") >= 0),
	   "what CRIU's dump measured is there where status showed it (%s)", criu ? "it did" : "it did not");
	char want[64];
	snprintf(want, sizeof(want), "stat stall_ns: %.0f", stall);
	ok(stall > 0 && !strcmp(s.text, want), "phos-image info prints it: %s", s.text);
	json_decref(s.j);

	saved = checkpoint(&r, pid, "checkpoint stop name=b\n", "b", image, st, sizeof(st));
	look(image, r.dir, &s);
	stall = stat_of(s.stats, "stall_ns"), ms = rig_stat(st, "stall ms: ");
	steps = same_steps(st, s.stats, why, sizeof(why));
	ok(saved && s.parses && stall > 0 && same_ms(stall, ms) && steps,
	   "a stop checkpoint's image has its stall (%.0f ns, status %.1f ms) and its steps%s%s", stall, ms,
	   *why ? ": " : "", why);
	ok(s.stats && stat_of(s.stats, "cow_shadows") < 0 && stat_of(s.stats, "device_bytes") >= 32 << 20,
	   "and no copy-on-write counters");
	json_decref(s.j);

	kill(pid, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
