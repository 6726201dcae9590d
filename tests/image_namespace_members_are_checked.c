/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Format 1.4: the members of a tree that lived in a pid namespace of its
 * own carry their pid there (ns_pid), and the root is flagged as the
 * namespace's init. An image written so reads back with both pids, and
 * `phos-image info` shows them; a reader rejects an image whose members
 * break the rules (another member flagged as the init, the root not pid 1
 * there, two members with one pid there), since a restore finds its
 * processes by these pids. A tree without the flag keeps ns_pid 0.
 */
#include <string.h>

#include "imgtest.h"
#include "tap.h"

#define CHUNK (64u << 10)

/* Writes an image of a two-process tree with members m at path; 0 when
 * it was written. */
static int write_tree(const char *path, const phosimg_member m[2])
{
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK };
	if (phosimg_writer_create(path, &o, &w))
		return -1;
	phosimg_meta meta = { .pid = m[0].pid, .protocol = PHOSIMG_PROTO_COW, .members = m, .member_count = 2 };
	static uint8_t data[CHUNK];
	phosimg_object ob = { .va = 0x7f0000000000ull, .size = CHUNK, .pid = m[1].pid };
	uint32_t id;
	fill(data, sizeof(data), 3, 0);
	int e = phosimg_writer_set_meta(w, &meta);
	if (!e)
		e = phosimg_writer_add_object(w, &ob, &id);
	if (!e)
		e = put_object(w, id, data, CHUNK, CHUNK, NULL);
	return e ? (phosimg_writer_finish(w), -1) : phosimg_writer_finish(w);
}

/* Whether the image at path opens; its members' ns_pids into ns. */
static int opens(const char *path, int32_t ns[2])
{
	phosimg *img;
	if (phosimg_open(path, &img))
		return 0;
	const phosimg_info *in = phosimg_get_info(img);
	for (uint32_t i = 0; i < 2 && i < in->meta.member_count; i++)
		ns[i] = in->meta.members[i].ns_pid;
	phosimg_close(img);
	return 1;
}

int main(void)
{
	plan(6);
	char *dir = scratch_dir("nsmembers");
	char path[PATH_MAX];
	const phosimg_member good[2] = {
		{ .pid = 4100, .ppid = 1, .flags = PHOSIMG_MEMBER_NS_INIT, .ns_pid = 1, .comm = "phos-init" },
		{ .pid = 4101, .ppid = 4100, .flags = PHOSIMG_MEMBER_CUDA | PHOSIMG_MEMBER_TRACED, .ns_pid = 2,
		  .comm = "train" },
	};
	int32_t ns[2] = { -1, -1 };
	snprintf(path, sizeof(path), "%s/good", dir);
	int back = write_tree(path, good) == 0 && opens(path, ns);
	ok(back && ns[0] == 1 && ns[1] == 2, "a tree of its own namespace reads back with each member's pid there (%d, %d)",
	   ns[0], ns[1]);
	char out[PATH_MAX];
	snprintf(out, sizeof(out), "%s/info", dir);
	ok(run_tool(out, "info", path, NULL) == 0 && file_contains(out, "pid 1 in its namespace (its init)") &&
		   file_contains(out, "pid 2 in its namespace"),
	   "phos-image info shows both pids of each member");

	struct {
		const char *what;
		phosimg_member m[2];
	} bad[3];
	for (int i = 0; i < 3; i++)
		memcpy(bad[i].m, good, sizeof(good));
	bad[0].what = "a member other than the root flagged as the init";
	bad[0].m[1].flags |= PHOSIMG_MEMBER_NS_INIT;
	bad[1].what = "the root not pid 1 in its namespace";
	bad[1].m[0].ns_pid = 3;
	bad[2].what = "two members with one pid in the namespace";
	bad[2].m[1].ns_pid = 1;
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/bad%d", dir, i);
		int written = write_tree(path, bad[i].m) == 0;
		int32_t x[2];
		ok(written && !opens(path, x) && strstr(phosimg_last_error(), "namespace"),
		   "rejected: %s (%s)", bad[i].what, phosimg_last_error());
	}

	phosimg_member plain[2];
	memcpy(plain, good, sizeof(good));
	plain[0].flags = 0;
	plain[0].ns_pid = plain[1].ns_pid = 0;
	snprintf(path, sizeof(path), "%s/plain", dir);
	ns[0] = ns[1] = -1;
	back = write_tree(path, plain) == 0 && opens(path, ns);
	ok(back && ns[0] == 0 && ns[1] == 0, "a tree with the host's pids keeps ns_pid 0 (%d, %d)", ns[0], ns[1]);
	rm_rf(dir);
	free(dir);
	return done();
}
