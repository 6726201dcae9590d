/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos receive (cli.h): reads the stream of phos send (stream.h,
 * doc/STREAM.md) on stdin into an image, as FORMAT.md's writers do: under
 * a temporary name, each file made durable, checked whole (every chunk and
 * CRIU file), then renamed to DIR/PID-NAME. Then, unless --no-restore, it
 * restores the image through the mount and returns once it runs.
 *
 * Its stdout is its answer to phos send: "received PATH" once the image is
 * whole, "restored PID" once it runs, "error: WHY" when it fails. A stream
 * cut midway, or given up by the sender, leaves nothing behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/procstatus.h"
#include "cli.h"
#include "stream.h"

typedef struct recv_args {
	const char *dir; /* NULL: STORE/received */
	const char *mode, *devices;
	bool restore;
} recv_args;

/* The image being received: the file being written (its path in the
 * image and fd), and the restore started from it (sink_meta). */
typedef struct sink {
	const recv_args *a;
	const char *tmp; /* the image's temporary folder */
	int dfd;
	char path[STREAM_PATH_MAX + 1];
	int fd;
	uint64_t bytes; /* of files, so far */
	pid_t restored;  /* the tree restored while the rest of gpu.data comes, or 0 */
	unsigned restore_id;
} sink;

/* Says why on stderr, and as the answer on stdout. Returns 1. */
static int fail(const char *fmt, ...)
{
	char why[3 * PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	fprintf(stderr, "phos receive: %s\n", why);
	printf("error: %s\n", why);
	fflush(stdout);
	return 1;
}

static int recv_parse(int argc, char **argv, recv_args *a)
{
	static const struct option opts[] = { { "dir", required_argument, NULL, 'd' },
					      { "no-restore", no_argument, NULL, 'n' },
					      { "device", required_argument, NULL, 'D' },
					      { 0 } };
	*a = (recv_args){ .restore = true };
	optind = 0;
	for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		if (o == 'd')
			a->dir = optarg;
		else if (o == 'n')
			a->restore = false;
		else if (o == 'D')
			a->devices = optarg;
		else
			optind = argc + 1;
	}
	if (optind < argc)
		a->mode = argv[optind++];
	if (optind != argc || (a->mode && strcmp(a->mode, "eager") && strcmp(a->mode, "lazy"))) {
		fprintf(stderr, "usage: phos receive [--dir DIR] [--no-restore] [eager|lazy] [--device OLD=NEW[,...]]\n");
		return 2;
	}
	return 0;
}

/* Closes the file being written, made durable. */
static int sink_close(sink *s)
{
	int e = 0;
	if (s->fd >= 0 && fsync(s->fd))
		e = -errno;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	return e;
}

/* Writes r->len bytes of the stream at r->offset of r->path. */
static int sink_file(sink *s, const stream_rec *r, char *buf)
{
	if (!stream_path_ok(r->path, false))
		return -EPROTO;
	if (s->fd < 0 || strcmp(s->path, r->path)) {
		int e = sink_close(s);
		if (e)
			return e;
		s->fd = openat(s->dfd, r->path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (s->fd < 0)
			return -errno;
		snprintf(s->path, sizeof(s->path), "%s", r->path);
	}
	int e = stream_read_full(0, buf, (size_t)r->len);
	if (e)
		return e;
	for (size_t done = 0; done < r->len;) {
		ssize_t n = pwrite(s->fd, buf + done, (size_t)r->len - done, (off_t)(r->offset + done));
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	s->bytes += r->len;
	return 0;
}

/* What follows the image's path in its restore: the mode, growing (its
 * data still comes), the moves of GPUs. */
static void restore_words(const recv_args *a, bool growing, char *out, size_t len)
{
	snprintf(out, len, "%s%s%s%.*s", a->mode ? a->mode : "", growing ? " growing" : "", a->devices ? " device=" : "",
		 PATH_MAX, a->devices ? a->devices : "");
}

/* META: all of the image but the rest of gpu.data is here. Unless told
 * not to, it is restored now, from where it is written: its reads of
 * gpu.data wait for the bytes still to come. */
static int sink_meta(sink *s, char *why, size_t len)
{
	if (!s->a->restore || s->restored)
		return 0;
	char words[PATH_MAX + 64], rwhy[3 * PATH_MAX] = "";
	restore_words(s->a, true, words, sizeof(words));
	if (cli_restore_image(s->tmp, words, false, &s->restored, &s->restore_id, rwhy, sizeof(rwhy)))
		return snprintf(why, len, "the image did not restore: %.2000s", rwhy), -EIO;
	printf("restored %d\n", (int)s->restored);
	fflush(stdout);
	fprintf(stderr, "phos receive: restored as process %d, while the rest of its device memory comes\n",
		(int)s->restored);
	return 0;
}

/* Ends a tree restored from an image that never came whole: pid, and its
 * init where it has one of its own (phos run --pid-ns). */
static void end_restored(pid_t pid)
{
	char pp[32], comm[64] = "", path[64];
	if (!proc_status_field(pid, "PPid", pp, sizeof(pp))) {
		snprintf(path, sizeof(path), "/proc/%.20s/comm", pp);
		FILE *f = fopen(path, "re");
		if (f && fgets(comm, sizeof(comm), f) && !strcmp(comm, "phos-init\n"))
			kill((pid_t)atoi(pp), SIGKILL);
		if (f)
			fclose(f);
	}
	kill(pid, SIGKILL);
}

/* Reads records until END (0) or a failure, with why. */
static int sink_all(sink *s, char *why, size_t len)
{
	char *buf = malloc(STREAM_DATA_MAX);
	if (!buf)
		return snprintf(why, len, "out of memory"), -ENOMEM;
	stream_rec r;
	int e;
	while (!(e = stream_read_rec(0, &r))) {
		if (r.type == STREAM_FILE)
			e = sink_file(s, &r, buf);
		else if (r.type == STREAM_DIR)
			e = !stream_path_ok(r.path, true) ? -EPROTO : mkdirat(s->dfd, r.path, 0700) ? -errno : 0;
		else if (r.type == STREAM_END)
			e = r.offset == s->bytes ? 0 : -EPROTO;
		else if (r.type == STREAM_META)
			e = sink_meta(s, why, len);
		if (e || r.type == STREAM_END)
			break;
		if (r.type == STREAM_ABORT) {
			buf[stream_read_full(0, buf, (size_t)r.len) ? 0 : r.len] = 0;
			snprintf(why, len, "the sender gave up: %s", buf);
			free(buf);
			return -ECANCELED;
		}
	}
	free(buf);
	if (e == -ENODATA)
		snprintf(why, len, "the stream ended before the image was whole (%llu bytes came)",
			 (unsigned long long)s->bytes);
	else if (e == -EPROTO)
		snprintf(why, len, "the stream is damaged (a record this phos does not know, or an END that "
				   "does not count %llu bytes)", (unsigned long long)s->bytes);
	else if (e && !*why)
		snprintf(why, len, "writing %s: %s", s->path, strerror(-e));
	int c = sink_close(s);
	if (!e && c)
		snprintf(why, len, "making %s durable: %s", s->path, strerror(-c));
	return e ? e : c;
}

/* Removes the temporary image at path (its files, criu/ and itself). */
static void remove_image(const char *path)
{
	char sub[PATH_MAX + 8];
	for (int pass = 0; pass < 2; pass++) {
		snprintf(sub, sizeof(sub), "%s%s", path, pass ? "" : "/criu");
		DIR *d = opendir(sub);
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (de->d_name[0] != '.' || (de->d_name[1] && strcmp(de->d_name, "..")))
				unlinkat(dirfd(d), de->d_name, 0);
		if (d)
			closedir(d);
		rmdir(sub);
	}
}

/* Makes dir's folders that are missing (mode 0700). */
static int make_dirs(const char *dir)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s", dir);
	for (char *s = p + 1;; s++) {
		if (*s && *s != '/')
			continue;
		char c = *s;
		*s = 0;
		if (mkdir(p, 0700) && errno != EEXIST)
			return -errno;
		if (!(*s = c))
			return 0;
	}
}

/* The rest once the stream is whole: the image made durable and checked,
 * and a restore started from it followed until all its memory is back
 * (it reads the image where it is). 0, or -errno with why. */
static int settle(sink *s, char *why, size_t len)
{
	int c = openat(s->dfd, "criu", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c >= 0)
		fsync(c), close(c);
	fsync(s->dfd);
	int e = cli_image_verify(s->tmp, why, len);
	char rwhy[3 * PATH_MAX] = "";
	pid_t pid = 0;
	if (!e && s->restored && cli_restore_follow(s->restore_id, true, &pid, rwhy, sizeof(rwhy)))
		e = -EIO, snprintf(why, len, "its restore failed: %.2000s", rwhy);
	return e;
}

/* The stream on stdin into final (through tmp), made durable and checked;
 * restored while it comes (s->restored) unless told not to. 0, or 1 with
 * the failure said. */
static int take(const char *dir, const char *final, sink *s)
{
	int e = make_dirs(dir);
	if (e)
		return fail("%s: %s", dir, strerror(-e));
	if (access(final, F_OK) == 0)
		return fail("%s is there already: nothing is written over it", final);
	if (mkdir(s->tmp, 0700))
		return fail("%s: %s", s->tmp, strerror(errno));
	s->dfd = open(s->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char why[2 * PATH_MAX] = "";
	e = s->dfd < 0 ? (snprintf(why, sizeof(why), "%s: %s", s->tmp, strerror(errno)), -EIO) : sink_all(s, why, sizeof(why));
	if (!e)
		e = settle(s, why, sizeof(why));
	if (s->dfd >= 0)
		close(s->dfd);
	if (!e && renameat2(AT_FDCWD, s->tmp, AT_FDCWD, final, RENAME_NOREPLACE))
		e = -errno, snprintf(why, sizeof(why), "renaming %.3000s to %.3000s: %s", s->tmp, final, strerror(errno));
	if (e) {
		if (s->restored)
			end_restored(s->restored);
		remove_image(s->tmp);
		return fail("nothing is kept%s: %s", s->restored ? ", and the process restored from it is ended" : "", why);
	}
	int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d >= 0)
		fsync(d), close(d);
	return 0;
}

int cmd_receive(int argc, char **argv)
{
	recv_args a;
	int e = recv_parse(argc, argv, &a);
	if (e)
		return e;
	char store[PATH_MAX], dir[PATH_MAX], name[STREAM_NAME_MAX + 1], why[1024] = "";
	if (!a.dir && cli_store(store, sizeof(store)))
		return fail("phosfs is not mounted at %s (set PHOS_MOUNT), and no --dir", cli_mount());
	if (a.dir && a.dir[0] != '/')
		return fail("--dir %s: give an absolute path", a.dir);
	snprintf(dir, sizeof(dir), "%.4000s%s", a.dir ? a.dir : store, a.dir ? "" : "/received");
	pid_t src = 0;
	if ((e = stream_read_head(0, &src, name, why, sizeof(why))))
		return fail("%s", e == -ENODATA ? "nothing came on stdin (the sender failed before it began)"
				  : e == -EPROTO  ? why
						  : strerror(-e));
	char final[PATH_MAX], tmp[PATH_MAX];
	snprintf(final, sizeof(final), "%.3900s/%d-%s", dir, (int)src, name);
	snprintf(tmp, sizeof(tmp), "%.3900s/.%d-%s.tmp-%d.0", dir, (int)src, name, (int)getpid());
	sink s = { .a = &a, .tmp = tmp, .dfd = -1, .fd = -1 };
	if (take(dir, final, &s))
		return 1;
	printf("received %s\n", final);
	fflush(stdout);
	fprintf(stderr, "phos receive: checkpoint %s of process %d is whole in %s\n", name, (int)src, final);
	if (!a.restore || s.restored)
		return 0;
	char words[PATH_MAX + 64];
	restore_words(&a, false, words, sizeof(words));
	pid_t pid = 0;
	char rwhy[3 * PATH_MAX] = "";
	if (cli_restore_image(final, words, false, &pid, NULL, rwhy, sizeof(rwhy)))
		return fail("the image %s did not restore: %s", final, rwhy);
	printf("restored %d\n", (int)pid);
	fflush(stdout);
	fprintf(stderr, "phos receive: restored as process %d\n", (int)pid);
	return 0;
}
