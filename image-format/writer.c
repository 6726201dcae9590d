/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The streaming writer. Chunks arrive in any order from any number of
 * threads; each claims its place in gpu.data with one atomic add and is
 * written through io_uring (O_DIRECT where the file system takes it), while
 * the calling thread hashes the same bytes. The index and the manifest are
 * written at finish, which then publishes the whole directory with one
 * rename.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <linux/magic.h>
#include <liburing.h>
#include <lz4.h>
#include <xxhash.h>

#include "format.h"

#define RING_DEPTH 16
#define MAX_PIECES 8
#define PIECE_MIN (1u << 20)

/* One put's I/O context: a ring and an aligned staging buffer. */
typedef struct ioctx {
	struct io_uring ring;
	bool has_ring;
	uint8_t *stage; /* DATA_ALIGN-aligned, stage_cap bytes */
	size_t stage_cap;
	uint32_t stripe; /* the data file of its put */
	struct ioctx *next;
} ioctx;

/* A written range of gpu.data. */
typedef struct extent {
	uint64_t at, len;
} extent;

typedef struct objstate {
	phosimg_object obj;
	uint64_t nchunks;
	uint64_t *done;     /* bitmap of stored chunks */
	int64_t parent_obj; /* same device, VA and size in the parent; -1 none */
} objstate;

struct phosimg_writer {
	char *path, *tmp, *criu;
	int dirfd;
	int fds[PHOSIMG_STRIPES_MAX]; /* the data files: gpu.data, gpu.data.1, … */
	uint32_t nfiles;
	bool direct;
	uint32_t chunk;
	bool lz4;
	phosimg *parent;
	char *parent_stored;
	manifest m; /* meta, devices, cmdline: owned here */
	uint8_t uuid[16];

	/* Guarded by lock: objs, nobjs, entries, nentries, ctx_pool,
	 * m.shares with m.info.share_count, and m.stats with
	 * m.info.stat_count. */
	pthread_mutex_t lock;
	objstate *objs;
	uint32_t nobjs, objs_cap;
	entry *entries;
	uint64_t nentries, entries_cap;
	ioctx *ctx_pool;

	atomic_uint_fast64_t ends[PHOSIMG_STRIPES_MAX]; /* next free offset in each data file */
	atomic_uint next_stripe;       /* the file the next put writes */
	atomic_uint_fast64_t stored;   /* chunk bytes stored */
	atomic_int error;              /* first I/O error; the writer is failed */

	/* gpu.data's bytes [0, ready) are written. Guarded by ready_lock:
	 * the extents written beyond a gap, merged once the gap is written. */
	atomic_uint_fast64_t ready;
	pthread_mutex_t ready_lock;
	extent *ahead;
	size_t nahead, ahead_cap;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Removes a directory tree of the shape an image has (files, one level of
 * subdirectories). */
static void rm_tree(int parentfd, const char *name)
{
	int fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		DIR *d = fdopendir(fd);
		if (d) {
			for (struct dirent *de; (de = readdir(d));) {
				if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
					continue;
				if (unlinkat(dirfd(d), de->d_name, 0) != 0 && errno == EISDIR)
					rm_tree(dirfd(d), de->d_name);
			}
			closedir(d);
		} else {
			close(fd);
		}
	}
	unlinkat(parentfd, name, AT_REMOVEDIR);
}

/* Clears temporary directories that writers which died left in dfd: for
 * `base`, or for any image when base is NULL (".NAME.tmp-PID.N"). */
static void clear_stale(int dfd, const char *base)
{
	DIR *d = fdopendir(dup(dfd));
	if (!d)
		return;
	char prefix[NAME_MAX + 16];
	snprintf(prefix, sizeof(prefix), ".%s.tmp-", base ? base : "");
	size_t pl = strlen(prefix);
	for (struct dirent *de; (de = readdir(d));) {
		const char *tail = NULL;
		if (base)
			tail = strncmp(de->d_name, prefix, pl) ? NULL : de->d_name + pl;
		else if (de->d_name[0] == '.' && (tail = strstr(de->d_name + 1, ".tmp-")))
			tail += 5;
		if (!tail)
			continue;
		char *end;
		long pid = strtol(tail, &end, 10);
		if (pid > 0 && *end == '.' && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
			rm_tree(dfd, de->d_name);
	}
	closedir(d);
}

int phosimg_clear_stale(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	clear_stale(dfd, NULL);
	close(dfd);
	return 0;
}

static int write_data_header(phosimg_writer *w)
{
	uint8_t *h = aligned_alloc(DATA_ALIGN, DATA_HEADER_SIZE);
	if (!h)
		return -ENOMEM;
	memset(h, 0, DATA_HEADER_SIZE);
	put32(h, DATA_MAGIC);
	put16(h + 4, PHOSIMG_VERSION_MAJOR);
	put16(h + 6, PHOSIMG_VERSION_MINOR);
	memcpy(h + 8, w->uuid, 16);
	put32(h + 24, w->chunk);
	int e = 0;
	for (uint32_t f = 0; f < w->nfiles && !e; f++) {
		e = fmt_write_all(w->fds[f], h, DATA_HEADER_SIZE, 0);
		if (e == -EINVAL && w->direct) {
			/* The file system refused O_DIRECT writes after all. */
			for (uint32_t g = 0; g < w->nfiles; g++) {
				int fl = fcntl(w->fds[g], F_GETFL);
				fcntl(w->fds[g], F_SETFL, fl & ~O_DIRECT);
			}
			w->direct = false;
			e = fmt_write_all(w->fds[f], h, DATA_HEADER_SIZE, 0);
		}
	}
	free(h);
	if (!e)
		atomic_store(&w->ready, DATA_HEADER_SIZE);
	return e;
}

/* The name of data file f: gpu.data, gpu.data.1, … */
static void data_name(uint32_t f, char *out, size_t len)
{
	if (f)
		snprintf(out, len, DATA_FILE ".%u", f);
	else
		snprintf(out, len, DATA_FILE);
}

static void writer_free(phosimg_writer *w)
{
	if (!w)
		return;
	for (uint32_t f = 0; f < w->nfiles; f++)
		if (w->fds[f] >= 0)
			close(w->fds[f]);
	if (w->dirfd >= 0)
		close(w->dirfd);
	for (uint32_t i = 0; i < w->nobjs; i++)
		free(w->objs[i].done);
	free(w->objs);
	free(w->entries);
	for (ioctx *c = w->ctx_pool, *n; c; c = n) {
		n = c->next;
		if (c->has_ring)
			io_uring_queue_exit(&c->ring);
		free(c->stage);
		free(c);
	}
	phosimg_close(w->parent);
	free(w->parent_stored);
	manifest_free(&w->m);
	free(w->path);
	free(w->tmp);
	free(w->criu);
	free(w->ahead);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->ready_lock);
	free(w);
}

void phosimg_writer_abort(phosimg_writer *w)
{
	if (!w)
		return;
	char *dir, *base;
	if (fmt_split_path(w->tmp, &dir, &base) == 0) {
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			rm_tree(dfd, base);
			close(dfd);
		}
		free(dir);
		free(base);
	}
	writer_free(w);
}

int phosimg_writer_create(const char *path, const phosimg_writer_opts *opts, phosimg_writer **out)
{
	if (!path || !out)
		return -EINVAL;
	fmt_clear_error();
	phosimg_writer_opts o = opts ? *opts : (phosimg_writer_opts){ 0 };
	phosimg_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->dirfd = -1;
	w->nfiles = o.stripes > 1 ? (o.stripes < PHOSIMG_STRIPES_MAX ? o.stripes : PHOSIMG_STRIPES_MAX) : 1;
	for (uint32_t f = 0; f < w->nfiles; f++) {
		w->fds[f] = -1;
		atomic_init(&w->ends[f], DATA_HEADER_SIZE);
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_init(&w->ready_lock, NULL);
	atomic_init(&w->ready, 0);
	char *dir = NULL, *base = NULL;
	int e = fmt_split_path(path, &dir, &base);
	if (e) {
		pthread_mutex_destroy(&w->lock);
		pthread_mutex_destroy(&w->ready_lock);
		free(w);
		return fmt_fail(e, "%s: not a path an image can have", path);
	}

	if (o.parent) {
		if (!*o.parent || strlen(o.parent) > PHOSIMG_PATH_MAX) {
			e = fmt_fail(-EINVAL, "parent path '%s' is empty or too long", o.parent);
			goto fail;
		}
		char *pp = o.parent[0] == '/' ? strdup(o.parent) : fmt_strdupf("%s/%s", dir, o.parent);
		w->parent_stored = strdup(o.parent);
		if (!pp || !w->parent_stored) {
			free(pp);
			e = -ENOMEM;
			goto fail;
		}
		e = phosimg_open(pp, &w->parent);
		free(pp);
		if (e)
			goto fail;
		uint32_t pcs = phosimg_get_info(w->parent)->chunk_size;
		if (o.chunk_size && o.chunk_size != pcs) {
			e = fmt_fail(-EINVAL, "chunk size %u differs from the parent's %u", o.chunk_size, pcs);
			goto fail;
		}
		o.chunk_size = pcs;
	}
	w->chunk = o.chunk_size ? o.chunk_size : PHOSIMG_CHUNK_DEFAULT;
	if (w->chunk < PHOSIMG_CHUNK_MIN || w->chunk > PHOSIMG_CHUNK_MAX || (w->chunk & (w->chunk - 1))) {
		e = fmt_fail(-EINVAL, "chunk size %u is not a power of two from 4 KiB to 1 GiB", w->chunk);
		goto fail;
	}
	w->lz4 = o.lz4;

	struct stat st;
	if (lstat(path, &st) == 0) {
		e = fmt_fail(-EEXIST, "%s: already exists", path);
		goto fail;
	}
	if (errno != ENOENT) {
		e = fmt_fail(-errno, "%s: %m", path);
		goto fail;
	}
	w->path = strdup(path);
	char pid[32];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	char *name = fmt_strdupf(".%s.tmp-%s", base, pid);
	if (!w->path || !name) {
		free(name);
		e = -ENOMEM;
		goto fail;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		free(name);
		e = fmt_fail(-errno, "%s: cannot open the directory for the image: %m", dir);
		goto fail;
	}
	clear_stale(dfd, base);
	/* Several writers of one process may race for one name: add a counter. */
	static atomic_uint seq;
	char *unique = NULL;
	for (int tries = 0; tries < 100; tries++) {
		char n2[32];
		snprintf(n2, sizeof(n2), "%u", atomic_fetch_add(&seq, 1));
		free(unique);
		unique = fmt_strdupf("%s.%s", name, n2);
		if (!unique)
			break;
		if (mkdirat(dfd, unique, 0755) == 0 || errno != EEXIST)
			break;
	}
	free(name);
	if (!unique) {
		close(dfd);
		e = -ENOMEM;
		goto fail;
	}
	w->tmp = fmt_strdupf("%s/%s", dir, unique);
	w->dirfd = openat(dfd, unique, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(unique);
	close(dfd);
	if (!w->tmp || w->dirfd < 0) {
		e = w->tmp ? fmt_fail(-errno, "%s: cannot create: %m", w->tmp ? w->tmp : path) : -ENOMEM;
		goto fail_tmp;
	}
	w->criu = fmt_strdupf("%s/%s", w->tmp, CRIU_DIR);
	if (!w->criu) {
		e = -ENOMEM;
		goto fail_tmp;
	}
	if (mkdirat(w->dirfd, CRIU_DIR, 0755) != 0) {
		e = fmt_fail(-errno, "%s: cannot create: %m", w->criu);
		goto fail_tmp;
	}
	/* O_DIRECT keeps a disk's page cache free of image bytes; on tmpfs the
	 * page cache is the storage, and buffered writes copy in parallel. */
	struct statfs sf;
	bool tmpfs = fstatfs(w->dirfd, &sf) == 0 && sf.f_type == TMPFS_MAGIC;
	w->direct = !tmpfs;
	for (uint32_t f = 0; f < w->nfiles; f++) {
		char name[32];
		data_name(f, name, sizeof(name));
		w->fds[f] = w->direct ? openat(w->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644)
				      : -1;
		if (w->fds[f] < 0 && (!w->direct || errno == EINVAL)) {
			if (w->direct) /* no O_DIRECT here: the files before this one drop it too */
				for (uint32_t g = 0; g < f; g++)
					fcntl(w->fds[g], F_SETFL, fcntl(w->fds[g], F_GETFL) & ~O_DIRECT);
			w->direct = false;
			w->fds[f] = openat(w->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		}
		if (w->fds[f] < 0) {
			e = fmt_fail(-errno, "%s/%s: cannot create: %m", w->tmp, name);
			goto fail_tmp;
		}
	}
	if (getrandom(w->uuid, sizeof(w->uuid), 0) != (ssize_t)sizeof(w->uuid)) {
		e = fmt_fail(-EIO, "no random bytes for the image id");
		goto fail_tmp;
	}
	w->uuid[6] = (uint8_t)((w->uuid[6] & 0x0f) | 0x40); /* a version 4 UUID */
	w->uuid[8] = (uint8_t)((w->uuid[8] & 0x3f) | 0x80);
	e = write_data_header(w);
	if (e) {
		fmt_fail(e, "%s/" DATA_FILE ": cannot write the header: %s", w->tmp, strerror(-e));
		goto fail_tmp;
	}
	w->m.info.meta.protocol = PHOSIMG_PROTO_STOP;
	free(dir);
	free(base);
	*out = w;
	return 0;
fail_tmp:
	free(dir);
	free(base);
	phosimg_writer_abort(w);
	return e;
fail:
	free(dir);
	free(base);
	writer_free(w);
	return e;
}

int phosimg_writer_set_meta(phosimg_writer *w, const phosimg_meta *meta)
{
	if (!w || !meta || meta->cmdline_len > PHOSIMG_CMDLINE_MAX || meta->device_count > PHOSIMG_DEVICES_MAX ||
	    (meta->cmdline_len && (!meta->cmdline || meta->cmdline[meta->cmdline_len - 1] != 0)) ||
	    (meta->device_count && !meta->devices) || meta->protocol < PHOSIMG_PROTO_STOP ||
	    meta->protocol > PHOSIMG_PROTO_RECOPY || meta->member_count > PHOSIMG_MEMBERS_MAX ||
	    (meta->member_count && (!meta->members || meta->members[0].pid != meta->pid)))
		return -EINVAL;
	for (uint32_t i = 0; i < meta->member_count; i++) {
		if (meta->members[i].pid <= 0)
			return -EINVAL;
		for (uint32_t j = 0; j < i; j++)
			if (meta->members[j].pid == meta->members[i].pid)
				return -EINVAL;
	}
	char *cmd = malloc(meta->cmdline_len + 1);
	phosimg_device *dev = calloc(meta->device_count ? meta->device_count : 1, sizeof(*dev));
	phosimg_member *mem = calloc(meta->member_count ? meta->member_count : 1, sizeof(*mem));
	if (!cmd || !dev || !mem) {
		free(cmd);
		free(dev);
		free(mem);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < meta->member_count; i++) {
		mem[i] = meta->members[i];
		mem[i].comm[PHOSIMG_COMM_MAX - 1] = 0;
		mem[i].first_object = mem[i].object_count = 0;
	}
	if (meta->cmdline_len)
		memcpy(cmd, meta->cmdline, meta->cmdline_len);
	cmd[meta->cmdline_len] = 0;
	for (uint32_t i = 0; i < meta->device_count; i++) {
		dev[i] = meta->devices[i];
		dev[i].name[PHOSIMG_NAME_MAX] = 0;
	}
	free(w->m.cmdline);
	free(w->m.devices);
	free(w->m.members);
	w->m.cmdline = cmd;
	w->m.devices = dev;
	w->m.members = mem;
	w->m.info.meta = *meta;
	w->m.info.meta.cmdline = cmd;
	w->m.info.meta.devices = dev;
	w->m.info.meta.members = mem;
	return 0;
}

int phosimg_writer_add_object(phosimg_writer *w, const phosimg_object *obj, uint32_t *id)
{
	if (!w || !obj || !id || obj->size == 0 || obj->va + obj->size < obj->va)
		return -EINVAL;
	uint64_t n = obj->size / w->chunk + (obj->size % w->chunk != 0);
	uint64_t *done = calloc((n + 63) / 64, sizeof(uint64_t));
	if (!done)
		return -ENOMEM;
	int64_t pobj = -1;
	if (w->parent) {
		const phosimg_info *pi = phosimg_get_info(w->parent);
		for (uint32_t i = 0; i < pi->object_count && pobj < 0; i++)
			if (pi->objects[i].va == obj->va && pi->objects[i].size == obj->size &&
			    pi->objects[i].device == obj->device &&
			    pi->objects[i].pid == (obj->pid ? obj->pid : w->m.info.meta.pid))
				pobj = i;
	}
	pthread_mutex_lock(&w->lock);
	int e = 0;
	/* A member's objects are consecutive: they are its range. */
	phosimg_member *mb = NULL;
	for (uint32_t i = 0; i < w->m.info.meta.member_count; i++)
		if (w->m.members[i].pid == obj->pid)
			mb = &w->m.members[i];
	if (w->m.info.meta.member_count &&
	    (!mb || (mb->object_count && mb->first_object + mb->object_count != w->nobjs))) {
		e = -EINVAL;
	} else if (w->nobjs == PHOSIMG_OBJECTS_MAX) {
		e = -E2BIG;
	} else if (w->nobjs == w->objs_cap) {
		uint32_t cap = w->objs_cap ? w->objs_cap * 2 : 64;
		objstate *v = realloc(w->objs, cap * sizeof(*v));
		if (v) {
			w->objs = v;
			w->objs_cap = cap;
		} else {
			e = -ENOMEM;
		}
	}
	if (!e) {
		objstate *s = &w->objs[w->nobjs];
		s->obj = *obj;
		s->obj.id = w->nobjs;
		s->nchunks = n;
		s->done = done;
		s->parent_obj = pobj;
		if (mb) {
			if (!mb->object_count)
				mb->first_object = w->nobjs;
			mb->object_count++;
		}
		*id = w->nobjs++;
	}
	pthread_mutex_unlock(&w->lock);
	if (e)
		free(done);
	return e;
}

int phosimg_writer_add_share(phosimg_writer *w, const phosimg_share *sh)
{
	if (!w || !sh)
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	phosimg_info *in = &w->m.info;
	bool member = false;
	for (uint32_t i = 0; i < in->meta.member_count; i++)
		member |= w->m.members[i].pid == sh->pid;
	int e = !member || sh->object >= w->nobjs ? -EINVAL : 0;
	for (uint32_t i = 0; !e && i < in->share_count; i++)
		if (w->m.shares[i].pid == sh->pid && w->m.shares[i].key == sh->key)
			e = -EINVAL;
	if (!e && in->share_count == PHOSIMG_SHARES_MAX)
		e = -E2BIG;
	if (!e) {
		phosimg_share *v = realloc(w->m.shares, (in->share_count + 1) * sizeof(*v));
		if (v) {
			v[in->share_count++] = *sh;
			w->m.shares = v;
			in->shares = v;
		} else {
			e = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&w->lock);
	return e;
}

int phosimg_writer_set_stat(phosimg_writer *w, const char *name, uint64_t value)
{
	if (!w || !name || !manifest_stat_name_ok(name, strnlen(name, PHOSIMG_STAT_NAME_MAX + 1)))
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	phosimg_info *in = &w->m.info;
	/* Kept in ascending order of their names, as the manifest has them. */
	uint32_t at = 0;
	while (at < in->stat_count && strcmp(w->m.stats[at].name, name) < 0)
		at++;
	int e = 0;
	if (at < in->stat_count && !strcmp(w->m.stats[at].name, name)) {
		w->m.stats[at].value = value;
	} else if (in->stat_count == PHOSIMG_STATS_MAX) {
		e = -E2BIG;
	} else {
		phosimg_stat *v = realloc(w->m.stats, (in->stat_count + 1) * sizeof(*v));
		if (v) {
			memmove(v + at + 1, v + at, (in->stat_count - at) * sizeof(*v));
			memset(&v[at], 0, sizeof(*v));
			snprintf(v[at].name, sizeof(v[at].name), "%s", name);
			v[at].value = value;
			in->stat_count++;
			w->m.stats = v;
			in->stats = v;
		} else {
			e = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&w->lock);
	return e;
}

const char *phosimg_writer_criu_dir(const phosimg_writer *w)
{
	return w->criu;
}

uint64_t phosimg_writer_stored_bytes(const phosimg_writer *w)
{
	return atomic_load(&w->stored);
}

const char *phosimg_writer_tmp_dir(const phosimg_writer *w)
{
	return w->tmp;
}

uint64_t phosimg_writer_data_ready(const phosimg_writer *w)
{
	return atomic_load(&w->ready);
}

/* Records that gpu.data's [at, at + len) is written, and moves ready past
 * it and past what was written beyond it. Writes finish out of order, so
 * an extent beyond a gap waits in w->ahead. */
static int mark_written(phosimg_writer *w, uint64_t at, uint64_t len)
{
	int e = 0;
	pthread_mutex_lock(&w->ready_lock);
	uint64_t ready = atomic_load(&w->ready);
	if (at != ready) {
		if (w->nahead == w->ahead_cap) {
			size_t cap = w->ahead_cap ? 2 * w->ahead_cap : 16;
			extent *a = realloc(w->ahead, cap * sizeof(*a));
			if (!a) {
				e = -ENOMEM;
				goto out;
			}
			w->ahead = a;
			w->ahead_cap = cap;
		}
		w->ahead[w->nahead++] = (extent){ at, len };
		goto out;
	}
	ready += len;
	for (size_t i = 0; i < w->nahead;) {
		if (w->ahead[i].at == ready) {
			ready += w->ahead[i].len;
			w->ahead[i] = w->ahead[--w->nahead];
			i = 0;
		} else {
			i++;
		}
	}
	atomic_store(&w->ready, ready);
out:
	pthread_mutex_unlock(&w->ready_lock);
	return e;
}

/* Claims chunk `offset` of obj for a put; returns its number and length. */
static int claim(phosimg_writer *w, uint32_t obj, uint64_t offset, size_t len, uint64_t *idx, objstate *copy)
{
	int e = 0;
	pthread_mutex_lock(&w->lock);
	if (obj >= w->nobjs || offset % w->chunk) {
		e = -EINVAL;
	} else {
		objstate *s = &w->objs[obj];
		uint64_t i = offset / w->chunk;
		uint64_t want = i + 1 < s->nchunks ? w->chunk : s->obj.size - i * (uint64_t)w->chunk;
		if (i >= s->nchunks || (len != (size_t)-1 && len != want))
			e = -EINVAL;
		else if (s->done[i / 64] & (1ull << (i % 64)))
			e = -EEXIST;
		else
			s->done[i / 64] |= 1ull << (i % 64);
		*idx = i;
		*copy = *s;
	}
	pthread_mutex_unlock(&w->lock);
	return e;
}

static void unclaim(phosimg_writer *w, uint32_t obj, uint64_t i)
{
	pthread_mutex_lock(&w->lock);
	w->objs[obj].done[i / 64] &= ~(1ull << (i % 64));
	pthread_mutex_unlock(&w->lock);
}

static int add_entry(phosimg_writer *w, const entry *en)
{
	int e = 0;
	pthread_mutex_lock(&w->lock);
	if (w->nentries == w->entries_cap) {
		uint64_t cap = w->entries_cap ? w->entries_cap * 2 : 1024;
		entry *v = realloc(w->entries, cap * sizeof(*v));
		if (v) {
			w->entries = v;
			w->entries_cap = cap;
		} else {
			e = -ENOMEM;
		}
	}
	if (!e)
		w->entries[w->nentries++] = *en;
	pthread_mutex_unlock(&w->lock);
	return e;
}

static ioctx *ctx_get(phosimg_writer *w)
{
	pthread_mutex_lock(&w->lock);
	ioctx *c = w->ctx_pool;
	if (c)
		w->ctx_pool = c->next;
	pthread_mutex_unlock(&w->lock);
	if (c)
		return c;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->stage_cap = align_up((uint64_t)LZ4_compressBound((int)w->chunk), DATA_ALIGN);
	c->stage = aligned_alloc(DATA_ALIGN, c->stage_cap);
	if (!c->stage) {
		free(c);
		return NULL;
	}
	/* Without io_uring (an old kernel, a seccomp filter), pwrite does. */
	c->has_ring = io_uring_queue_init(RING_DEPTH, &c->ring, 0) == 0;
	return c;
}

static void ctx_put(phosimg_writer *w, ioctx *c)
{
	pthread_mutex_lock(&w->lock);
	c->next = w->ctx_pool;
	w->ctx_pool = c;
	pthread_mutex_unlock(&w->lock);
}

/* Writes buf at off through the ring, in pieces that the kernel copies
 * while this thread hashes the raw bytes into hash (unless raw is NULL). */
static int write_and_hash(phosimg_writer *w, ioctx *c, const uint8_t *buf, size_t len, uint64_t off,
			  const uint8_t *raw, size_t raw_len, uint8_t hash[16])
{
	/* Direct writes go out in pieces the device takes in parallel; a
	 * buffered write goes whole to one io-wq worker, since the file's
	 * lock would serialise pieces anyway. */
	size_t piece = len;
	if (w->direct) {
		piece = align_up(len / MAX_PIECES + 1, DATA_ALIGN);
		if (piece < PIECE_MIN)
			piece = PIECE_MIN;
	}
	unsigned n = 0;
	int err = 0;
	if (c->has_ring) {
		for (size_t at = 0; at < len; at += piece, n++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
			size_t pl = len - at < piece ? len - at : piece;
			io_uring_prep_write(sqe, w->fds[c->stripe], buf + at, (unsigned)pl, off + at);
			/* Buffered writes are copied by io-wq workers, in
			 * parallel with the hashing below. */
			if (!w->direct)
				sqe->flags |= IOSQE_ASYNC;
			io_uring_sqe_set_data64(sqe, at);
		}
		int s = io_uring_submit(&c->ring);
		if (s < 0)
			err = s;
		else if ((unsigned)s < n)
			err = -EIO;
	} else {
		err = fmt_write_all(w->fds[c->stripe], buf, len, off);
	}
	if (raw)
		fmt_hash(raw, raw_len, hash);
	for (unsigned i = 0; c->has_ring && i < n; i++) {
		struct io_uring_cqe *cqe;
		int r;
		/* A signal to this thread (a child of the job ending) ends the
		 * wait, not the write. */
		while ((r = io_uring_wait_cqe(&c->ring, &cqe)) == -EINTR)
			;
		if (r < 0) {
			err = err ? err : r;
			break;
		}
		uint64_t at = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&c->ring, cqe);
		size_t pl = len - at < piece ? len - at : piece;
		if (res < 0) {
			err = err ? err : res;
		} else if ((size_t)res < pl && !err) {
			/* A short write: finish it synchronously. */
			err = fmt_write_all(w->fds[c->stripe], buf + at + res, pl - (size_t)res, off + at + (uint64_t)res);
		}
	}
	return err;
}

static int fail_writer(phosimg_writer *w, int err)
{
	int expected = 0;
	atomic_compare_exchange_strong(&w->error, &expected, err);
	return fmt_fail(err, "%s/" DATA_FILE ": write failed: %s", w->tmp, strerror(-err));
}

int phosimg_writer_put(phosimg_writer *w, uint32_t obj, uint64_t offset, const void *data, size_t len)
{
	if (!w || !data)
		return -EINVAL;
	int err = atomic_load(&w->error);
	if (err)
		return err;
	uint64_t idx;
	objstate os;
	err = claim(w, obj, offset, len, &idx, &os);
	if (err)
		return err;
	entry en = { .object = obj, .chunk = idx, .raw_len = (uint32_t)len };

	/* Incremental: a chunk equal to the parent's is only referred to. */
	bool hashed = false;
	if (w->parent && os.parent_obj >= 0) {
		phosimg_chunk pc;
		fmt_hash(data, len, en.hash);
		hashed = true;
		if (phosimg_chunk_info(w->parent, (uint32_t)os.parent_obj, idx, &pc) == 0 && pc.raw_len == len &&
		    memcmp(pc.hash, en.hash, 16) == 0) {
			en.flags = ENTRY_PARENT;
			en.location = (uint64_t)os.parent_obj;
			err = add_entry(w, &en);
			if (err)
				unclaim(w, obj, idx);
			return err;
		}
	}

	ioctx *c = ctx_get(w);
	if (!c) {
		unclaim(w, obj, idx);
		return -ENOMEM;
	}
	const uint8_t *src = data;
	size_t stored = len;
	if (w->lz4) {
		int n = LZ4_compress_default(data, (char *)c->stage, (int)len, (int)c->stage_cap);
		if (n > 0 && (size_t)n < len) {
			src = c->stage;
			stored = (size_t)n;
			en.flags = ENTRY_LZ4;
		}
	}
	size_t padded = align_up(stored, DATA_ALIGN);
	size_t wlen = stored;
	if (w->direct) {
		/* O_DIRECT needs aligned memory and whole blocks. */
		if (src != c->stage && (((uintptr_t)src % DATA_ALIGN) || stored % DATA_ALIGN)) {
			memcpy(c->stage, src, stored);
			src = c->stage;
		}
		if (src == c->stage)
			memset(c->stage + stored, 0, padded - stored);
		wlen = padded;
	}
	en.stored_len = (uint32_t)stored;
	/* Puts take the files in turn, so that writers at once write
	 * different files. */
	uint32_t stripe = c->stripe = atomic_fetch_add(&w->next_stripe, 1) % w->nfiles;
	en.flags |= stripe << ENTRY_STRIPE_SHIFT;
	en.location = atomic_fetch_add(&w->ends[stripe], padded);
	err = write_and_hash(w, c, src, wlen, en.location, hashed ? NULL : data, len, en.hash);
	ctx_put(w, c);
	if (!err && stripe == 0) /* readers stream gpu.data while it is written */
		err = mark_written(w, en.location, padded);
	if (err)
		return fail_writer(w, err);
	atomic_fetch_add(&w->stored, stored);
	err = add_entry(w, &en);
	if (err)
		fail_writer(w, err);
	return err;
}

int phosimg_writer_put_unchanged(phosimg_writer *w, uint32_t obj, uint64_t offset)
{
	if (!w)
		return -EINVAL;
	if (!w->parent)
		return fmt_fail(-ENOENT, "%s: has no parent image to refer to", w->path);
	uint64_t idx;
	objstate os;
	int err = claim(w, obj, offset, (size_t)-1, &idx, &os);
	if (err)
		return err;
	phosimg_chunk pc;
	if (os.parent_obj < 0 || phosimg_chunk_info(w->parent, (uint32_t)os.parent_obj, idx, &pc) != 0) {
		unclaim(w, obj, idx);
		return fmt_fail(-ENOENT, "object %u (va %#llx) has no counterpart in the parent image", obj,
				(unsigned long long)os.obj.va);
	}
	entry en = { .object = obj, .flags = ENTRY_PARENT, .chunk = idx, .location = (uint64_t)os.parent_obj,
		     .raw_len = pc.raw_len };
	memcpy(en.hash, pc.hash, 16);
	err = add_entry(w, &en);
	if (err)
		unclaim(w, obj, idx);
	return err;
}

static int cmp_entry(const void *a, const void *b)
{
	const entry *x = a, *y = b;
	if (x->object != y->object)
		return x->object < y->object ? -1 : 1;
	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

static int cmp_criu(const void *a, const void *b)
{
	return strcmp(((const phosimg_criu_file *)a)->name, ((const phosimg_criu_file *)b)->name);
}

static int write_index(phosimg_writer *w)
{
	if (w->nentries)
		qsort(w->entries, w->nentries, sizeof(entry), cmp_entry);
	size_t len = INDEX_HEADER_SIZE + w->nentries * INDEX_ENTRY_SIZE + INDEX_TRAILER_SIZE;
	uint8_t *p = calloc(1, len);
	if (!p)
		return -ENOMEM;
	put32(p, INDEX_MAGIC);
	put16(p + 4, PHOSIMG_VERSION_MAJOR);
	put16(p + 6, PHOSIMG_VERSION_MINOR);
	put32(p + 8, INDEX_HEADER_SIZE);
	put32(p + 12, INDEX_ENTRY_SIZE);
	put64(p + 16, w->nentries);
	put32(p + 24, w->chunk);
	for (uint64_t k = 0; k < w->nentries; k++)
		fmt_encode_entry(p + INDEX_HEADER_SIZE + k * INDEX_ENTRY_SIZE, &w->entries[k]);
	fmt_hash(p, len - INDEX_TRAILER_SIZE, p + len - INDEX_TRAILER_SIZE);
	w->m.index_size = len;
	w->m.index_entries = w->nentries;
	fmt_hash(p, len, w->m.index_hash);
	int fd = openat(w->dirfd, INDEX_FILE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	int e = fd < 0 ? -errno : fmt_write_all(fd, p, len, 0);
	if (!e && fsync(fd) != 0)
		e = -errno;
	if (fd >= 0)
		close(fd);
	free(p);
	return e ? fmt_fail(e, "%s/" INDEX_FILE ": cannot write: %s", w->tmp, strerror(-e)) : 0;
}

/* Hashes and fsyncs the files CRIU wrote, for the manifest. */
static int seal_criu(phosimg_writer *w)
{
	int dfd = openat(w->dirfd, CRIU_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return fmt_fail(-errno, "%s: cannot open: %m", w->criu);
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -ENOMEM;
	}
	phosimg_criu_file *files = NULL;
	uint32_t n = 0, cap = 0;
	uint8_t *buf = malloc(1u << 20);
	int e = buf ? 0 : -ENOMEM;
	for (struct dirent *de; !e && (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		struct stat st;
		int fd = openat(dfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || strlen(de->d_name) > PHOSIMG_NAME_MAX) {
			e = fmt_fail(-EINVAL, "%s/%s: only regular files with short names may be in an image's "
					      "criu/", w->criu, de->d_name);
			if (fd >= 0)
				close(fd);
			break;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			phosimg_criu_file *v = realloc(files, cap * sizeof(*v));
			if (!v) {
				close(fd);
				e = -ENOMEM;
				break;
			}
			files = v;
		}
		phosimg_criu_file *f = &files[n++];
		memset(f, 0, sizeof(*f));
		snprintf(f->name, sizeof(f->name), "%s", de->d_name);
		f->size = (uint64_t)st.st_size;
		XXH3_state_t *s = XXH3_createState();
		XXH3_128bits_reset(s);
		for (uint64_t off = 0; off < f->size && !e;) {
			size_t len = f->size - off < (1u << 20) ? (size_t)(f->size - off) : (1u << 20);
			e = fmt_read_all(fd, buf, len, off);
			XXH3_128bits_update(s, buf, len);
			off += len;
		}
		XXH128_hash_t h = XXH3_128bits_digest(s);
		XXH3_freeState(s);
		put64(f->hash, h.low64);
		put64(f->hash + 8, h.high64);
		if (!e && fsync(fd) != 0)
			e = -errno;
		close(fd);
		if (e)
			fmt_fail(e, "%s/%s: cannot read or sync: %s", w->criu, f->name, strerror(-e));
	}
	if (!e && fsync(dfd) != 0)
		e = fmt_fail(-errno, "%s: cannot sync: %m", w->criu);
	closedir(d);
	free(buf);
	if (e) {
		free(files);
		return e;
	}
	if (n)
		qsort(files, n, sizeof(*files), cmp_criu);
	w->m.criu = files;
	w->m.info.criu_files = files;
	w->m.info.criu_file_count = n;
	return 0;
}

static int write_manifest(phosimg_writer *w)
{
	phosimg_info *in = &w->m.info;
	memcpy(in->uuid, w->uuid, 16);
	in->chunk_size = w->chunk;
	in->created_ns = now_ns();
	if (w->parent) {
		in->has_parent = true;
		memcpy(in->parent_uuid, phosimg_get_info(w->parent)->uuid, 16);
		snprintf(in->parent_path, sizeof(in->parent_path), "%s", w->parent_stored);
	}
	phosimg_object *objs = calloc(w->nobjs ? w->nobjs : 1, sizeof(*objs));
	if (!objs)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->nobjs; i++)
		objs[i] = w->objs[i].obj;
	in->objects = objs;
	in->object_count = w->nobjs;
	w->m.objects = objs;
	uint8_t *p;
	size_t len;
	int e = manifest_encode(&w->m, &p, &len);
	if (e)
		return e;
	if (len > MANIFEST_MAX) {
		free(p);
		return fmt_fail(-E2BIG, "%s: the manifest would take %zu bytes, more than readers accept", w->path, len);
	}
	int fd = openat(w->dirfd, MANIFEST_FILE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	e = fd < 0 ? -errno : fmt_write_all(fd, p, len, 0);
	if (!e && fsync(fd) != 0)
		e = -errno;
	if (fd >= 0)
		close(fd);
	free(p);
	return e ? fmt_fail(e, "%s/" MANIFEST_FILE ": cannot write: %s", w->tmp, strerror(-e)) : 0;
}

int phosimg_writer_finish(phosimg_writer *w)
{
	if (!w)
		return -EINVAL;
	int e = atomic_load(&w->error);
	if (e) {
		fmt_fail(e, "%s: not published: an earlier write failed: %s", w->path, strerror(-e));
		goto fail;
	}
	for (uint32_t i = 0; i < w->nobjs; i++) {
		objstate *s = &w->objs[i];
		for (uint64_t c = 0; c < s->nchunks; c++) {
			if (!(s->done[c / 64] & (1ull << (c % 64)))) {
				e = fmt_fail(-ENODATA, "%s: not published: chunk %llu of object %u was never stored",
					     w->path, (unsigned long long)c, i);
				goto fail;
			}
		}
	}
	w->m.nfiles = w->nfiles;
	for (uint32_t f = 0; f < w->nfiles; f++) {
		uint64_t end = atomic_load(&w->ends[f]);
		w->m.file_size[f] = end;
		/* Buffered files end after the last chunk's bytes: pad to its block. */
		if ((!w->direct && ftruncate(w->fds[f], (off_t)end) != 0) || fsync(w->fds[f]) != 0) {
			char name[32];
			data_name(f, name, sizeof(name));
			e = fmt_fail(-errno, "%s/%s: cannot sync: %m", w->tmp, name);
			goto fail;
		}
	}
	w->m.data_size = w->m.file_size[0];
	w->m.stored_bytes = atomic_load(&w->stored);
	if ((e = write_index(w)) || (e = seal_criu(w)) || (e = write_manifest(w)))
		goto fail;
	if (fsync(w->dirfd) != 0) {
		e = fmt_fail(-errno, "%s: cannot sync: %m", w->tmp);
		goto fail;
	}
	/* Publish: never over an image that appeared meanwhile. */
	if (renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->path, RENAME_NOREPLACE) != 0) {
		e = fmt_fail(-errno, "%s: cannot publish: %m", w->path);
		goto fail;
	}
	char *dir, *base;
	if (fmt_split_path(w->path, &dir, &base) == 0) {
		fmt_fsync_dir(dir);
		free(dir);
		free(base);
	}
	writer_free(w);
	return 0;
fail:
	phosimg_writer_abort(w);
	return e;
}
