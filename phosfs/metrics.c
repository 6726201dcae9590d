/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * /metrics and --metrics-textfile (phosfs.h: metrics_*): what phosfs's
 * checkpoints and restores cost, in the Prometheus text exposition format
 * (version 0.0.4), counted since phosfs started.
 *
 * Checkpoints: stall and step seconds (histograms, by protocol), outcomes,
 * device and host bytes, CoW shadows, waits and safety-net waits.
 * Restores: resume and full seconds (histograms, by mode), outcomes,
 * device bytes, on-demand waits. Jobs failed, by kind and reason (the
 * errno's name). Gauges read at each scrape: processes traced, restores
 * running and queued.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "phosfs.h"

#define NBUCKETS 12
static const double bounds[NBUCKETS] = { 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2, 5, 10, 30, 60, 300 };

typedef struct hist {
	uint64_t le[NBUCKETS]; /* observations <= bounds[i] */
	uint64_t count;
	double sum;
} hist;

enum { PROTOS = 3, MODES = 2, REASONS = 64 };
static const char *const proto_names[PROTOS] = { "cow", "recopy", "stop" };
static const char *const mode_names[MODES] = { "eager", "lazy" };

typedef struct reason {
	const char *job; /* "checkpoint" or "restore" */
	char name[32];   /* the errno's name */
	uint64_t count;
} reason;

/* Guarded by lock: every field below. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct {
	hist stall[PROTOS], step[PROTOS][STEP_DONE];
	uint64_t ckpts[PROTOS][2]; /* [ok, failed] */
	uint64_t dev_bytes[PROTOS], host_bytes[PROTOS];
	uint64_t shadows, shadow_bytes, waits, net_waits;
	double wait_s, net_wait_s;
	hist resume[MODES], full[MODES];
	uint64_t restores[MODES][2];
	uint64_t restore_bytes, on_demand_waits;
	double on_demand_wait_s;
	reason reasons[REASONS];
	int nreasons;
	unsigned version; /* counts changes, for the textfile's writer */
	bool stop;
} m;

static void observe(hist *h, double v)
{
	for (int i = 0; i < NBUCKETS; i++)
		h->le[i] += v <= bounds[i];
	h->count++;
	h->sum += v;
}

static int proto_index(const char *proto)
{
	for (int i = 0; i < PROTOS; i++)
		if (!strcmp(proto, proto_names[i]))
			return i;
	return 0;
}

static void failed_locked(const char *job, int result)
{
	const char *name = strerrorname_np(-result);
	name = name ? name : "EIO";
	int i = 0;
	while (i < m.nreasons && (strcmp(m.reasons[i].job, job) || strcmp(m.reasons[i].name, name)))
		i++;
	if (i == m.nreasons && m.nreasons == REASONS)
		return;
	if (i == m.nreasons) {
		m.reasons[i].job = job;
		snprintf(m.reasons[i].name, sizeof(m.reasons[i].name), "%s", name);
		m.nreasons++;
	}
	m.reasons[i].count++;
}

static double s_of(uint64_t ns)
{
	return (double)ns / 1e9;
}

void metrics_checkpoint(const char *proto, int result, const engine_progress *p, const uint64_t *step_ns)
{
	int k = proto_index(proto);
	pthread_mutex_lock(&lock);
	m.ckpts[k][result != 0]++;
	if (result) {
		failed_locked("checkpoint", result);
	} else {
		observe(&m.stall[k], s_of(atomic_load(&p->stall_ns)));
		for (int st = 1; st < STEP_DONE; st++)
			if (step_ns[st])
				observe(&m.step[k][st], s_of(step_ns[st]));
		m.dev_bytes[k] += atomic_load(&p->done);
		m.host_bytes[k] += atomic_load(&p->criu_pages) * (uint64_t)sysconf(_SC_PAGESIZE);
	}
	m.shadows += atomic_load(&p->shadows);
	m.shadow_bytes += atomic_load(&p->shadow_bytes);
	m.waits += atomic_load(&p->waits);
	m.wait_s += s_of(atomic_load(&p->wait_ns));
	m.net_waits += atomic_load(&p->net_waits);
	m.net_wait_s += s_of(atomic_load(&p->net_wait_ns));
	m.version++;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

void metrics_restore(bool lazy, int result, const engine_progress *p)
{
	int k = lazy ? 1 : 0;
	pthread_mutex_lock(&lock);
	m.restores[k][result != 0]++;
	if (result) {
		failed_locked("restore", result);
	} else {
		if (atomic_load(&p->resume_ns))
			observe(&m.resume[k], s_of(atomic_load(&p->resume_ns)));
		if (atomic_load(&p->full_ns))
			observe(&m.full[k], s_of(atomic_load(&p->full_ns)));
		m.restore_bytes += atomic_load(&p->done);
	}
	if (k) {
		m.on_demand_waits += atomic_load(&p->waits);
		m.on_demand_wait_s += s_of(atomic_load(&p->wait_ns));
	}
	m.version++;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static void family(text *t, const char *name, const char *type, const char *help)
{
	text_add(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series, labels as `a="b",c="d"`. */
static void hist_series(text *t, const char *name, const char *labels, const hist *h)
{
	for (int i = 0; i < NBUCKETS; i++)
		text_add(t, "%s_bucket{%s,le=\"%g\"} %" PRIu64 "\n", name, labels, bounds[i], h->le[i]);
	text_add(t, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n%s_sum{%s} %.6f\n%s_count{%s} %" PRIu64 "\n", name, labels,
		 h->count, name, labels, h->sum, name, labels, h->count);
}

/* A histogram family, one series for each value of label key. */
static void hists(text *t, const char *name, const char *help, const char *key, const char *const *vals, int n,
		  const hist *h)
{
	char l[64];
	family(t, name, "histogram", help);
	for (int k = 0; k < n; k++) {
		snprintf(l, sizeof(l), "%s=\"%s\"", key, vals[k]);
		hist_series(t, name, l, &h[k]);
	}
}

/* A counter family of outcomes: one series for each value of label key,
 * result "ok" and "failed". */
static void outcomes(text *t, const char *name, const char *help, const char *key, const char *const *vals, int n,
		     const uint64_t (*c)[2])
{
	family(t, name, "counter", help);
	for (int k = 0; k < n; k++)
		for (int r = 0; r < 2; r++)
			text_add(t, "%s{%s=\"%s\",result=\"%s\"} %" PRIu64 "\n", name, key, vals[k], r ? "failed" : "ok",
				 c[k][r]);
}

/* A counter family with one series for each protocol. */
static void by_protocol(text *t, const char *name, const char *help, const uint64_t *v)
{
	family(t, name, "counter", help);
	for (int k = 0; k < PROTOS; k++)
		text_add(t, "%s{protocol=\"%s\"} %" PRIu64 "\n", name, proto_names[k], v[k]);
}

/* A counter without labels: a count, or (seconds) a time. */
static void counter(text *t, const char *name, const char *help, uint64_t count)
{
	family(t, name, "counter", help);
	text_add(t, "%s %" PRIu64 "\n", name, count);
}

static void seconds(text *t, const char *name, const char *help, double s)
{
	family(t, name, "counter", help);
	text_add(t, "%s %.6f\n", name, s);
}

static void checkpoint_text(text *t)
{
	char l[128];
	hists(t, "phos_checkpoint_stall_seconds", "How long a checkpoint stopped its job.", "protocol", proto_names,
	      PROTOS, m.stall);
	family(t, "phos_checkpoint_step_seconds", "histogram", "How long each step of a checkpoint took.");
	for (int k = 0; k < PROTOS; k++)
		for (int st = 1; st < STEP_DONE; st++)
			if (m.step[k][st].count) {
				snprintf(l, sizeof(l), "protocol=\"%s\",step=\"%s\"", proto_names[k], engine_step_name(st));
				hist_series(t, "phos_checkpoint_step_seconds", l, &m.step[k][st]);
			}
	outcomes(t, "phos_checkpoints_total", "Checkpoints that ended, by outcome.", "protocol", proto_names, PROTOS,
		 m.ckpts);
	by_protocol(t, "phos_checkpoint_device_bytes_total", "GPU memory written into published images.", m.dev_bytes);
	by_protocol(t, "phos_checkpoint_host_bytes_total", "Host memory pages CRIU wrote into published images.",
		    m.host_bytes);
	counter(t, "phos_cow_shadows_total", "Shadow copies made for writes during a copy-on-write copy.", m.shadows);
	counter(t, "phos_cow_shadow_bytes_total", "Bytes of those shadow copies.", m.shadow_bytes);
	counter(t, "phos_cow_waits_total", "Calls that waited for the copy of what they write.", m.waits);
	seconds(t, "phos_cow_wait_seconds_total", "Time those calls waited.", m.wait_s);
	counter(t, "phos_safety_net_waits_total", "Calls the safety net held until the copy ended.", m.net_waits);
	seconds(t, "phos_safety_net_wait_seconds_total", "Time the safety net held them.", m.net_wait_s);
}

static void restore_text(text *t)
{
	hists(t, "phos_restore_resume_seconds", "Time from a restore's start until its job ran.", "mode", mode_names,
	      MODES, m.resume);
	hists(t, "phos_restore_full_seconds", "Time from a restore's start until all its memory was back.", "mode",
	      mode_names, MODES, m.full);
	outcomes(t, "phos_restores_total", "Restores that ended, by outcome.", "mode", mode_names, MODES, m.restores);
	counter(t, "phos_restore_device_bytes_total", "GPU memory restores brought back.", m.restore_bytes);
	counter(t, "phos_restore_on_demand_waits_total", "Calls of lazily restored jobs that waited for memory.",
		m.on_demand_waits);
	seconds(t, "phos_restore_on_demand_wait_seconds_total", "Time those calls waited.", m.on_demand_wait_s);
	family(t, "phos_jobs_failed_total", "counter", "Checkpoints and restores that failed, by the errno's name.");
	for (int i = 0; i < m.nreasons; i++)
		text_add(t, "phos_jobs_failed_total{job=\"%s\",reason=\"%s\"} %" PRIu64 "\n", m.reasons[i].job,
			 m.reasons[i].name, m.reasons[i].count);
}

/* What is read at each scrape, outside the lock. */
static void gauges(text *t)
{
	pid_t *pids;
	size_t n = 0;
	if (registry_pids(&pids, &n) == 0)
		free(pids);
	family(t, "phos_processes_traced", "gauge", "Processes whose tracer phosfs holds now.");
	text_add(t, "phos_processes_traced %zu\n", n);
	restore_view *v;
	size_t nv;
	int running = 0, queued = 0;
	if (restore_views(&v, &nv, &running, &queued) == 0)
		free(v);
	family(t, "phos_restores_running", "gauge", "Restores whose job process runs now.");
	text_add(t, "phos_restores_running %d\n", running);
	family(t, "phos_restores_queued", "gauge", "Restores waiting for their turn.");
	text_add(t, "phos_restores_queued %d\n", queued);
	family(t, "phos_build_info", "gauge", "The phosfs that serves these metrics.");
	text_add(t, "phos_build_info{version=\"%s\"} 1\n", PHOS_VERSION);
}

int metrics_text(text *t)
{
	gauges(t);
	pthread_mutex_lock(&lock);
	checkpoint_text(t);
	restore_text(t);
	pthread_mutex_unlock(&lock);
	return t->oom ? -ENOMEM : 0;
}

unsigned metrics_wait(unsigned seen, int ms)
{
	pthread_mutex_lock(&lock);
	struct timespec until = engine_deadline(ms);
	while (m.version == seen && !m.stop)
		if (pthread_cond_timedwait(&changed, &lock, &until) == ETIMEDOUT)
			break;
	unsigned v = m.version;
	pthread_mutex_unlock(&lock);
	return v;
}

void metrics_wake(void)
{
	pthread_mutex_lock(&lock);
	m.stop = true;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

bool metrics_stopping(void)
{
	pthread_mutex_lock(&lock);
	bool s = m.stop;
	pthread_mutex_unlock(&lock);
	return s;
}
