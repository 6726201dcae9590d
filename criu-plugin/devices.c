/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos_devices.so: a CRIU plugin for the device files that a forked child
 * of a CUDA process keeps.
 *
 * A child forked from a CUDA process (a PyTorch DataLoader worker) shares
 * the parent's open /dev/nvidia* files and keeps its mappings of them,
 * among them the UVM range, which the UVM driver disables in the child at
 * fork. CUDA is not fork-safe, so the child never uses any of them. CRIU
 * cannot save them, and the driver's checkpoint does not cover the child
 * (it never made a context). So at dump this plugin accepts them without
 * saving anything, and at restore it gives the child what it can still
 * use:
 *
 *   mappings  /dev/zero at the same address, size and protection: memory
 *             the child never touched, and never can through CUDA;
 *   files     the same device opened again, with the same flags (or
 *             /dev/null where that fails): descriptors the child will
 *             only ever close.
 *
 * The devices are those whose path starts with a prefix in
 * $PHOS_CRIU_DEVICES (colon-separated; default "/dev/nvidia"). Every hook
 * returns -ENOTSUP for anything else, so that CRIU handles it as before.
 * Per-file facts go to "phos-dev-<id>.img" in CRIU's image directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criu-plugin.h>

#define DEFAULT_DEVICES "/dev/nvidia"
#define RECORD_MAGIC 0x56444850u /* "PHDV" */

/* One saved file: what it was, and how it was open. */
struct record {
	unsigned magic;
	int flags;
	char path[PATH_MAX];
};

/* Whether path is a device this plugin stands in for. */
static int ours(const char *path)
{
	const char *list = getenv("PHOS_CRIU_DEVICES");
	if (!list || !*list)
		list = DEFAULT_DEVICES;
	while (*list) {
		size_t n = strcspn(list, ":");
		if (n && !strncmp(path, list, n))
			return 1;
		list += n + (list[n] == ':');
	}
	return 0;
}

/* The path an fd of CRIU's is open on; -errno if unknown. */
static int fd_path(int fd, char *out, size_t len)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, out, len - 1);
	if (n < 0)
		return -errno;
	out[n] = 0;
	return 0;
}

/* CRIU may write device paths with doubled slashes ("//dev/nvidia0"). */
static const char *clean(const char *path, char *buf, size_t len)
{
	size_t k = 0;
	for (const char *s = path; *s && k + 1 < len; s++)
		if (!(*s == '/' && k && buf[k - 1] == '/'))
			buf[k++] = *s;
	buf[k] = 0;
	return buf;
}

static int handle_device_vma(int fd, const struct stat *st)
{
	char path[PATH_MAX];
	if (!S_ISCHR(st->st_mode) || fd_path(fd, path, sizeof(path)) || !ours(path))
		return -ENOTSUP;
	return 0; /* nothing is saved: see update_vma_map */
}
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__HANDLE_DEVICE_VMA, handle_device_vma)

static int update_vma_map(const char *path, const uint64_t addr, const uint64_t old_pgoff, uint64_t *new_pgoff,
			  int *plugin_fd)
{
	(void)addr, (void)old_pgoff;
	char buf[PATH_MAX];
	if (!ours(clean(path, buf, sizeof(buf))))
		return -ENOTSUP;
	/* CRIU maps this fd at the old address and closes it. */
	int fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	*plugin_fd = fd;
	*new_pgoff = 0;
	return 1;
}
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__UPDATE_VMA_MAP, update_vma_map)

static void record_name(int id, char *out, size_t len)
{
	snprintf(out, len, "phos-dev-%d.img", id);
}

static int dump_ext_file(int fd, int id)
{
	struct record r = { .magic = RECORD_MAGIC };
	struct stat st;
	if (fstat(fd, &st) || !S_ISCHR(st.st_mode) || fd_path(fd, r.path, sizeof(r.path)) || !ours(r.path))
		return -ENOTSUP;
	r.flags = fcntl(fd, F_GETFL);
	if (r.flags < 0)
		return -errno;
	char name[64];
	record_name(id, name, sizeof(name));
	int out = openat(criu_get_image_dir(), name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	ssize_t n = write(out, &r, sizeof(r));
	int e = n == (ssize_t)sizeof(r) ? 0 : n < 0 ? -errno : -EIO;
	close(out);
	return e;
}
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__DUMP_EXT_FILE, dump_ext_file)

static int restore_ext_file(int id)
{
	char name[64];
	record_name(id, name, sizeof(name));
	int in = openat(criu_get_image_dir(), name, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -ENOTSUP; /* another plugin's file */
	struct record r;
	ssize_t n = read(in, &r, sizeof(r));
	close(in);
	if (n != (ssize_t)sizeof(r) || r.magic != RECORD_MAGIC)
		return -EINVAL;
	r.path[sizeof(r.path) - 1] = 0;
	int acc = r.flags & O_ACCMODE;
	int fd = open(r.path, acc | (r.flags & (O_NONBLOCK | O_APPEND)) | O_CLOEXEC);
	if (fd < 0)
		fd = open("/dev/null", acc | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESTORE_EXT_FILE, restore_ext_file)

static int init(int stage)
{
	(void)stage;
	return 0;
}

static void fini(int stage, int ret)
{
	(void)stage, (void)ret;
}

CR_PLUGIN_REGISTER("phos_devices", init, fini)
