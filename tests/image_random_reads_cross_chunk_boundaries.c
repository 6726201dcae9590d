/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Random reads of any offset and length, across chunk boundaries and up to
 * the end of the object, return exactly the bytes written, raw or lz4.
 */
#include "imgtest.h"

#define CHUNK (64u << 10)
#define SIZE (11 * CHUNK / 2 + 777)
#define READS 3000

int main(void)
{
	plan(4);
	char *dir = scratch_dir("random");
	uint8_t *data = malloc(SIZE), *got = malloc(SIZE);
	fill(data, SIZE, 99, 1);
	for (int lz4 = 0; lz4 < 2; lz4++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/img%d", dir, lz4);
		phosimg_writer *w;
		phosimg_writer_opts o = { .chunk_size = CHUNK, .lz4 = lz4 };
		phosimg_object ob = { .va = 0x200000, .size = SIZE };
		uint32_t id;
		if (phosimg_writer_create(path, &o, &w) || phosimg_writer_add_object(w, &ob, &id) ||
		    put_object(w, id, data, SIZE, CHUNK, NULL) || phosimg_writer_finish(w))
			bail("write: %s", phosimg_last_error());
		phosimg *img;
		if (phosimg_open(path, &img))
			bail("open: %s", phosimg_last_error());
		unsigned seed = 1234 + (unsigned)lz4;
		int bad = 0, crossing = 0;
		for (int i = 0; i < READS; i++) {
			uint64_t off = (uint64_t)rand_r(&seed) % SIZE;
			uint64_t max = SIZE - off, len;
			switch (i % 4) {
			case 0: len = (uint64_t)rand_r(&seed) % 64 + 1; break;        /* small */
			case 1: len = (uint64_t)rand_r(&seed) % (3 * CHUNK) + 1; break; /* spans */
			case 2: off = (off / CHUNK + 1) * CHUNK - 5; len = 10; break;  /* straddles */
			default: len = max; break;                                    /* to the end */
			}
			if (off >= SIZE)
				off = SIZE - 1;
			max = SIZE - off;
			if (len > max)
				len = max;
			crossing += off / CHUNK != (off + len - 1) / CHUNK;
			memset(got, 0xEE, len);
			if (phosimg_read(img, id, off, got, len) != 0 || memcmp(got, data + off, len) != 0)
				bad++;
		}
		ok(bad == 0, "%s: %d random reads (%d across chunk boundaries) return the written bytes",
		   lz4 ? "lz4" : "raw", READS, crossing);
		ok(phosimg_read(img, id, SIZE - 1, got, 2) == -EINVAL && phosimg_read(img, id + 1, 0, got, 1) == -EINVAL,
		   "%s: reads past the object or of a missing object are refused", lz4 ? "lz4" : "raw");
		phosimg_close(img);
	}
	free(data);
	free(got);
	rm_rf(dir);
	free(dir);
	return done();
}
