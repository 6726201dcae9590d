/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phosfs: the phos file system daemon.
 *
 *   phosfs [--socket PATH] [--store DIR] [--criu PATH] [--criu-plugins DIR]
 *          [--staging SIZE] [--chunk SIZE] [--shadow-pool auto|SIZE] [--fill-threads N]
 *          [--restores N] [--restore-queue N] [--restore-timeout SECONDS]
 *          [--checkpoint-wait SECONDS] [--checkpoint-timeout SECONDS]
 *          [--dump-timeout SECONDS] [--job-pool N] [--metrics-textfile DIR]
 *          [FUSE options] MOUNTPOINT
 *
 * Registers traced processes on the socket (default /run/phos/phosfs.sock)
 * and shows them under MOUNTPOINT; images go under the store (default
 * /var/lib/phos). FUSE's own options apply: -f to stay in the foreground
 * (logging to stderr as well as syslog), -d to debug, -o …. SIGTERM,
 * SIGINT and SIGHUP unmount and exit with status 0.
 *
 * `phosfs --job …` is a job process, started by phosfs itself (job/main.c).
 */
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <errno.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <syslog.h>
#include <limits.h>
#include <unistd.h>

#include "phosfs.h"

#ifndef PHOS_LIBEXEC
#define PHOS_LIBEXEC "/usr/local/libexec/phos"
#endif

const char *phosfs_store;
const char *phosfs_criu;
const char *phosfs_self;
const char *phosfs_criu_plugins = "";
uint64_t phosfs_staging = ENGINE_STAGING;
uint64_t phosfs_chunk = ENGINE_CHUNK;
uint64_t phosfs_shadow_pool = ENGINE_SHADOW_POOL_AUTO;
int phosfs_fill_threads = 0; /* engine_filler_start's default */
int phosfs_restores = 4;
int phosfs_restore_queue = 16;
int phosfs_restore_timeout = 600;
int phosfs_job_pool = 1;
const char *phosfs_metrics_textfile;
int phosfs_checkpoint_wait = 300;
uint32_t phosfs_checkpoint_timeout_ms = CHECKPOINT_TIMEOUT_MS;
int phosfs_dump_timeout = CHECKPOINT_DUMP_TIMEOUT_S;

extern const struct fuse_operations phosfs_ops;

static void *init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	cfg->direct_io = 1; /* sizes of generated files are not known */
	cfg->attr_timeout = 0;
	cfg->entry_timeout = 0;
	cfg->negative_timeout = 0;
	return NULL;
}

static int usage(FILE *f)
{
	fprintf(f, "usage: phosfs [--socket PATH] [--store DIR] [--criu PATH] [--criu-plugins DIR] [--staging SIZE]\n"
		   "              [--chunk SIZE] [--shadow-pool auto|SIZE] [--fill-threads N] [--restores N]\n"
		   "              [--restore-queue N] [--restore-timeout SECONDS] [--checkpoint-wait SECONDS]\n"
		   "              [--checkpoint-timeout SECONDS] [--dump-timeout SECONDS] [--job-pool N]\n"
		   "              [--metrics-textfile DIR]\n"
		   "              [-f] [-d] [-o OPTIONS]\n"
		   "              MOUNTPOINT\n"
		   "SIZE is bytes, or a number with K, M, G or T (binary units).\n");
	return f == stdout ? 0 : 2;
}

/* "4G", "512M", "4194304": bytes into *out; false if s is not a size. */
static bool parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno || *s == '-')
		return false;
	int shift = 0;
	switch (*end) {
	case 'K': case 'k': shift = 10; break;
	case 'M': case 'm': shift = 20; break;
	case 'G': case 'g': shift = 30; break;
	case 'T': case 't': shift = 40; break;
	case 0: break;
	default: return false;
	}
	if (*end && end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B"))
		return false;
	if (shift && v > (~0ull >> shift))
		return false;
	*out = (uint64_t)v << shift;
	return true;
}

/* b in the largest binary unit that holds it whole ("256 MiB"). */
static const char *size_words(uint64_t b, char *out, size_t len)
{
	static const char *const unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB" };
	int u = 0;
	while (u < 5 && b && !(b & 1023)) {
		b >>= 10;
		u++;
	}
	snprintf(out, len, "%llu %s", (unsigned long long)b, unit[u]);
	return out;
}

/* A size option's value, or exits with a message. */
static uint64_t size_option(const char *opt, const char *v, uint64_t min, uint64_t max, bool pow2)
{
	uint64_t b = 0;
	if (!parse_size(v, &b) || b < min || b > max || (pow2 && (b & (b - 1)))) {
		char lo[32], hi[32];
		fprintf(stderr, "phosfs: %s %s: expected %s%s to %s\n", opt, v, pow2 ? "a power of two from " : "",
			size_words(min, lo, sizeof(lo)), size_words(max, hi, sizeof(hi)));
		exit(2);
	}
	return b;
}

/* A count option's value, from min to max, or exits with a message. */
static int count_option(const char *opt, const char *v, int min, int max)
{
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (end == v || *end || errno || n < min || n > max) {
		fprintf(stderr, "phosfs: %s %s: expected a number from %d to %d\n", opt, v, min, max);
		exit(2);
	}
	return (int)n;
}

/* Removes the half images that checkpoint jobs which died left in the
 * store (jobs that still run keep theirs), and half pruned ones. */
static void clear_half_images(const char *store)
{
	DIR *d = opendir(store);
	for (struct dirent *de; d && (de = readdir(d));) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		char dir[PATH_MAX + 256];
		snprintf(dir, sizeof(dir), "%s/%s", store, de->d_name);
		phosimg_clear_stale(dir);
		schedule_clear_pruned(dir);
	}
	if (d)
		closedir(d);
}

/* The file system type mounted at path (from mountinfo) into type; false
 * if nothing is mounted there. */
static bool mounted_type(const char *path, char *type, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	while (f && getline(&line, &cap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [FIELDS…] - TYPE SOURCE … */
		char mp[PATH_MAX];
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1 || strcmp(mp, path))
			continue;
		const char *dash = strstr(line, " - ");
		if (dash && sscanf(dash + 3, "%63s", type) == 1 && len >= 64)
			found = true; /* the last mount there wins: keep reading */
	}
	free(line);
	if (f)
		fclose(f);
	return found;
}

/* A phosfs that was killed leaves its mount behind, dead ("Transport
 * endpoint is not connected"): it is taken away, as other FUSE daemons
 * do. A live phosfs there is left alone. 0, or -EBUSY (live) with er. */
static int take_stale_mount(const char *mnt, perr *er)
{
	char abs[PATH_MAX], type[64];
	struct stat st;
	if (stat(mnt, &st) == 0 || errno != ENOTCONN)
		return 0; /* nothing there, or alive: fuse_mount says so */
	if (!realpath(mnt, abs))
		snprintf(abs, sizeof(abs), "%s", mnt);
	if (!mounted_type(abs, type, sizeof(type)) || strncmp(type, "fuse", 4))
		return pr_err(er, -EBUSY, "%s: %s, and it is no FUSE mount phosfs could take over", mnt,
			      strerror(ENOTCONN));
	if (umount2(abs, MNT_DETACH) != 0)
		return pr_err(er, -EBUSY,
			      "%s: the mount of a phosfs that died is still there and cannot be taken away: %s", mnt,
			      strerror(errno));
	syslog(LOG_NOTICE, "%s: took away the mount a phosfs that died left there", abs);
	return 0;
}

/* Makes the store and its run/ folder (where `phos run` writes output). */
static int make_store(const char *dir, char *abs)
{
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s", dir);
	for (char *s = tmp + 1; *s; s++) {
		if (*s == '/') {
			*s = 0;
			mkdir(tmp, 0755);
			*s = '/';
		}
	}
	if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
		return -errno;
	if (!realpath(dir, abs))
		return -errno;
	snprintf(tmp, sizeof(tmp), "%s/run", abs);
	if ((mkdir(tmp, 01777) != 0 && errno != EEXIST) || chmod(tmp, 01777) != 0)
		return -errno;
	return 0;
}

/* phosfs's own options, as fuse_opt_parse leaves them: strings it
 * allocated, each taken as `--NAME VALUE` or `--NAME=VALUE`. */
struct options {
	char *sock, *store, *criu, *plugins, *staging, *chunk, *pool, *fill_threads, *restores, *queue,
		*restore_timeout, *checkpoint_wait, *checkpoint_timeout, *dump_timeout, *job_pool, *metrics_textfile;
	int help;
	int want;          /* the offset of the field the next argument is the value of, or -1 */
	const char *wanted; /* its option's name */
};

/* `--NAME=VALUE` is a template of its own. `--NAME VALUE` is not
 * "--NAME %s": fuse_opt matches such a template on a prefix (as "-ofoo"
 * matches "-o %s") and applies every template that matches, so
 * "--criu %s" would take "--criu-plugins DIR" too, setting CRIU to
 * "-plugins". The name alone is matched whole, as a key (the field's
 * offset), and take() gives it the next argument. */
#define OPT(name, field)                                                        \
	FUSE_OPT_KEY(name, (int)offsetof(struct options, field)),               \
	{ name "=%s", offsetof(struct options, field), 0 }

static const struct fuse_opt phosfs_opts[] = {
	OPT("--socket", sock),
	OPT("--store", store),
	OPT("--criu", criu),
	OPT("--criu-plugins", plugins),
	OPT("--staging", staging),
	OPT("--chunk", chunk),
	OPT("--shadow-pool", pool),
	OPT("--fill-threads", fill_threads),
	OPT("--restores", restores),
	OPT("--restore-queue", queue),
	OPT("--restore-timeout", restore_timeout),
	OPT("--checkpoint-wait", checkpoint_wait),
	OPT("--checkpoint-timeout", checkpoint_timeout),
	OPT("--dump-timeout", dump_timeout),
	OPT("--job-pool", job_pool),
	OPT("--metrics-textfile", metrics_textfile),
	{ "-h", offsetof(struct options, help), 1 },
	{ "--help", offsetof(struct options, help), 1 },
	FUSE_OPT_END
};

/* fuse_opt_parse's callback: a name alone (its key, the field's offset)
 * wants the next argument as its value. Returns 0 (taken), 1 (left to
 * FUSE) or -1 (an error, said on stderr). */
static int take(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	(void)outargs;
	struct options *o = data;
	if (o->want >= 0) {
		if (key != FUSE_OPT_KEY_NONOPT) {
			fprintf(stderr, "phosfs: %s needs a value\n", o->wanted);
			return -1;
		}
		char **field = (char **)((char *)o + o->want);
		free(*field);
		*field = strdup(arg);
		o->want = -1;
		return *field ? 0 : -1;
	}
	if (key >= 0) {
		o->want = key;
		o->wanted = arg;
		return 0;
	}
	return 1;
}

static void options_free(struct options *o)
{
	char **all[] = { &o->sock,	   &o->store,	 &o->criu,	   &o->plugins,
			 &o->staging,	   &o->chunk,	 &o->pool,	   &o->fill_threads,
			 &o->restores,	   &o->queue,	 &o->restore_timeout, &o->checkpoint_wait,
			 &o->checkpoint_timeout, &o->dump_timeout, &o->job_pool, &o->metrics_textfile };
	for (size_t i = 0; i < sizeof(all) / sizeof(*all); i++) {
		free(*all[i]);
		*all[i] = NULL;
	}
}

/* Sets the settings the options give, checking each (a bad value exits
 * with a message naming it). */
static void apply_options(const struct options *o)
{
	if (o->criu)
		phosfs_criu = o->criu;
	if (o->plugins)
		phosfs_criu_plugins = o->plugins;
	if (o->staging)
		phosfs_staging = size_option("--staging", o->staging, 1ull << 20, 1ull << 50, false);
	if (o->chunk)
		phosfs_chunk = size_option("--chunk", o->chunk, 64u << 10, 256u << 20, true);
	if (o->pool && !strcmp(o->pool, "auto"))
		phosfs_shadow_pool = ENGINE_SHADOW_POOL_AUTO;
	else if (o->pool)
		phosfs_shadow_pool = size_option("--shadow-pool", o->pool, 0, 1ull << 50, false);
	if (o->fill_threads)
		phosfs_fill_threads = count_option("--fill-threads", o->fill_threads, 1, ENGINE_FILL_THREADS_MAX);
	if (o->restores)
		phosfs_restores = count_option("--restores", o->restores, 1, 64);
	if (o->queue)
		phosfs_restore_queue = count_option("--restore-queue", o->queue, 0, 1024);
	if (o->restore_timeout)
		phosfs_restore_timeout = count_option("--restore-timeout", o->restore_timeout, 1, 86400);
	if (o->checkpoint_wait)
		phosfs_checkpoint_wait = count_option("--checkpoint-wait", o->checkpoint_wait, 0, 86400);
	if (o->job_pool)
		phosfs_job_pool = count_option("--job-pool", o->job_pool, 0, 16);
	if (o->dump_timeout)
		phosfs_dump_timeout = count_option("--dump-timeout", o->dump_timeout, 1, JOB_DUMP_TIMEOUT_MAX_S);
	if (o->metrics_textfile) {
		struct stat st;
		errno = 0;
		if (stat(o->metrics_textfile, &st) || !S_ISDIR(st.st_mode) || access(o->metrics_textfile, W_OK)) {
			fprintf(stderr, "phosfs: --metrics-textfile %s: %s\n", o->metrics_textfile,
				errno ? strerror(errno) : "not a folder");
			exit(2);
		}
		/* Absolute: phosfs leaves its folder when it daemonizes. */
		static char abs[PATH_MAX];
		phosfs_metrics_textfile = realpath(o->metrics_textfile, abs) ? abs : o->metrics_textfile;
	}
	perr er = { 0 };
	if (o->checkpoint_timeout && ctl_timeout(o->checkpoint_timeout, &phosfs_checkpoint_timeout_ms, &er)) {
		fprintf(stderr, "phosfs: --checkpoint-timeout: %s\n", er.msg);
		exit(2);
	}
}

/* Where CRIU and phos's CRIU plugins are: as the environment says, else
 * where phos installs them, else CRIU on the PATH and no plugins. */
static void find_criu(void)
{
	const char *criu = getenv("PHOS_CRIU");
	phosfs_criu = criu && *criu ? criu : access(PHOS_LIBEXEC "/criu", X_OK) == 0 ? PHOS_LIBEXEC "/criu" : "criu";
	const char *plugins = getenv("PHOS_CRIU_PLUGINS");
	phosfs_criu_plugins = plugins ? plugins
			      : access(PHOS_LIBEXEC "/criu-plugins", X_OK) == 0 ? PHOS_LIBEXEC "/criu-plugins"
										 : "";
}

/* Makes the store (its absolute path into store_abs), the staging pool
 * and the log, and says once what CRIU cannot do here. Errors:
 * make_store's, said on stderr. */
static int prepare(const char *store, char *store_abs, bool foreground)
{
	static char self[PATH_MAX];
	int e = make_store(store, store_abs);
	if (e) {
		fprintf(stderr, "phosfs: cannot use the store %s: %s\n", store, strerror(-e));
		return e;
	}
	int sg = staging_start(phosfs_staging);
	if (sg)
		syslog(LOG_WARNING, "cannot make the %llu MiB staging pool (%s): each checkpoint pins its own",
		       (unsigned long long)(phosfs_staging >> 20), strerror(-sg));
	phosfs_store = store_abs;
	clear_half_images(store_abs);
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[sl > 0 ? sl : 0] = 0;
	phosfs_self = self;
	openlog("phosfs", LOG_PID | (foreground ? LOG_PERROR : 0), LOG_DAEMON);
	char limits[1024];
	criu_limits(limits, sizeof(limits));
	if (*limits)
		syslog(LOG_WARNING, "%s", limits);
	if (!criu_snapshot_pages(phosfs_criu))
		syslog(LOG_WARNING, "CRIU %s has no --snapshot-pages (phos's mk/criu-patches): each checkpoint writes the "
				    "processes' pages inside its stall, as plain CRIU does",
		       phosfs_criu);
	if (!*phosfs_criu_plugins)
		syslog(LOG_WARNING, "no CRIU plugins (--criu-plugins): forked children of CUDA processes, such as "
				    "PyTorch DataLoader workers, cannot be checkpointed");
	return 0;
}

/* Mounts phosfs on mnt and serves it, with the registry on sock, until a
 * signal ends it. Returns the exit status. */
static int serve(struct fuse_args *args, const char *mnt, bool foreground, const char *sock)
{
	struct fuse_operations ops = phosfs_ops;
	ops.init = init;
	int rc = 1;
	/* Every thread from here on leaves them to the signal thread. */
	phosfs_signals_block();
	struct fuse *f = fuse_new(args, &ops, sizeof(ops), NULL);
	if (!f)
		return 1;
	if (fuse_mount(f, mnt) != 0) {
		fprintf(stderr, "phosfs: cannot mount %s\n", mnt);
		goto out_destroy;
	}
	if (fuse_daemonize(foreground) != 0)
		goto out_unmount;
	/* After daemonizing: the threads must be the daemon's. */
	char real[PATH_MAX];
	const char *at = realpath(mnt, real) ? real : mnt;
	int e = phosfs_signals_start(fuse_get_session(f), at);
	if (e) {
		fprintf(stderr, "phosfs: cannot start its signal thread: %s\n", strerror(e));
		goto out_unmount;
	}
	e = registry_start(sock);
	if (e) {
		fprintf(stderr, "phosfs: cannot listen on %s: %s\n", sock, strerror(-e));
		goto out_unmount;
	}
	/* Its jobs know its mount (to tell it from a FUSE mount that holds
	 * them: engine/fuse-wait.h). */
	setenv("PHOS_MOUNT", at, 1);
	/* After daemonizing too: its jobs are the daemon's children. */
	if (pool_start(phosfs_job_pool))
		fprintf(stderr, "phosfs: no job pool: out of memory\n");
	if (phosfs_metrics_textfile && (e = metrics_textfile_start(phosfs_metrics_textfile))) {
		fprintf(stderr, "phosfs: --metrics-textfile %s: %s\n", phosfs_metrics_textfile, strerror(-e));
		syslog(LOG_ERR, "--metrics-textfile %s: %s", phosfs_metrics_textfile, strerror(-e));
	}
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(cfg, 16);
	int res = fuse_loop_mt(f, cfg);
	fuse_loop_cfg_destroy(cfg);
	/* Ended by a signal, or by an unmount (0), it ended well. */
	rc = phosfs_signals_stop() || res == 0 ? 0 : 1;
	if (rc)
		fprintf(stderr, "phosfs: the file system failed: %s\n", strerror(res < 0 ? -res : EIO));
	schedule_stop_all();
	metrics_textfile_stop();
	pool_stop();
	registry_stop();
	targets_free();
	restores_free();
	events_free();
out_unmount:
	fuse_unmount(f);
out_destroy:
	fuse_destroy(f);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--job"))
		return job_main(argc, argv);
	static char store_abs[PATH_MAX];
	find_criu();
	/* phosfs's own options; the rest (-f, -d, -o …, the mountpoint) are
	 * FUSE's, and stay in args. */
	struct options o = { .want = -1 };
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	if (fuse_opt_parse(&args, &o, phosfs_opts, take) != 0 || o.want >= 0) {
		if (o.want >= 0)
			fprintf(stderr, "phosfs: %s needs a value\n", o.wanted);
		options_free(&o);
		fuse_opt_free_args(&args);
		return usage(stderr);
	}
	if (o.help) {
		options_free(&o);
		fuse_opt_free_args(&args);
		return usage(stdout);
	}
	const char *sock = o.sock ? o.sock : wire_socket_path();
	const char *store = o.store ? o.store : "/var/lib/phos";
	apply_options(&o);
	/* Everyone may look; what each sees is decided per process. */
	struct fuse_cmdline_opts opts = { 0 };
	int rc = 1;
	if (fuse_opt_add_arg(&args, "-o") || fuse_opt_add_arg(&args, "allow_other,default_permissions"))
		goto out;
	if (fuse_parse_cmdline(&args, &opts) != 0 || !opts.mountpoint) {
		rc = usage(stderr);
		goto out;
	}
	if (prepare(store, store_abs, opts.foreground))
		goto out;
	perr why = { 0 };
	if (take_stale_mount(opts.mountpoint, &why)) {
		fprintf(stderr, "phosfs: %s\n", why.msg);
		goto out;
	}
	rc = serve(&args, opts.mountpoint, opts.foreground, sock);
out:
	free(opts.mountpoint);
	fuse_opt_free_args(&args);
	options_free(&o);
	return rc;
}
