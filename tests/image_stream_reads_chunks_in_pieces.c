/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A chunk streamed in pieces of any size (phosimg_stream, the restore's
 * fill) gives exactly the bytes written, raw or from a parent image; a
 * compressed chunk is sent to phosimg_read; and a damaged chunk, damaged
 * padding or a data file cut short fails the stream, naming the file,
 * while misuse is refused.
 */
#include "imgtest.h"

#define CHUNK (64u << 10)
#define SIZE (11 * CHUNK / 2 + 777)
#define NCHUNK (SIZE / CHUNK + 1)

/* Streams chunk k of object id in pieces of random sizes into out; the
 * first error of start, read or end. */
static int stream_chunk(phosimg_stream *s, uint32_t id, uint64_t k, uint8_t *out, unsigned *seed)
{
	uint32_t len = 0;
	int e = phosimg_stream_start(s, id, k, &len);
	for (uint32_t at = 0; !e && at < len;) {
		uint32_t n = (uint32_t)rand_r(seed) % (CHUNK / 3) + 1;
		if (n > len - at)
			n = len - at;
		e = phosimg_stream_read(s, out + at, n);
		at += n;
	}
	return e ? e : phosimg_stream_end(s);
}

/* Streams every chunk of object id into out; how many failed or differ from want. */
static int stream_all(phosimg *img, uint32_t id, const uint8_t *want, uint8_t *out)
{
	phosimg_stream *s;
	if (phosimg_stream_new(img, &s))
		bail("stream_new");
	unsigned seed = 77;
	int bad = 0;
	memset(out, 0xEE, SIZE);
	for (uint64_t k = 0; k < NCHUNK; k++)
		bad += stream_chunk(s, id, k, out + k * CHUNK, &seed) != 0;
	phosimg_stream_free(s);
	return bad + (memcmp(out, want, SIZE) != 0);
}

static char *write_image(const char *dir, const char *name, const uint8_t *data, bool lz4, const char *parent,
			 uint32_t *id)
{
	static char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	phosimg_writer *w;
	phosimg_writer_opts o = { .chunk_size = CHUNK, .lz4 = lz4, .parent = parent };
	phosimg_object ob = { .va = 0x200000, .size = SIZE };
	if (phosimg_writer_create(path, &o, &w) || phosimg_writer_add_object(w, &ob, id))
		bail("create %s: %s", name, phosimg_last_error());
	for (uint64_t k = 0; k < NCHUNK; k++) {
		uint64_t off = k * CHUNK, len = SIZE - off < CHUNK ? SIZE - off : CHUNK;
		/* A child keeps the even chunks from its parent. */
		int e = parent && k % 2 == 0 ? phosimg_writer_put_unchanged(w, *id, off)
					     : phosimg_writer_put(w, *id, off, data + off, (size_t)len);
		if (e)
			bail("put %s: %s", name, phosimg_last_error());
	}
	if (phosimg_writer_finish(w))
		bail("finish %s: %s", name, phosimg_last_error());
	return path;
}

/* Overwrites one byte of file at off. */
static void poke(const char *file, off_t off, uint8_t v)
{
	int fd = open(file, O_WRONLY);
	if (fd < 0 || pwrite(fd, &v, 1, off) != 1)
		bail("poke %s: %s", file, strerror(errno));
	close(fd);
}

/* Where the len bytes at want first appear in file; -1 if nowhere. */
static off_t find_in(const char *file, const uint8_t *want, size_t len)
{
	int fd = open(file, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st))
		bail("open %s", file);
	uint8_t *all = malloc((size_t)st.st_size);
	if (!all || pread(fd, all, (size_t)st.st_size, 0) != st.st_size)
		bail("read %s", file);
	close(fd);
	uint8_t *at = memmem(all, (size_t)st.st_size, want, len);
	off_t r = at ? at - all : -1;
	free(all);
	return r;
}

int main(void)
{
	plan(9);
	char *dir = scratch_dir("stream");
	uint8_t *data = malloc(SIZE), *data2 = malloc(SIZE), *got = malloc(SIZE), *want = malloc(SIZE);
	fill(data, SIZE, 5, 0);
	fill(data2, SIZE, 6, 0);
	uint32_t id, id2;
	char raw[PATH_MAX];
	snprintf(raw, sizeof(raw), "%s", write_image(dir, "raw", data, false, NULL, &id));
	phosimg *img;
	if (phosimg_open(raw, &img))
		bail("open: %s", phosimg_last_error());
	ok(stream_all(img, id, data, got) == 0, "every chunk streamed in pieces of random sizes gives the bytes written");

	phosimg_stream *s;
	if (phosimg_stream_new(img, &s))
		bail("stream_new");
	uint32_t len;
	uint8_t b[16];
	int e1 = phosimg_stream_read(s, b, 1), e2 = phosimg_stream_end(s);
	int e3 = phosimg_stream_start(s, id, NCHUNK, &len), e4 = phosimg_stream_start(s, id + 1, 0, &len);
	int e5 = phosimg_stream_start(s, id, NCHUNK - 1, &len);
	int e6 = phosimg_stream_read(s, got, len + 1);
	int e7 = phosimg_stream_read(s, got, len - 1), e8 = phosimg_stream_end(s);
	ok(e1 == -EINVAL && e2 == -EINVAL && e3 == -EINVAL && e4 == -EINVAL && !e5 && len == SIZE % CHUNK &&
		   e6 == -EINVAL && !e7 && e8 == -EINVAL,
	   "misuse is refused: a read or end with no chunk started, a chunk or object that is not there, a read "
	   "past the chunk's end, an end before all of it was read (%d %d %d %d %d %d %d %d)",
	   e1, e2, e3, e4, e5, e6, e7, e8);

	/* A child that keeps the even chunks from its parent. */
	for (uint64_t k = 0; k < NCHUNK; k++) {
		uint64_t off = k * CHUNK, n = SIZE - off < CHUNK ? SIZE - off : CHUNK;
		memcpy(want + off, (k % 2 ? data2 : data) + off, n);
	}
	char *child = write_image(dir, "child", data2, false, "raw", &id2);
	phosimg *cimg;
	if (phosimg_open(child, &cimg))
		bail("open child: %s", phosimg_last_error());
	ok(stream_all(cimg, id2, want, got) == 0, "a child image's chunks kept in its parent stream from the parent");
	phosimg_close(cimg);

	/* lz4: compressible chunks are compressed and go to phosimg_read. */
	uint8_t *soft = malloc(SIZE);
	fill(soft, SIZE, 7, 1);
	char *zp = write_image(dir, "lz4", soft, true, NULL, &id2);
	phosimg *zimg;
	if (phosimg_open(zp, &zimg))
		bail("open lz4: %s", phosimg_last_error());
	phosimg_stream *zs;
	if (phosimg_stream_new(zimg, &zs))
		bail("stream_new");
	phosimg_chunk ci;
	int z = phosimg_stream_start(zs, id2, 0, &len);
	ok(z == -ENOTSUP && !phosimg_chunk_info(zimg, id2, 0, &ci) && ci.lz4,
	   "a compressed chunk is not streamed: start says -ENOTSUP (%d)", z);
	phosimg_stream_free(zs);
	phosimg_close(zimg);
	free(soft);

	/* Damage, with the image open (as a restore has it). */
	char file[PATH_MAX + 16];
	snprintf(file, sizeof(file), "%s/gpu.data", raw);
	off_t c2 = find_in(file, data + 2 * CHUNK, 4096), last = find_in(file, data + (NCHUNK - 1) * CHUNK, SIZE % CHUNK);
	if (c2 < 0 || last < 0)
		bail("chunks not found in %s", file);
	unsigned seed = 1;
	poke(file, c2 + 1000, data[2 * CHUNK + 1000] ^ 0x40);
	int d = stream_chunk(s, id, 2, got, &seed);
	ok(d == -EBADMSG && strstr(phosimg_last_error(), "gpu.data") && strstr(phosimg_last_error(), "checksum"),
	   "a flipped byte fails the chunk's end: %s", phosimg_last_error());
	ok(stream_chunk(s, id, 1, got, &seed) == 0 && !memcmp(got, data + CHUNK, CHUNK),
	   "the stream reads the next chunk after a failed one");
	poke(file, c2 + 1000, data[2 * CHUNK + 1000]);
	poke(file, last + SIZE % CHUNK + 3, 0x5A);
	d = stream_chunk(s, id, NCHUNK - 1, got, &seed);
	ok(d == -EBADMSG && strstr(phosimg_last_error(), "padding"), "non-zero padding after a chunk fails it: %s",
	   phosimg_last_error());
	if (truncate(file, last + 100))
		bail("truncate");
	d = stream_chunk(s, id, NCHUNK - 1, got, &seed);
	ok(d == -EBADMSG && strstr(phosimg_last_error(), "cannot read"), "a data file cut short fails the read: %s",
	   phosimg_last_error());
	ok(stream_chunk(s, id, 0, got, &seed) == 0 && !memcmp(got, data, CHUNK),
	   "chunks before the cut still stream intact");
	phosimg_stream_free(s);
	phosimg_close(img);
	free(data);
	free(data2);
	free(got);
	free(want);
	rm_rf(dir);
	free(dir);
	return done();
}
