/*
 * The /phos tree, as far as it goes now:
 *
 *   /version            r   phosfs and format versions
 *   /<pid>/             dr  a traced process: root and its owner only
 *   /<pid>/status       r   key: value lines
 *   /<pid>/buffers      r   one line per allocation: va size device state reads writes
 *   /<pid>/kernels      r   one line per kernel: launches reads writes bytes_written params name
 *
 * Generated files are made whole at open (a snapshot, as lxcfs does) and
 * read with direct_io, since their size is not known beforehand.
 */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fuse.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phosfs.h"

enum node { N_ROOT, N_VERSION, N_PROC, N_STATUS, N_BUFFERS, N_KERNELS, N_NONE };

static const char *const proc_files[] = { "status", "buffers", "kernels" };

/* Parses a path into what it names and, below /<pid>, the pid. */
static enum node parse(const char *path, pid_t *pid)
{
	if (!strcmp(path, "/"))
		return N_ROOT;
	if (!strcmp(path, "/version"))
		return N_VERSION;
	char *end;
	long v = strtol(path + 1, &end, 10);
	if (path[1] < '1' || path[1] > '9' || v <= 0 || v > 4194304)
		return N_NONE;
	*pid = (pid_t)v;
	if (!*end)
		return N_PROC;
	if (!strcmp(end, "/status"))
		return N_STATUS;
	if (!strcmp(end, "/buffers"))
		return N_BUFFERS;
	if (!strcmp(end, "/kernels"))
		return N_KERNELS;
	return N_NONE;
}

/* Whether the caller may see a process's directory. */
static bool may_see(const proc *p)
{
	uid_t uid = fuse_get_context()->uid;
	return uid == 0 || uid == p->uid;
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	pid_t pid = 0;
	enum node n = parse(path, &pid);
	memset(st, 0, sizeof(*st));
	switch (n) {
	case N_ROOT:
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	case N_VERSION:
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		return 0;
	case N_NONE:
		return -ENOENT;
	default:
		break;
	}
	proc *p = registry_get(pid);
	if (!p)
		return -ENOENT;
	int e = may_see(p) ? 0 : -ENOENT;
	st->st_uid = p->uid;
	st->st_mode = n == N_PROC ? S_IFDIR | 0500 : S_IFREG | 0400;
	st->st_nlink = n == N_PROC ? 2 : 1;
	registry_put(p);
	return e;
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
		      enum fuse_readdir_flags flags)
{
	(void)off, (void)fi, (void)flags;
	pid_t pid = 0;
	enum node n = parse(path, &pid);
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	if (n == N_ROOT) {
		fill(buf, "version", NULL, 0, 0);
		pid_t *v;
		size_t k;
		if (registry_pids(&v, &k))
			return -ENOMEM;
		for (size_t i = 0; i < k; i++) {
			proc *p = registry_get(v[i]);
			if (p && may_see(p)) {
				char name[16];
				snprintf(name, sizeof(name), "%d", (int)v[i]);
				fill(buf, name, NULL, 0, 0);
			}
			if (p)
				registry_put(p);
		}
		free(v);
		return 0;
	}
	if (n != N_PROC)
		return -ENOTDIR;
	proc *p = registry_get(pid);
	if (!p)
		return -ENOENT;
	int e = may_see(p) ? 0 : -ENOENT;
	for (size_t i = 0; !e && i < sizeof(proc_files) / sizeof(proc_files[0]); i++)
		fill(buf, proc_files[i], NULL, 0, 0);
	registry_put(p);
	return e;
}

/* A file's contents, made at open. */
typedef struct text {
	char *s;
	size_t len, cap;
	bool oom;
} text;

__attribute__((format(printf, 2, 3))) static void add(text *t, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->oom = true;
			return;
		}
		if (t->s && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = t->cap ? t->cap * 2 : 4096;
		while (cap <= t->len + (size_t)n)
			cap *= 2;
		char *s = realloc(t->s, cap);
		if (!s) {
			t->oom = true;
			return;
		}
		t->s = s;
		t->cap = cap;
	}
}

static const char *state_name(uint32_t s)
{
	return s == WIRE_PRESENT ? "present" : s == WIRE_PARKED_STATE ? "parked" : "absent";
}

static int make_status(proc *p, text *t)
{
	wire_buffer *v;
	size_t n;
	int e = proc_list(p, &v, &n);
	if (e)
		return e;
	uint64_t bytes = 0;
	for (size_t i = 0; i < n; i++)
		bytes += v[i].size;
	free(v);
	add(t, "pid: %d\n", (int)p->pid);
	add(t, "state: running\n");
	add(t, "traced: yes\n");
	add(t, "stop-only: %s\n", p->hello.flags & WIRE_HELLO_STOP_ONLY ? p->hello.stop_only_reason : "no");
	add(t, "buffers: %zu\n", n);
	add(t, "device bytes: %" PRIu64 "\n", bytes);
	add(t, "app transfers pending: %u\n", p->table ? atomic_load(&p->table->pcie_pending) : 0);
	add(t, "job: none\n");
	return 0;
}

static int make_buffers(proc *p, text *t)
{
	wire_buffer *v;
	size_t n;
	int e = proc_list(p, &v, &n);
	if (e)
		return e;
	for (size_t i = 0; i < n; i++)
		add(t, "0x%016" PRIx64 " %" PRIu64 " %u %s %" PRIu64 " %" PRIu64 "\n", v[i].va, v[i].size, v[i].device,
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
		add(t, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %d %.*s\n", k.launches, k.reads, k.writes,
		    k.bytes_written, k.nparams, (int)k.name_len, (const char *)raw + at + sizeof(k));
		at += rec;
	}
	free(raw);
	return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi)
{
	pid_t pid = 0;
	enum node n = parse(path, &pid);
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EACCES;
	text *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	int e = 0;
	if (n == N_VERSION) {
		add(t, "phosfs %s\nwire protocol %d\nimage format 1.0\n", PHOS_VERSION, WIRE_VERSION);
	} else if (n == N_STATUS || n == N_BUFFERS || n == N_KERNELS) {
		proc *p = registry_get(pid);
		if (!p || !may_see(p))
			e = -ENOENT;
		else
			e = n == N_STATUS ? make_status(p, t) : n == N_BUFFERS ? make_buffers(p, t) : make_kernels(p, t);
		if (p)
			registry_put(p);
		if (e == -ESRCH || e == -ECONNRESET)
			e = -ENOENT; /* it went away meanwhile */
		else if (e && e != -ENOENT)
			e = -EIO;
	} else {
		e = n == N_NONE ? -ENOENT : -EISDIR;
	}
	if (!e && t->oom)
		e = -ENOMEM;
	if (e) {
		free(t->s);
		free(t);
		return e;
	}
	fi->fh = (uint64_t)(uintptr_t)t;
	fi->direct_io = 1;
	return 0;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)path;
	text *t = (text *)(uintptr_t)fi->fh;
	if (off < 0 || (size_t)off >= t->len)
		return 0;
	size_t n = t->len - (size_t)off < size ? t->len - (size_t)off : size;
	memcpy(buf, t->s + off, n);
	return (int)n;
}

static int fs_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	text *t = (text *)(uintptr_t)fi->fh;
	if (t) {
		free(t->s);
		free(t);
	}
	return 0;
}

const struct fuse_operations phosfs_ops = {
	.getattr = fs_getattr,
	.readdir = fs_readdir,
	.open = fs_open,
	.read = fs_read,
	.release = fs_release,
};
