/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * CRIU writes what it measured in a dump (stats-dump: times freezing the
 * tree, frozen, collecting and writing pages; pages written) and in a
 * restore (stats-restore: times forking and restoring the tree, pages
 * restored), and criu_dump_stats_read and criu_restore_stats_read take
 * them for status (engine/criu-image.c):
 *
 *   - a stats image as CRIU writes it is read field by field, and fields
 *     it does not know are stepped over;
 *   - a missing one is -ENOENT, a restore's stats where a dump's are read
 *     (and the other way round) or another image's magic is refused;
 *   - 2000 corrupt or cut ones are refused or read, never a crash (the
 *     tests also run under ASan).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/criu-image.h"
#include "criu_files_test.h"

/* stats-dump's magic numbers (CRIU's service magic, then STATS_MAGIC)
 * and one stats_entry holding body as its field `which` (1: dump). */
static void stats_image(buf *out, uint32_t magic1, unsigned which, const buf *body)
{
	uint32_t magic[2] = { 0x55105940u, magic1 };
	out->n = 0;
	put(out, magic, sizeof(magic));
	buf se = { .n = 0 };
	field_bytes(&se, which, body->p, body->n);
	uint32_t len = (uint32_t)se.n;
	put(out, &len, 4);
	put(out, se.p, se.n);
}

int main(void)
{
	plan(6);
	char dir[] = "/tmp/phos-criu-stats-XXXXXX";
	if (!mkdtemp(dir))
		bail("mkdtemp: %s", strerror(errno));
	char path[512];
	snprintf(path, sizeof(path), "%s/stats-dump", dir);

	/* 1. As CRIU writes it (images/stats.proto), with an unknown field. */
	buf ds = { .n = 0 };
	field_varint(&ds, 1, 1200);
	field_varint(&ds, 2, 812345);
	field_varint(&ds, 3, 402000);
	field_varint(&ds, 4, 1500);
	field_varint(&ds, 5, 300000);
	field_varint(&ds, 6, 0);
	field_varint(&ds, 7, 250000);
	field_varint(&ds, 9, 0);
	field_bytes(&ds, 99, "later", 5);
	field_varint(&ds, 14, 4096);
	buf img;
	stats_image(&img, 0x57093306u, 1, &ds);
	write_file(path, img.p, img.n);
	criu_dump_stats st;
	int e = criu_dump_stats_read(dir, &st);
	ok(!e && st.freezing_us == 1200 && st.frozen_us == 812345 && st.memdump_us == 402000 && st.memwrite_us == 1500 &&
		   st.pages_scanned == 300000 && st.pages_written == 250000 && st.shpages_written == 4096,
	   "a dump's stats are read: frozen %u us, memdump %u us, %llu pages written (%d)", st.frozen_us, st.memdump_us,
	   (unsigned long long)st.pages_written, e);

	/* 2. None there. */
	unlink(path);
	ok(criu_dump_stats_read(dir, &st) == -ENOENT, "without stats-dump the read says ENOENT");

	/* 3. A restore's stats (field 2), another image's magic. */
	buf rs;
	stats_image(&rs, 0x57093306u, 2, &ds);
	write_file(path, rs.p, rs.n);
	int e1 = criu_dump_stats_read(dir, &st);
	stats_image(&rs, 0x56303138u, 1, &ds);
	write_file(path, rs.p, rs.n);
	int e2 = criu_dump_stats_read(dir, &st);
	ok(e1 == -EBADMSG && e2 == -EBADMSG, "a restore's stats and another image are refused (%d, %d)", e1, e2);

	/* 4. A restore's, as CRIU writes them, in its work directory. */
	char rpath[512];
	snprintf(rpath, sizeof(rpath), "%s/stats-restore", dir);
	buf rb = { .n = 0 };
	field_varint(&rb, 1, 0);
	field_varint(&rb, 2, 0);
	field_varint(&rb, 3, 4321);
	field_varint(&rb, 4, 612345);
	field_bytes(&rb, 99, "later", 5);
	field_varint(&rb, 5, 262144);
	stats_image(&rs, 0x57093306u, 2, &rb);
	write_file(rpath, rs.p, rs.n);
	buf rimg = rs;
	criu_restore_stats rst;
	e = criu_restore_stats_read(dir, &rst);
	ok(!e && rst.forking_us == 4321 && rst.restore_us == 612345 && rst.pages_restored == 262144,
	   "a restore's stats are read: forking %u us, restore %u us, %llu pages restored (%d)", rst.forking_us,
	   rst.restore_us, (unsigned long long)rst.pages_restored, e);

	/* 5. A dump's stats where a restore's are read. */
	stats_image(&rs, 0x57093306u, 1, &ds);
	write_file(rpath, rs.p, rs.n);
	e1 = criu_restore_stats_read(dir, &rst);
	unlink(rpath);
	e2 = criu_restore_stats_read(dir, &rst);
	ok(e1 == -EBADMSG && e2 == -ENOENT, "a dump's stats are no restore's (%d), and none is ENOENT (%d)", e1, e2);

	/* 6. Corrupt and cut. */
	srand(28);
	int read = 0, refused = 0, other = 0;
	for (int i = 0; i < 2000; i++) {
		bool dump = i % 2 == 0;
		buf c = corrupted(dump ? &img : &rimg);
		write_file(dump ? path : rpath, c.p, c.n);
		e = dump ? criu_dump_stats_read(dir, &st) : criu_restore_stats_read(dir, &rst);
		if (!e)
			read++;
		else if (e == -EBADMSG)
			refused++;
		else
			other++;
	}
	ok(other == 0 && refused > 0, "2000 corrupt stats images, a dump's and a restore's: %d read, %d refused (EBADMSG), %d otherwise", read,
	   refused, other);

	unlink(path);
	unlink(rpath);
	rmdir(dir);
	return 0;
}
