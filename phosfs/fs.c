/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The /phos tree:
 *
 *   /version                     r   phosfs, wire and image format versions, the store
 *   /ctl                         w   restore DIR [eager|lazy] …        (root; read back: "restore ID")
 *   /status                      r   restores running and queued, the last one's outcome (root)
 *   /status.json                 r   the same, as one JSON object (root)
 *   /events                      r   checkpoints' and restores' events, a JSON object a line (root; poll)
 *   /metrics                     r   counters and histograms, Prometheus text format
 *   /restores/<id>               r   one restore: state, pid, steps, error (root)
 *   /<pid>/                      dr  root and the process owner only
 *   /<pid>/ctl                   w   checkpoint [cow|recopy|stop] [name=N] [kill] | cancel
 *   /<pid>/status                r   key: value lines
 *   /<pid>/status.json           r   the same, as one JSON object
 *   /<pid>/buffers               r   va size device state reads writes
 *   /<pid>/kernels               r   launches reads writes bytes_written params name
 *   /<pid>/nccl                  r   communicator rank size operations
 *   /<pid>/checkpoints/<n>/…     r   the image, from the store
 *   /<pid>/checkpoints/latest        -> <n>
 *
 * /<pid> exists for a registered (traced) process, for any live process
 * (so that an untraced one can be checkpointed), and for a pid with a job
 * or checkpoints. Generated files are made whole at open (a snapshot, as
 * lxcfs does) and read with direct_io. A checkpoint that is still being
 * written lists its entries at once, gpu.data first; gpu.data is read as
 * it is written (a read waits until its bytes are final), everything else
 * waits until the image is published. So a copy taken meanwhile is whole,
 * and most of it is done when the checkpoint is.
 */
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/pidns.h"
#include "../image-format/phosimg.h"
#include "phosfs.h"

#define STREAM_POLL_US 2000 /* how often a reader ahead of the writer looks again */
#define WRITTEN_SLICE_MS 200 /* how often a call waiting for an image looks whether to give up */

enum node {
	N_ROOT,
	N_VERSION,
	N_ROOT_CTL,
	N_ROOT_STATUS,
	N_ROOT_STATUS_JSON,
	N_EVENTS,
	N_METRICS,
	N_RESTORES,
	N_RESTORE, /* /restores/<id> */
	N_PROC,
	N_CTL,
	N_STATUS,
	N_STATUS_JSON,
	N_BUFFERS,
	N_KERNELS,
	N_NCCL,
	N_CKPTS,
	N_LATEST,
	N_IMAGE, /* a checkpoint, or something inside one */
	N_NONE
};

static const char *const proc_files[] = { "ctl", "status", "status.json", "buffers", "kernels", "nccl", "checkpoints" };

/* A parsed path. */
typedef struct where {
	enum node n;
	pid_t pid;
	unsigned id; /* N_RESTORE */
	char name[CTL_NAME_MAX + 1]; /* N_IMAGE: the checkpoint */
	const char *rest;            /* N_IMAGE: "" or "/…" inside it */
} where;

static where parse(const char *path)
{
	where w = { .n = N_NONE, .rest = "" };
	if (!strcmp(path, "/"))
		return w.n = N_ROOT, w;
	if (!strcmp(path, "/version"))
		return w.n = N_VERSION, w;
	if (!strcmp(path, "/ctl"))
		return w.n = N_ROOT_CTL, w;
	if (!strcmp(path, "/status"))
		return w.n = N_ROOT_STATUS, w;
	if (!strcmp(path, "/status.json"))
		return w.n = N_ROOT_STATUS_JSON, w;
	if (!strcmp(path, "/events"))
		return w.n = N_EVENTS, w;
	if (!strcmp(path, "/metrics"))
		return w.n = N_METRICS, w;
	if (!strcmp(path, "/restores"))
		return w.n = N_RESTORES, w;
	char *end;
	if (!strncmp(path, "/restores/", 10)) {
		unsigned long id = strtoul(path + 10, &end, 10);
		if (path[10] >= '1' && path[10] <= '9' && !*end && id <= 0xffffffffu)
			w.n = N_RESTORE, w.id = (unsigned)id;
		return w;
	}
	long v = strtol(path + 1, &end, 10);
	if (path[1] < '1' || path[1] > '9' || v <= 0 || v > 4194304 || (*end && *end != '/'))
		return w;
	w.pid = (pid_t)v;
	static const struct {
		const char *s;
		enum node n;
	} files[] = { { "", N_PROC },	       { "/ctl", N_CTL },	  { "/status", N_STATUS },
		      { "/status.json", N_STATUS_JSON },
		      { "/buffers", N_BUFFERS }, { "/kernels", N_KERNELS }, { "/nccl", N_NCCL },
		      { "/checkpoints", N_CKPTS },
		      { "/checkpoints/latest", N_LATEST } };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (!strcmp(end, files[i].s))
			return w.n = files[i].n, w;
	if (strncmp(end, "/checkpoints/", 13))
		return w;
	const char *name = end + 13;
	size_t len = strcspn(name, "/");
	if (len > CTL_NAME_MAX)
		return w;
	memcpy(w.name, name, len);
	w.name[len] = 0;
	if (!ctl_name_ok(w.name))
		return w;
	w.rest = name + len;
	w.n = N_IMAGE;
	return w;
}

static uid_t caller(void)
{
	return fuse_get_context()->uid;
}

/* The owner of /<pid>, and whether it exists at all. */
static bool exists(pid_t pid, uid_t *uid)
{
	proc *p = registry_get(pid);
	if (p) {
		*uid = p->uid;
		registry_put(p);
		return true;
	}
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) == 0) {
		*uid = st.st_uid;
		return true;
	}
	target *t = target_get(pid, false);
	if (t) {
		pthread_mutex_lock(&t->lock);
		*uid = t->uid;
		pthread_mutex_unlock(&t->lock);
		return true;
	}
	snprintf(path, sizeof(path), "%s/%d", phosfs_store, (int)pid);
	if (stat(path, &st) == 0) {
		*uid = st.st_uid;
		return true;
	}
	return false;
}

/* Whether the caller may see into /<pid>: root and the owner only;
 * -EACCES for another user's process, which readdir of / leaves out. */
static int visible(pid_t pid, uid_t *uid)
{
	if (!exists(pid, uid))
		return -ENOENT;
	uid_t c = caller();
	return c == 0 || c == *uid ? 0 : -EACCES;
}

static void store_path(char *out, size_t len, const where *w)
{
	snprintf(out, len, "%s/%d/%s%s", phosfs_store, (int)w->pid, w->name, w->rest);
}

/* Whether w is an image's gpu.data, which is read while it is written. */
static bool is_data(const where *w)
{
	return !strcmp(w->rest, "/" PHOSIMG_DATA_FILE);
}

/* The attributes of /<pid>/checkpoints/latest: a link, as the store's. */
static int latest_attr(const where *w, struct stat *st)
{
	char p[PATH_MAX], link[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%d/latest", phosfs_store, (int)w->pid);
	ssize_t n = readlink(p, link, sizeof(link));
	if (n < 0)
		return -ENOENT;
	st->st_mode = S_IFLNK | 0777;
	st->st_size = n;
	return 0;
}

/* Waits until checkpoint `name` of t is written (published, or failed),
 * as any wait of a FUSE call does (fs_wait_over). Returns 0, or -EINTR
 * when the wait gave up. */
static int wait_written(target *t, const char *name)
{
	uint64_t since = engine_now_ns();
	while (target_wait_written(t, name, WRITTEN_SLICE_MS))
		if (fs_wait_over(since))
			return -EINTR;
	return 0;
}

/* The attributes of a checkpoint, or of a file in it: the store's, read
 * only; one being written is a folder, and its data files have no size
 * until it is published; its other files are there once it is. */
static int image_attr(const where *w, struct stat *st)
{
	if (readers_touch(w->pid, w->name, 0))
		return -ENOENT; /* a prune removes it */
	target *t = target_get(w->pid, false);
	if (t && target_in_progress(t, w->name)) {
		if (!*w->rest) {
			st->st_mode = S_IFDIR | 0500;
			st->st_nlink = 2;
			return 0;
		}
		if (is_data(w)) {
			/* Its size is known once it is published. */
			st->st_mode = S_IFREG | 0400;
			return 0;
		}
		int e = wait_written(t, w->name);
		if (e)
			return e;
	}
	char p[PATH_MAX + 300];
	store_path(p, sizeof(p), w);
	struct stat real;
	if (lstat(p, &real) != 0)
		return -errno;
	st->st_mode = (real.st_mode & S_IFMT) | (S_ISDIR(real.st_mode) ? 0500 : 0400);
	st->st_nlink = real.st_nlink;
	st->st_size = real.st_size;
	st->st_mtim = real.st_mtim;
	st->st_blocks = real.st_blocks;
	return 0;
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	where w = parse(path);
	memset(st, 0, sizeof(*st));
	st->st_nlink = 1;
	switch (w.n) {
	case N_ROOT:
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	case N_VERSION:
	case N_METRICS:
		st->st_mode = S_IFREG | 0444;
		return 0;
	case N_ROOT_STATUS:
	case N_ROOT_STATUS_JSON:
	case N_EVENTS:
		st->st_mode = S_IFREG | 0400;
		return 0;
	case N_ROOT_CTL:
		st->st_mode = S_IFREG | 0600;
		return 0;
	case N_RESTORES:
		st->st_mode = S_IFDIR | 0500;
		st->st_nlink = 2;
		return 0;
	case N_RESTORE: {
		restore_view *v = malloc(sizeof(*v));
		int e = !v ? -ENOMEM : restore_view_get(w.id, v);
		free(v);
		st->st_mode = S_IFREG | 0400;
		return e;
	}
	case N_NONE:
		return -ENOENT;
	default:
		break;
	}
	uid_t uid;
	int e = visible(w.pid, &uid);
	if (e)
		return e;
	st->st_uid = uid;
	switch (w.n) {
	case N_PROC:
	case N_CKPTS:
		st->st_mode = S_IFDIR | 0500;
		st->st_nlink = 2;
		return 0;
	case N_CTL:
		/* Read and written: a ctl opened for both reads back its answer. */
		st->st_mode = S_IFREG | 0600;
		return 0;
	case N_LATEST:
		return latest_attr(&w, st);
	case N_IMAGE:
		return image_attr(&w, st);
	default:
		st->st_mode = S_IFREG | 0400;
		return 0;
	}
}

static void add_name(void *buf, fuse_fill_dir_t fill, pid_t pid)
{
	char name[16];
	snprintf(name, sizeof(name), "%d", (int)pid);
	fill(buf, name, NULL, 0, 0);
}

/* The pids that have a folder of checkpoints in the store; *out is
 * malloc'd. Errors: -ENOMEM. */
static int store_pids(pid_t **out, size_t *n)
{
	size_t k = 0, cap = 16;
	pid_t *v = malloc(cap * sizeof(*v));
	DIR *d = v ? opendir(phosfs_store) : NULL;
	for (struct dirent *de; d && (de = readdir(d));) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (de->d_name[0] < '1' || de->d_name[0] > '9' || *end || pid > 4194304)
			continue;
		if (k == cap) {
			pid_t *w = realloc(v, (cap *= 2) * sizeof(*v));
			if (!w)
				break;
			v = w;
		}
		v[k++] = (pid_t)pid;
	}
	if (d)
		closedir(d);
	*out = v;
	*n = k;
	return v ? 0 : -ENOMEM;
}

/* Lists /restores: the restores phosfs still knows. */
static int list_restores(void *buf, fuse_fill_dir_t fill)
{
	restore_view *v;
	size_t n;
	int running, queued;
	if (restore_views(&v, &n, &running, &queued))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "%u", v[i].id);
		fill(buf, name, NULL, 0, 0);
	}
	free(v);
	return 0;
}

static int list_root(void *buf, fuse_fill_dir_t fill)
{
	fill(buf, "version", NULL, 0, 0);
	fill(buf, "ctl", NULL, 0, 0);
	fill(buf, "status", NULL, 0, 0);
	fill(buf, "status.json", NULL, 0, 0);
	fill(buf, "events", NULL, 0, 0);
	fill(buf, "metrics", NULL, 0, 0);
	fill(buf, "restores", NULL, 0, 0);
	pid_t *a, *b, *c;
	size_t na, nb, nc;
	if (registry_pids(&a, &na))
		return -ENOMEM;
	if (target_pids(&b, &nb)) {
		free(a);
		return -ENOMEM;
	}
	if (store_pids(&c, &nc)) {
		free(a);
		free(b);
		return -ENOMEM;
	}
	/* A traced process shows as the job it belongs to. */
	for (size_t i = 0; i < na; i++)
		a[i] = job_name(a[i]);
	size_t n = na + nb + nc;
	for (size_t i = 0; i < n; i++) {
		pid_t pid = i < na ? a[i] : i < na + nb ? b[i - na] : c[i - na - nb];
		bool dup = false;
		for (size_t k = 0; k < i && !dup; k++)
			dup = (k < na ? a[k] : k < na + nb ? b[k - na] : c[k - na - nb]) == pid;
		uid_t uid;
		if (!dup && visible(pid, &uid) == 0)
			add_name(buf, fill, pid);
	}
	free(a);
	free(b);
	free(c);
	return 0;
}

/* Lists a store directory, leaving out what is hidden (temporary, logs). */
static int list_store(const char *dir, void *buf, fuse_fill_dir_t fill, const char *also)
{
	DIR *d = opendir(dir);
	if (!d && !also)
		return -errno;
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.' && (!also || strcmp(de->d_name, also)))
			fill(buf, de->d_name, NULL, 0, 0);
	if (also)
		fill(buf, also, NULL, 0, 0);
	if (d)
		closedir(d);
	return 0;
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
		      enum fuse_readdir_flags flags)
{
	(void)off, (void)fi, (void)flags;
	where w = parse(path);
	if (w.n == N_ROOT) {
		fill(buf, ".", NULL, 0, 0);
		fill(buf, "..", NULL, 0, 0);
		return list_root(buf, fill);
	}
	if (w.n == N_RESTORES) {
		if (caller() != 0)
			return -EACCES;
		fill(buf, ".", NULL, 0, 0);
		fill(buf, "..", NULL, 0, 0);
		return list_restores(buf, fill);
	}
	if (w.n != N_PROC && w.n != N_CKPTS && w.n != N_IMAGE)
		return w.n == N_NONE ? -ENOENT : -ENOTDIR;
	uid_t uid;
	int e = visible(w.pid, &uid);
	if (e)
		return e;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	if (w.n == N_PROC) {
		for (size_t i = 0; i < sizeof(proc_files) / sizeof(proc_files[0]); i++)
			fill(buf, proc_files[i], NULL, 0, 0);
		return 0;
	}
	char dir[PATH_MAX + 300];
	target *t = target_get(w.pid, false);
	if (w.n == N_CKPTS) {
		char busy[CTL_NAME_MAX + 1] = "";
		if (t) {
			pthread_mutex_lock(&t->lock);
			if (t->busy && t->kind == CTL_CHECKPOINT)
				snprintf(busy, sizeof(busy), "%s", t->name);
			pthread_mutex_unlock(&t->lock);
		}
		snprintf(dir, sizeof(dir), "%s/%d", phosfs_store, (int)w.pid);
		list_store(dir, buf, fill, *busy ? busy : NULL);
		return 0;
	}
	if (t && !*w.rest && target_in_progress(t, w.name)) {
		/* gpu.data first: a copy starts with what can be read now. */
		static const char *const names[] = { PHOSIMG_DATA_FILE, PHOSIMG_CRIU_DIR, PHOSIMG_INDEX_FILE,
						     PHOSIMG_MANIFEST_FILE };
		for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
			fill(buf, names[i], NULL, 0, 0);
		/* The image's other data files (read once it is published). */
		uint32_t files = target_data_files(t);
		for (uint32_t f = 1; f < files; f++) {
			char name[32];
			snprintf(name, sizeof(name), PHOSIMG_DATA_FILE ".%u", f);
			fill(buf, name, NULL, 0, 0);
		}
		return 0;
	}
	e = t ? wait_written(t, w.name) : 0;
	if (e)
		return e;
	if (readers_touch(w.pid, w.name, 0))
		return -ENOENT;
	store_path(dir, sizeof(dir), &w);
	return list_store(dir, buf, fill, NULL);
}

static int fs_readlink(const char *path, char *buf, size_t size)
{
	where w = parse(path);
	uid_t uid;
	if (w.n != N_LATEST && w.n != N_IMAGE)
		return -EINVAL;
	int e = visible(w.pid, &uid);
	if (e)
		return e;
	char p[PATH_MAX + 300];
	if (w.n == N_LATEST)
		snprintf(p, sizeof(p), "%s/%d/latest", phosfs_store, (int)w.pid);
	else
		store_path(p, sizeof(p), &w);
	ssize_t n = readlink(p, buf, size ? size - 1 : 0);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

static const char *state_name(uint32_t s)
{
	return s == WIRE_PRESENT ? "present" : s == WIRE_PARKED_STATE ? "parked" : "absent";
}

static int make_buffers(proc *p, text *t)
{
	wire_buffer *v;
	size_t n;
	int e = proc_list(p, &v, &n);
	if (e)
		return e;
	for (size_t i = 0; i < n; i++)
		text_add(t, "0x%016" PRIx64 " %" PRIu64 " %u %s %" PRIu64 " %" PRIu64 "\n", v[i].va, v[i].size, v[i].device,
		    state_name(v[i].state), v[i].reads, v[i].writes);
	free(v);
	return 0;
}

static int make_kernels(proc *p, text *t)
{
	uint8_t *raw;
	size_t len;
	uint32_t count;
	int e = proc_kernels(p, &raw, &len, &count);
	if (e)
		return e;
	size_t at = 0;
	for (uint32_t i = 0; i < count && at + sizeof(wire_kernel) <= len; i++) {
		wire_kernel k;
		memcpy(&k, raw + at, sizeof(k));
		size_t rec = sizeof(k) + (k.name_len + 7) / 8 * 8;
		if (at + rec > len)
			break;
		text_add(t, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %d %" PRIu64 " %.*s\n", k.launches, k.reads,
		    k.writes, k.bytes_written, k.nparams, k.net_waits, (int)k.name_len, (const char *)raw + at + sizeof(k));
		at += rec;
	}
	free(raw);
	return 0;
}

static int make_nccl(proc *p, text *t)
{
	wire_nccl_comm *v;
	size_t n;
	int e = proc_nccl(p, &v, &n);
	if (e)
		return e;
	for (size_t i = 0; i < n; i++)
		text_add(t, "%016" PRIx64 " %d %d %" PRIu64 "%s\n", v[i].id, v[i].rank, v[i].nranks, v[i].count,
		    v[i].flags & WIRE_NCCL_UNNAMED ? " unnamed" : "");
	free(v);
	return 0;
}

/* An open file: generated text, a file of the store, or a ctl. */
typedef struct handle {
	int fd; /* a store file, or -1 */
	text t;
	target *stream; /* gpu.data of a checkpoint being written, or NULL */
	char name[CTL_NAME_MAX + 1]; /* that checkpoint */
	bool ctl; /* a ctl: t is the answer to its last write */
	bool events;   /* /events: read from cur on */
	bool nonblock; /* /events opened O_NONBLOCK */
	events_cursor cur;
	size_t got; /* how much of the answer was read: a ctl's reads go on from there, whatever the offset */
	char frag[256]; /* a ctl's last write, refused, with no end of line: a command's first part? */
	pid_t reading;  /* a file of checkpoint `name` of this pid's (readers.c), or 0 */
} handle;

bool fs_wait_over(uint64_t since_ns)
{
	struct fuse_context *cx = fuse_get_context();
	return fuse_interrupted() || (cx && cx->fuse && fuse_session_exited(fuse_get_session(cx->fuse))) ||
	       engine_now_ns() - since_ns > (uint64_t)FS_WAIT_MAX_MS * 1000000u;
}

/* Opens the unpublished gpu.data of checkpoint `name` of t; -1 if it is
 * not being written (any more), -2 if the wait gave up (fs_wait_over). */
static int open_stream(target *t, const char *name)
{
	char path[PATH_MAX];
	uint64_t ready, since = engine_now_ns();
	/* The job names the file as soon as it has made it. */
	while (target_stream(t, name, path, sizeof(path), &ready) && !ready) {
		if (fs_wait_over(since))
			return -2;
		usleep(STREAM_POLL_US);
	}
	return ready ? open(path, O_RDONLY | O_CLOEXEC) : -1;
}

static int make_text(const where *w, text *t)
{
	if (w->n == N_VERSION) {
		text_add(t, "phosfs %s\nwire protocol %d\nimage format %d.%d\nstore %s\n", PHOS_VERSION, WIRE_VERSION,
		    PHOSIMG_VERSION_MAJOR, PHOSIMG_VERSION_MINOR, phosfs_store);
		return 0;
	}
	if (w->n == N_ROOT_STATUS)
		return status_root(t);
	if (w->n == N_METRICS)
		return metrics_text(t);
	if (w->n == N_ROOT_STATUS_JSON || w->n == N_STATUS_JSON) {
		text lines = { 0 };
		int e = w->n == N_STATUS_JSON ? status_proc(w->pid, &lines) : status_root(&lines);
		if (!e && lines.oom)
			e = -ENOMEM;
		if (!e)
			e = status_json(lines.s ? lines.s : "", lines.len, t);
		text_free(&lines);
		return e;
	}
	if (w->n == N_RESTORE) {
		restore_view *v = malloc(sizeof(*v));
		int e = !v ? -ENOMEM : restore_view_get(w->id, v);
		if (!e)
			status_restore(v, t);
		free(v);
		return e;
	}
	if (w->n == N_STATUS)
		return status_proc(w->pid, t);
	proc *p = registry_get(w->pid);
	if (!p)
		return 0; /* not traced, or parked: nothing to list */
	int e = w->n == N_BUFFERS ? make_buffers(p, t) : w->n == N_NCCL ? make_nccl(p, t) : make_kernels(p, t);
	registry_put(p);
	/* A process that went away, or is connecting again: nothing to list. */
	return e == -ESRCH || e == -ECONNRESET || e == -EPIPE ? 0 : e ? -EIO : 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi)
{
	where w = parse(path);
	int acc = fi->flags & O_ACCMODE;
	bool ctl = w.n == N_CTL || w.n == N_ROOT_CTL;
	if (w.n == N_NONE || w.n == N_ROOT)
		return w.n == N_NONE ? -ENOENT : -EISDIR;
	uid_t uid = 0;
	bool root_only = w.n == N_ROOT_STATUS || w.n == N_ROOT_CTL || w.n == N_RESTORES || w.n == N_RESTORE ||
			 w.n == N_ROOT_STATUS_JSON || w.n == N_EVENTS;
	if (w.n != N_VERSION && w.n != N_METRICS && !root_only) {
		int e = visible(w.pid, &uid);
		if (e)
			return e;
	}
	/* A ctl opened for reading and writing reads back its answer. */
	if (ctl ? acc == O_RDONLY : acc != O_RDONLY)
		return -EACCES;
	if (root_only && caller() != 0)
		return -EACCES;
	if (w.n == N_PROC || w.n == N_CKPTS || w.n == N_RESTORES)
		return -EISDIR;
	handle *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->fd = -1;
	int e = 0;
	if (w.n == N_IMAGE) {
		target *t = target_get(w.pid, false);
		if (t && is_data(&w))
			h->fd = open_stream(t, w.name);
		if (h->fd == -2) {
			free(h);
			return -EINTR;
		}
		if (h->fd >= 0) {
			h->stream = t;
			snprintf(h->name, sizeof(h->name), "%s", w.name);
		} else if (t && (e = wait_written(t, w.name))) {
			free(h);
			return e;
		}
		char p[PATH_MAX + 300];
		store_path(p, sizeof(p), &w);
		if (h->fd < 0)
			h->fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		e = h->fd < 0 ? -errno : 0;
		if (!e && !(e = readers_touch(w.pid, w.name, 1))) { /* no prune removes it while it is read */
			snprintf(h->name, sizeof(h->name), "%s", w.name);
			h->reading = w.pid;
		}
		if (e && h->fd >= 0) {
			close(h->fd);
			h->fd = -1;
		}
	} else if (w.n == N_EVENTS) {
		h->events = true;
		h->nonblock = fi->flags & O_NONBLOCK;
		h->cur.seq = events_next();
		fi->nonseekable = 1;
	} else if (!ctl) {
		e = make_text(&w, &h->t);
		if (!e && h->t.oom)
			e = -ENOMEM;
	}
	if (e) {
		free(h->t.s);
		free(h);
		return e;
	}
	h->ctl = ctl;
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	return 0;
}

/* Reads gpu.data of a checkpoint being written: what is final now, or,
 * once it is published, the whole file. If the checkpoint fails, EIO:
 * the copy being taken is of no image. */
static int read_stream(handle *h, char *buf, size_t size, off_t off)
{
	uint64_t since = engine_now_ns();
	for (;;) {
		uint64_t ready;
		if (!target_stream(h->stream, h->name, NULL, 0, &ready))
			break;
		if ((uint64_t)off < ready) {
			size_t n = ready - (uint64_t)off < size ? (size_t)(ready - (uint64_t)off) : size;
			ssize_t got = pread(h->fd, buf, n, off);
			if (got < 0)
				return -errno;
			/* Padding after the last chunk is not in the file yet. */
			memset(buf + got, 0, n - (size_t)got);
			return (int)n;
		}
		if (fs_wait_over(since))
			return -EINTR;
		usleep(STREAM_POLL_US);
	}
	/* The job ended: published, or failed and gone. */
	struct stat st;
	if (fstat(h->fd, &st) != 0 || st.st_nlink == 0)
		return -EIO;
	ssize_t n = pread(h->fd, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)path;
	handle *h = (handle *)(uintptr_t)fi->fh;
	if (h->events)
		return events_read(&h->cur, buf, size, h->nonblock || (fi->flags & O_NONBLOCK));
	if (h->stream)
		return read_stream(h, buf, size, off);
	if (h->fd >= 0) {
		ssize_t n = pread(h->fd, buf, size, off);
		return n < 0 ? -errno : (int)n;
	}
	if (h->ctl) /* its offset is past what was written */
		off = (off_t)h->got;
	if (off < 0 || (size_t)off >= h->t.len)
		return 0;
	size_t n = h->t.len - (size_t)off < size ? h->t.len - (size_t)off : size;
	memcpy(buf, h->t.s + off, n);
	if (h->ctl)
		h->got += n;
	return (int)n;
}

/* The answer a ctl opened for reading and writing reads back. */
static void answer(handle *h, const char *fmt, ...)
{
	free(h->t.s);
	h->t = (text){ 0 };
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n >= 0) {
		h->t.s = s;
		h->t.len = h->t.cap = (size_t)n;
	}
	h->got = 0;
}

/* The cgroups of the process that writes to a ctl, as /proc/PID/cgroup
 * says them, into text (len bytes): a tree it restores goes there, as a
 * job it started would. Where that process cannot be seen from here (a
 * pid namespace phosfs's does not hold) or read, phosfs's own. */
static void caller_cgroups(char *text, size_t len)
{
	pid_t pid = fuse_get_context()->pid;
	if (pid <= 0 || engine_cgroups_read(pid, text, len) != 0)
		if (engine_cgroups_read(getpid(), text, len) != 0)
			*text = 0;
}

/* A write to a ctl: accepted (a job started, or a restore queued) or
 * refused at once; it never waits for a job. */
static int fs_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)off;
	where w = parse(path);
	handle *h = (handle *)(uintptr_t)fi->fh;
	perr er = { 0 };
	ctl_cmd *c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	/* A member's ctl acts on its job: the image is always the whole tree. */
	target *t = w.n == N_ROOT_CTL ? NULL : target_get(job_name(w.pid), true);
	int e = !t && w.n != N_ROOT_CTL ? -ENOMEM : ctl_parse(buf, size, w.n == N_ROOT_CTL, c, &er);
	if (e == -EINVAL && *h->frag) {
		/* A command split across writes is refused as one, named whole. */
		const char *nl = memchr(buf, '\n', size);
		int rest = nl ? (int)(nl - buf) : (int)(size < 256 ? size : 256);
		snprintf(er.msg, sizeof(er.msg), "a command in two writes, \"%s\" then \"%.*s\": write it in one, ending in "
						 "a newline",
			 h->frag, rest, buf);
	}
	*h->frag = 0;
	if (e == -EINVAL && size && buf[size - 1] != '\n')
		snprintf(h->frag, sizeof(h->frag), "%.*s", (int)(size < sizeof(h->frag) - 1 ? size : sizeof(h->frag) - 1),
			 buf);
	if (e == -EINVAL) {
		/* Not logged: any owner of a process could flood the log. */
		if (t) {
			pthread_mutex_lock(&t->lock);
			snprintf(t->error, sizeof(t->error), "bad command: %s", er.msg);
			pthread_mutex_unlock(&t->lock);
		}
		answer(h, "error: bad command: %s\n", er.msg);
	} else if (!e && c->verb == CTL_RESTORE) {
		unsigned id = 0;
		char cgroups[ENGINE_CGROUPS_TEXT_MAX];
		caller_cgroups(cgroups, sizeof(cgroups));
		e = restore_submit(c, cgroups, &id, &er);
		if (e)
			answer(h, "error: %s\n", pr_msg(&er));
		else
			answer(h, "restore %u\n", id);
	} else if (!e) {
		char proc_path[64];
		snprintf(proc_path, sizeof(proc_path), "/proc/%d", (int)t->pid);
		if (c->verb == CTL_CANCEL)
			e = job_cancel(t, &er);
		else if (c->verb == CTL_RELEASE)
			e = job_release(t, c->release_kill, &er);
		else if (c->verb == CTL_SCHEDULE && (c->off || access(proc_path, F_OK) == 0))
			e = schedule_set(t->pid, c, &er);
		else if (access(proc_path, F_OK) != 0)
			e = pr_err(&er, -ESRCH, "process %d is not running", (int)t->pid);
		else
			e = job_checkpoint(t, c, &er);
		if (e) {
			target_error(t, "%s", pr_msg(&er));
			answer(h, "error: %s\n", pr_msg(&er));
		} else {
			answer(h, "ok\n");
		}
	}
	free(c);
	if (e == -ENOSYS)
		e = -EIO; /* no CUDA driver: not a missing system call */
	return e ? e : (int)size;
}

static int fs_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	(void)size, (void)fi;
	where w = parse(path);
	return w.n == N_CTL || w.n == N_ROOT_CTL ? 0 : -EACCES;
}

static int fs_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	handle *h = (handle *)(uintptr_t)fi->fh;
	if (h) {
		if (h->reading)
			readers_touch(h->reading, h->name, -1);
		if (h->fd >= 0)
			close(h->fd);
		free(h->t.s);
		free(h);
	}
	return 0;
}

/* poll(2) on /events: readable once an event after the reader's last
 * is there. Other files are always readable. */
static int fs_poll(const char *path, struct fuse_file_info *fi, struct fuse_pollhandle *ph, unsigned *reventsp)
{
	(void)path;
	handle *h = (handle *)(uintptr_t)fi->fh;
	if (h && h->events)
		return events_poll(&h->cur, ph, reventsp);
	if (ph)
		fuse_pollhandle_destroy(ph);
	*reventsp = POLLIN;
	return 0;
}

const struct fuse_operations phosfs_ops = {
	.getattr = fs_getattr,
	.readdir = fs_readdir,
	.readlink = fs_readlink,
	.open = fs_open,
	.read = fs_read,
	.write = fs_write,
	.truncate = fs_truncate,
	.release = fs_release,
	.poll = fs_poll,
};
