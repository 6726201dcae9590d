/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * /metrics, and the file --metrics-textfile writes for node_exporter,
 * parse with Prometheus's own parser (Python's prometheus_client) and
 * count what happened: a cow and a stop checkpoint of examples/counter
 * (stall and step histograms by protocol, bytes, outcomes), a lazy
 * restore (resume and full seconds), a restore that failed (by reason),
 * the processes traced. The textfile follows each job, whole (renamed
 * into place). Needs root, FUSE and python3-prometheus-client.
 */
#include "phosfs_test.h"

#define PY "/usr/bin/python3"

/* The samples of the metrics at path, as "name{l="v",…} value" lines
 * (labels sorted), parsed by prometheus_client into out; 0, or -1 when it
 * does not parse. */
static int samples(const char *path, char *out, size_t len)
{
	char cmd[PATH_MAX + 512];
	snprintf(cmd, sizeof(cmd),
		 PY " -c 'import sys\n"
		    "from prometheus_client.parser import text_string_to_metric_families as p\n"
		    "for f in p(open(sys.argv[1]).read()):\n"
		    "    for s in f.samples:\n"
		    "        l = \",\".join(\"%%s=\\\"%%s\\\"\" %% kv for kv in sorted(s.labels.items()))\n"
		    "        print(\"%%s{%%s} %%g\" %% (s.name, l, s.value))' '%s' 2>&1",
		 path);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	size_t n = fread(out, 1, len - 1, p);
	out[n] = 0;
	return pclose(p) == 0 ? 0 : -1;
}

/* The value of sample `name{labels}` in s, or -1. */
static double value(const char *s, const char *sample)
{
	size_t k = strlen(sample);
	for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, sample, k) && l[k] == ' ')
			return atof(l + k + 1);
	return -1;
}

int main(void)
{
	rig r;
	rig_require(&r);
	if (access(PY, X_OK) || system(PY " -c 'import prometheus_client' 2>/dev/null"))
		skip_all("needs " PY " with prometheus_client (python3-prometheus-client; make deps)");
	plan(7);
	char prom[96], tf[128];
	snprintf(prom, sizeof(prom), "%s/prom", r.dir);
	snprintf(tf, sizeof(tf), "%s/phos.prom", prom);
	mkdir(prom, 0755);
	r.opts[0] = "--metrics-textfile";
	r.opts[1] = prom;
	if (rig_mount(&r, NULL))
		bail("phosfs did not mount");
	static char s[1 << 20], t[1 << 20];
	char path[160], out[160], ctl[160], status[160], last[256], st[8192];
	snprintf(path, sizeof(path), "%s/metrics", r.mnt);
	ok(samples(path, s, sizeof(s)) == 0 && value(s, "phos_checkpoints_total{protocol=\"cow\",result=\"ok\"}") == 0 &&
		   samples(tf, t, sizeof(t)) == 0,
	   "before any job, /metrics and the textfile parse, with no checkpoint counted");

	pid_t pid = rig_counter(&r, 64);
	rig_out(&r, pid, out, sizeof(out));
	rig_files(&r, pid, ctl, status);
	if (!rig_line(out, "count 3", 20000, NULL, 0) || !rig_traced(&r, pid, 10000))
		bail("the counter did not start");
	if (!rig_checkpoint(&r, pid, "checkpoint cow name=a\n", last, sizeof(last)))
		bail("the cow checkpoint failed: %s", last);
	double stall = rig_stat(rig_read(status, st, sizeof(st)) ? st : "", "stall ms: ") / 1e3;
	samples(path, s, sizeof(s));
	ok(value(s, "phos_processes_traced{}") >= 1, "it counts the processes traced (%g)",
	   value(s, "phos_processes_traced{}"));
	double sum = value(s, "phos_checkpoint_stall_seconds_sum{protocol=\"cow\"}");
	ok(value(s, "phos_checkpoints_total{protocol=\"cow\",result=\"ok\"}") == 1 &&
		   value(s, "phos_checkpoint_stall_seconds_count{protocol=\"cow\"}") == 1 && sum > 0 &&
		   sum - stall < 1e-3 && stall - sum < 1e-3 &&
		   value(s, "phos_checkpoint_stall_seconds_bucket{le=\"+Inf\",protocol=\"cow\"}") == 1 &&
		   value(s, "phos_checkpoint_step_seconds_count{protocol=\"cow\",step=\"park\"}") == 1 &&
		   value(s, "phos_checkpoint_device_bytes_total{protocol=\"cow\"}") >= 64 << 20,
	   "a cow checkpoint: one ok, its stall (%.4f s, status %.4f s) in the stall and step histograms, its bytes", sum,
	   stall);

	if (!rig_checkpoint(&r, pid, "checkpoint stop name=b kill\n", last, sizeof(last)))
		bail("the stop checkpoint failed: %s", last);
	for (int i = 0; i < 100 && rig_alive(pid); i++)
		usleep(20000);
	rig_reap();
	char image[PATH_MAX];
	snprintf(image, sizeof(image), "%s/%d/b", r.store, (int)pid);
	pid_t back = 0;
	if (rig_restore(&r, image, &back, st, sizeof(st)) || !rig_restore_done(&r, 30000, st, sizeof(st)))
		bail("the restore failed: %s", st);
	rig_restore(&r, "/nonexistent-image", &back, st, sizeof(st));
	samples(path, s, sizeof(s));
	ok(value(s, "phos_restores_total{mode=\"lazy\",result=\"ok\"}") == 1 &&
		   value(s, "phos_restore_resume_seconds_count{mode=\"lazy\"}") == 1 &&
		   value(s, "phos_restore_full_seconds_sum{mode=\"lazy\"}") > 0 &&
		   value(s, "phos_checkpoints_total{protocol=\"stop\",result=\"ok\"}") == 1,
	   "a stop checkpoint and a lazy restore are counted, with the restore's resume and full seconds");
	ok(value(s, "phos_jobs_failed_total{job=\"restore\",reason=\"ENOENT\"}") == 1 &&
		   value(s, "phos_restores_total{mode=\"lazy\",result=\"failed\"}") == 1,
	   "a restore of an image that is not there is counted as failed, by its reason (ENOENT)");

	/* The textfile catches up within a second of the last job. */
	bool same = false;
	for (int i = 0; i < 50 && !same; i++, usleep(100000))
		same = samples(tf, t, sizeof(t)) == 0 &&
		       value(t, "phos_restores_total{mode=\"lazy\",result=\"failed\"}") == 1 &&
		       value(t, "phos_checkpoint_stall_seconds_sum{protocol=\"cow\"}") == sum;
	ok(same, "the textfile parses and has the same counts after the last job");
	DIR *d = opendir(prom);
	int files = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		files += de->d_name[0] != '.' || (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."));
	if (d)
		closedir(d);
	ok(files == 1, "the textfile's folder holds phos.prom alone (%d files): it is written aside and renamed", files);
	kill(back, SIGKILL);
	rig_reap();
	rig_cleanup(&r);
	return done();
}
