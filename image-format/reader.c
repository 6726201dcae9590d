/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The reader: opens an image and its parent chain, checks their structure
 * once, then serves random reads at chunk granularity, checking each
 * chunk's checksum as it is read.
 */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <lz4.h>
#include <xxhash.h>

#include "format.h"

#define INDEX_MAX (1ull << 32)

/* A reusable buffer for one chunk's stored bytes. */
typedef struct scratch {
	uint8_t *p;
	size_t cap;
	struct scratch *next;
} scratch;

struct phosimg {
	char *path;
	char *criu_path;
	int dirfd;
	int fds[PHOSIMG_STRIPES_MAX]; /* the data files: gpu.data, gpu.data.1, … */
	manifest m;
	entry *entries;
	uint64_t *first; /* per object: its first entry */
	phosimg *parent;
	pthread_mutex_t lock; /* guards pool */
	scratch *pool;
	bool growing; /* its data files may still be written (phosimg_open_growing) */
};

/* How long a read of a growing image waits for its data file to grow. */
#define GROW_WAIT_MS 30000

/* Waits until data file fd of img holds its first end bytes, where img is
 * growing (at once otherwise): 0, or -ENODATA once it has not grown for
 * GROW_WAIT_MS (the writer is gone), as a short file reads. */
static int data_wait(const phosimg *img, int fd, uint64_t end)
{
	if (!img->growing)
		return 0;
	uint64_t last = 0;
	for (int still = 0; still < GROW_WAIT_MS / 2;) {
		struct stat st;
		if (fstat(fd, &st) != 0)
			return -errno;
		if ((uint64_t)st.st_size >= end)
			return 0;
		still = (uint64_t)st.st_size == last ? still + 1 : 0;
		last = (uint64_t)st.st_size;
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
	return -ENODATA;
}

static uint64_t chunks_of(uint64_t size, uint32_t chunk)
{
	return size / chunk + (size % chunk != 0);
}

/* Reads and checks gpu.index against the manifest. */
static int load_index(phosimg *img)
{
	char shown[PATH_MAX + 32];
	snprintf(shown, sizeof(shown), "%s/" INDEX_FILE, img->path);
	manifest *m = &img->m;
	uint8_t *p;
	size_t len;
	int e = fmt_slurp(img->dirfd, INDEX_FILE, shown, INDEX_MAX, &p, &len);
	if (e)
		return e;
	e = -EBADMSG;
	uint8_t h[16];
	if (len != m->index_size) {
		fmt_fail(e, "%s: %zu bytes, the manifest says %llu", shown, len, (unsigned long long)m->index_size);
		goto out;
	}
	if (len < INDEX_HEADER_SIZE + INDEX_TRAILER_SIZE || get32(p) != INDEX_MAGIC) {
		fmt_fail(e, "%s: offset 0: not a phos index (bad magic or too short)", shown);
		goto out;
	}
	uint8_t whole[16];
	fmt_hash(p, len, whole);
	if (memcmp(whole, m->index_hash, 16) != 0) {
		fmt_fail(e, "%s: checksum differs from the one in the manifest", shown);
		goto out;
	}
	if (get16(p + 4) != PHOSIMG_VERSION_MAJOR) {
		fmt_fail(-EPROTONOSUPPORT, "%s: offset 4: format version %u, this reader knows %u", shown,
			 get16(p + 4), PHOSIMG_VERSION_MAJOR);
		e = -EPROTONOSUPPORT;
		goto out;
	}
	uint32_t hsize = get32(p + 8), esize = get32(p + 12), chunk = get32(p + 24);
	uint64_t count = get64(p + 16);
	if (hsize < INDEX_HEADER_SIZE || esize < INDEX_ENTRY_SIZE || count != m->index_entries ||
	    chunk != m->info.chunk_size || count > (len - hsize - INDEX_TRAILER_SIZE) / esize ||
	    hsize + count * esize + INDEX_TRAILER_SIZE != len) {
		fmt_fail(e, "%s: offset 8: header (size %u, entry size %u, %llu entries, chunk %u) does not fit "
			    "the file or the manifest", shown, hsize, esize, (unsigned long long)count, chunk);
		goto out;
	}
	fmt_hash(p, len - INDEX_TRAILER_SIZE, h);
	if (memcmp(h, p + len - INDEX_TRAILER_SIZE, 16) != 0) {
		fmt_fail(e, "%s: offset %zu: checksum mismatch", shown, len - INDEX_TRAILER_SIZE);
		goto out;
	}

	/* Entries: sorted by (object, chunk), every chunk of every object. */
	uint32_t nobj = m->info.object_count;
	img->entries = malloc((count ? count : 1) * sizeof(entry));
	img->first = malloc((nobj ? nobj : 1) * sizeof(uint64_t));
	if (!img->entries || !img->first) {
		e = -ENOMEM;
		goto out;
	}
	uint64_t k = 0;
	for (uint32_t o = 0; o < nobj; o++) {
		const phosimg_object *ob = &m->objects[o];
		uint64_t n = chunks_of(ob->size, chunk);
		img->first[o] = k;
		if (n > count - k) {
			fmt_fail(e, "%s: has %llu entries, fewer than the objects' chunks", shown,
				 (unsigned long long)count);
			goto out;
		}
		for (uint64_t c = 0; c < n; c++, k++) {
			entry *en = &img->entries[k];
			uint64_t off = hsize + k * esize;
			fmt_decode_entry(p + off, en);
			uint64_t raw = c + 1 < n ? chunk : ob->size - c * (uint64_t)chunk;
			if (en->object != o || en->chunk != c) {
				fmt_fail(e, "%s: offset %llu: entry %llu is for object %u chunk %llu, expected object %u "
					    "chunk %llu", shown, (unsigned long long)off, (unsigned long long)k,
					 en->object, (unsigned long long)en->chunk, o, (unsigned long long)c);
				goto out;
			}
			bool lz4 = en->flags & ENTRY_LZ4, par = en->flags & ENTRY_PARENT;
			uint32_t stripe = (en->flags & ENTRY_STRIPE_MASK) >> ENTRY_STRIPE_SHIFT;
			bool ok = (en->flags & ~(ENTRY_KNOWN_FLAGS | ENTRY_STRIPE_MASK)) == 0 && en->raw_len == raw &&
				  !(lz4 && par) && stripe < m->nfiles && !(par && stripe);
			if (par)
				ok = ok && m->info.has_parent && en->stored_len == 0;
			else if (lz4)
				ok = ok && en->stored_len > 0 &&
				     en->stored_len <= (uint32_t)LZ4_compressBound((int)(raw < INT_MAX ? raw : 0));
			else
				ok = ok && en->stored_len == en->raw_len;
			if (!ok) {
				fmt_fail(e, "%s: offset %llu: entry %llu (object %u chunk %llu) has bad flags or lengths "
					    "(flags %#x, stored %u, raw %u of %llu)", shown, (unsigned long long)off,
					 (unsigned long long)k, o, (unsigned long long)c, en->flags, en->stored_len,
					 en->raw_len, (unsigned long long)raw);
				goto out;
			}
			if (par)
				m->info.parent_chunks++;
			else
				m->info.stored_bytes += en->stored_len;
		}
	}
	if (k != count) {
		fmt_fail(e, "%s: has %llu entries, more than the objects' %llu chunks", shown,
			 (unsigned long long)count, (unsigned long long)k);
		goto out;
	}
	m->info.chunk_count = count;
	e = 0;
out:
	free(p);
	return e;
}

static int cmp_file_location(const void *a, const void *b)
{
	const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
	uint32_t fx = x->flags & ENTRY_STRIPE_MASK, fy = y->flags & ENTRY_STRIPE_MASK;
	if (fx != fy)
		return fx < fy ? -1 : 1;
	return x->location < y->location ? -1 : x->location > y->location;
}

/* Opens data file f and checks its size and header. */
static int open_data(phosimg *img, uint32_t f, const char *shown)
{
	manifest *m = &img->m;
	char name[32];
	if (f)
		snprintf(name, sizeof(name), DATA_FILE ".%u", f);
	else
		snprintf(name, sizeof(name), DATA_FILE);
	img->fds[f] = openat(img->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (img->fds[f] < 0 && errno == ELOOP)
		return fmt_fail(-EBADMSG, "%s: a symbolic link, which an image never holds", shown);
	if (img->fds[f] < 0)
		return fmt_fail(-errno, "%s: cannot open: %m", shown);
	struct stat st;
	if (fstat(img->fds[f], &st) != 0)
		return fmt_fail(-errno, "%s: cannot stat: %m", shown);
	if (!S_ISREG(st.st_mode))
		return fmt_fail(-EBADMSG, "%s: not a regular file", shown);
	/* A growing image's file may be shorter: what is not there yet is
	 * waited for. */
	if ((uint64_t)st.st_size != m->file_size[f] && !(img->growing && (uint64_t)st.st_size < m->file_size[f]))
		return fmt_fail(-EBADMSG, "%s: %lld bytes, the manifest says %llu", shown, (long long)st.st_size,
				(unsigned long long)m->file_size[f]);
	uint8_t hdr[DATA_HEADER_SIZE];
	int e = data_wait(img, img->fds[f], sizeof(hdr));
	if (!e)
		e = fmt_read_all(img->fds[f], hdr, sizeof(hdr), 0);
	if (e)
		return fmt_fail(e == -ENODATA ? -EBADMSG : e, "%s: offset 0: cannot read the header", shown);
	if (get32(hdr) != DATA_MAGIC || get16(hdr + 4) != PHOSIMG_VERSION_MAJOR ||
	    memcmp(hdr + 8, m->info.uuid, 16) != 0 || get32(hdr + 24) != m->info.chunk_size)
		return fmt_fail(-EBADMSG, "%s: offset 0: header does not belong to this image", shown);
	for (size_t i = 28; i < sizeof(hdr); i++)
		if (hdr[i])
			return fmt_fail(-EBADMSG, "%s: offset %zu: header padding is not zero", shown, i);
	posix_fadvise(img->fds[f], 0, 0, POSIX_FADV_RANDOM);
	return 0;
}

static void data_shown(const phosimg *img, uint32_t f, char *out, size_t len)
{
	if (f)
		snprintf(out, len, "%s/" DATA_FILE ".%u", img->path, f);
	else
		snprintf(out, len, "%s/" DATA_FILE, img->path);
}

/* Checks that the stored chunks tile each data file from its header to its end. */
static int check_data(phosimg *img)
{
	char shown[PATH_MAX + 32];
	manifest *m = &img->m;
	for (uint32_t f = 0; f < m->nfiles; f++) {
		data_shown(img, f, shown, sizeof(shown));
		int e = open_data(img, f, shown);
		if (e)
			return e;
	}
	data_shown(img, 0, shown, sizeof(shown));
	if (m->stored_bytes != m->info.stored_bytes)
		return fmt_fail(-EBADMSG, "%s: the manifest says %llu chunk bytes, the index %llu", shown,
				(unsigned long long)m->stored_bytes, (unsigned long long)m->info.stored_bytes);

	uint64_t n = 0, count = m->info.chunk_count;
	const entry **v = malloc((count ? count : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint64_t k = 0; k < count; k++)
		if (!(img->entries[k].flags & ENTRY_PARENT))
			v[n++] = &img->entries[k];
	qsort(v, n, sizeof(*v), cmp_file_location);
	int e = 0;
	uint64_t k = 0;
	for (uint32_t f = 0; f < m->nfiles && !e; f++) {
		data_shown(img, f, shown, sizeof(shown));
		uint64_t at = DATA_HEADER_SIZE;
		for (; k < n && !e && (v[k]->flags & ENTRY_STRIPE_MASK) >> ENTRY_STRIPE_SHIFT == f; k++) {
			if (v[k]->location != at)
				e = fmt_fail(-EBADMSG, "%s: offset %llu: chunk %llu of object %u is stored at %llu; chunks "
						       "must follow each other", shown, (unsigned long long)at,
					     (unsigned long long)v[k]->chunk, v[k]->object,
					     (unsigned long long)v[k]->location);
			at += align_up(v[k]->stored_len, DATA_ALIGN);
		}
		if (!e && at != m->file_size[f])
			e = fmt_fail(-EBADMSG, "%s: offset %llu: chunks end here, the file at %llu", shown,
				     (unsigned long long)at, (unsigned long long)m->file_size[f]);
	}
	free(v);
	return e;
}

static void free_one(phosimg *img)
{
	if (!img)
		return;
	if (img->dirfd >= 0)
		close(img->dirfd);
	for (int f = 0; f < PHOSIMG_STRIPES_MAX; f++)
		if (img->fds[f] >= 0)
			close(img->fds[f]);
	manifest_free(&img->m);
	free(img->entries);
	free(img->first);
	free(img->path);
	free(img->criu_path);
	for (scratch *s = img->pool, *n; s; s = n) {
		n = s->next;
		free(s->p);
		free(s);
	}
	pthread_mutex_destroy(&img->lock);
	free(img);
}

void phosimg_close(phosimg *img)
{
	while (img) {
		phosimg *parent = img->parent;
		free_one(img);
		img = parent;
	}
}

static int open_one(const char *path, bool growing, phosimg **out)
{
	phosimg *img = calloc(1, sizeof(*img));
	if (!img)
		return -ENOMEM;
	img->growing = growing;
	img->dirfd = -1;
	for (int f = 0; f < PHOSIMG_STRIPES_MAX; f++)
		img->fds[f] = -1;
	pthread_mutex_init(&img->lock, NULL);
	img->path = strdup(path);
	img->criu_path = fmt_strdupf("%s/" CRIU_DIR, path);
	int e = -ENOMEM;
	if (!img->path || !img->criu_path)
		goto fail;
	img->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (img->dirfd < 0) {
		e = fmt_fail(-errno, "%s: cannot open the image: %m", path);
		goto fail;
	}
	char shown[PATH_MAX + 32];
	snprintf(shown, sizeof(shown), "%s/" MANIFEST_FILE, path);
	uint8_t *p;
	size_t len;
	e = fmt_slurp(img->dirfd, MANIFEST_FILE, shown, MANIFEST_MAX, &p, &len);
	if (e)
		goto fail;
	e = manifest_decode(p, len, shown, &img->m);
	free(p);
	if (e || (e = load_index(img)) || (e = check_data(img)))
		goto fail;
	*out = img;
	return 0;
fail:
	free_one(img);
	return e;
}

/* Resolves a parent path: absolute, or relative to the directory that
 * holds the child. */
static char *parent_path(const char *child, const char *stored)
{
	if (stored[0] == '/')
		return strdup(stored);
	/* The real path, so that a child opened as "." or "x/.." works too. */
	char *real = realpath(child, NULL), *dir, *base;
	int e = real ? fmt_split_path(real, &dir, &base) : -ENOMEM;
	free(real);
	if (e)
		return NULL;
	char *s = fmt_strdupf("%s/%s", dir, stored);
	free(dir);
	free(base);
	return s;
}

/* Checks that every chunk img takes from its parent is there, alike. */
static int check_parent_refs(phosimg *img)
{
	const phosimg *par = img->parent;
	for (uint64_t k = 0; k < img->m.info.chunk_count; k++) {
		const entry *e = &img->entries[k];
		if (!(e->flags & ENTRY_PARENT))
			continue;
		const entry *pe = NULL;
		if (e->location < par->m.info.object_count) {
			uint32_t po = (uint32_t)e->location;
			uint64_t n = chunks_of(par->m.objects[po].size, par->m.info.chunk_size);
			if (par->m.info.chunk_size == img->m.info.chunk_size && e->chunk < n)
				pe = &par->entries[par->first[po] + e->chunk];
		}
		if (!pe || pe->raw_len != e->raw_len || memcmp(pe->hash, e->hash, 16) != 0)
			return fmt_fail(-EBADMSG, "%s/" INDEX_FILE ": offset %llu: chunk %llu of object %u refers to "
						  "object %llu of the parent %s, which has no such chunk",
					img->path, (unsigned long long)(INDEX_HEADER_SIZE + k * INDEX_ENTRY_SIZE),
					(unsigned long long)e->chunk, e->object, (unsigned long long)e->location,
					par->path);
	}
	return 0;
}

/* phosimg_open, or with growing, phosimg_open_growing. */
static int open_image(const char *path, bool growing, phosimg **out)
{
	if (!path || !out)
		return -EINVAL;
	fmt_clear_error();
	phosimg *head = NULL, *img = NULL;
	int e = open_one(path, growing, &head);
	if (e)
		return e;
	img = head;
	uint32_t depth = 1;
	while (!e && img->m.info.has_parent) {
		if (++depth > PHOSIMG_DEPTH_MAX) {
			e = fmt_fail(-ELOOP, "%s: parent chain is deeper than %u images", path, PHOSIMG_DEPTH_MAX);
			break;
		}
		char *pp = parent_path(img->path, img->m.info.parent_path);
		if (!pp) {
			e = -ENOMEM;
			break;
		}
		e = open_one(pp, false, &img->parent);
		if (e == -ENOENT)
			fmt_fail(e, "%s: parent image %s is missing", img->path, pp);
		free(pp);
		if (e)
			break;
		phosimg *par = img->parent;
		if (memcmp(par->m.info.uuid, img->m.info.parent_uuid, 16) != 0) {
			e = fmt_fail(-EBADMSG, "%s: parent %s is another image than the one it was made from",
				     img->path, par->path);
			break;
		}
		for (phosimg *i = head; i != par && !e; i = i->parent)
			if (memcmp(i->m.info.uuid, par->m.info.uuid, 16) == 0)
				e = fmt_fail(-ELOOP, "%s: parent chain loops back to %s", path, i->path);
		if (!e)
			e = check_parent_refs(img);
		img = par;
	}
	if (e) {
		phosimg_close(head);
		return e;
	}
	/* depth of each image counts itself and its ancestors */
	for (img = head; img; img = img->parent)
		img->m.info.depth = depth--;
	*out = head;
	return 0;
}

int phosimg_open(const char *path, phosimg **out)
{
	return open_image(path, false, out);
}

int phosimg_open_growing(const char *path, phosimg **out)
{
	return open_image(path, true, out);
}

const phosimg_info *phosimg_get_info(const phosimg *img)
{
	return &img->m.info;
}

const char *phosimg_criu_dir(const phosimg *img)
{
	return img->criu_path;
}

static const entry *find(const phosimg *img, uint32_t obj, uint64_t index)
{
	if (obj >= img->m.info.object_count)
		return NULL;
	if (index >= chunks_of(img->m.objects[obj].size, img->m.info.chunk_size))
		return NULL;
	return &img->entries[img->first[obj] + index];
}

int phosimg_chunk_info(const phosimg *img, uint32_t obj, uint64_t index, phosimg_chunk *out)
{
	const entry *e = find(img, obj, index);
	if (!e || !out)
		return -EINVAL;
	*out = (phosimg_chunk){ .object = obj, .index = index, .raw_len = e->raw_len,
				.stored_len = e->stored_len, .lz4 = e->flags & ENTRY_LZ4,
				.in_parent = e->flags & ENTRY_PARENT };
	memcpy(out->hash, e->hash, 16);
	return 0;
}

static scratch *scratch_get(phosimg *img, size_t need)
{
	pthread_mutex_lock(&img->lock);
	scratch *s = img->pool;
	if (s)
		img->pool = s->next;
	pthread_mutex_unlock(&img->lock);
	if (!s && !(s = calloc(1, sizeof(*s))))
		return NULL;
	if (s->cap < need) {
		free(s->p);
		s->p = malloc(need);
		s->cap = s->p ? need : 0;
		if (!s->p) {
			free(s);
			return NULL;
		}
	}
	return s;
}

static void scratch_put(phosimg *img, scratch *s)
{
	pthread_mutex_lock(&img->lock);
	s->next = img->pool;
	img->pool = s;
	pthread_mutex_unlock(&img->lock);
}

/* Reads one whole chunk into out (raw_len bytes), checking everything. */
static int read_chunk(phosimg *img, const entry *e, uint8_t *out)
{
	while (e->flags & ENTRY_PARENT) {
		img = img->parent;
		e = find(img, (uint32_t)e->location, e->chunk); /* checked at open */
	}
	char shown[PATH_MAX + 32];
	uint64_t padded = align_up(e->stored_len, DATA_ALIGN);
	bool lz4 = e->flags & ENTRY_LZ4;
	/* Raw chunks are read straight into out; only the padding and
	 * compressed bytes go through scratch. */
	scratch *s = scratch_get(img, lz4 ? padded : DATA_ALIGN);
	if (!s)
		return -ENOMEM;
	int err = 0;
	uint32_t f = (e->flags & ENTRY_STRIPE_MASK) >> ENTRY_STRIPE_SHIFT; /* checked at open */
	int fd = img->fds[f];
	uint8_t h[16];
	err = data_wait(img, fd, e->location + padded);
	if (!err && lz4) {
		err = fmt_read_all(fd, s->p, padded, e->location);
	} else if (!err) {
		err = fmt_read_hashed(fd, out, e->stored_len, e->location, h);
		if (!err)
			err = fmt_read_all(fd, s->p, padded - e->stored_len, e->location + e->stored_len);
	}
	data_shown(img, f, shown, sizeof(shown));
	if (err) {
		err = fmt_fail(err == -ENODATA ? -EBADMSG : err, "%s: offset %llu: cannot read chunk %llu of object %u",
			       shown, (unsigned long long)e->location, (unsigned long long)e->chunk, e->object);
		goto out;
	}
	const uint8_t *pad = lz4 ? s->p + e->stored_len : s->p;
	for (uint64_t i = 0; i < padded - e->stored_len; i++) {
		if (pad[i]) {
			err = fmt_fail(-EBADMSG, "%s: offset %llu: padding after chunk %llu of object %u is not zero",
				       shown, (unsigned long long)(e->location + e->stored_len + i),
				       (unsigned long long)e->chunk, e->object);
			goto out;
		}
	}
	if (lz4) {
		int n = LZ4_decompress_safe((const char *)s->p, (char *)out, (int)e->stored_len, (int)e->raw_len);
		if (n != (int)e->raw_len) {
			err = fmt_fail(-EBADMSG, "%s: offset %llu: chunk %llu of object %u does not decompress "
						 "(lz4 %d, expected %u bytes)", shown, (unsigned long long)e->location,
				       (unsigned long long)e->chunk, e->object, n, e->raw_len);
			goto out;
		}
	}
	if (lz4)
		fmt_hash(out, e->raw_len, h);
	if (memcmp(h, e->hash, 16) != 0)
		err = fmt_fail(-EBADMSG, "%s: offset %llu: chunk %llu of object %u: checksum mismatch", shown,
			       (unsigned long long)e->location, (unsigned long long)e->chunk, e->object);
out:
	scratch_put(img, s);
	return err;
}

int phosimg_read(phosimg *img, uint32_t obj, uint64_t offset, void *buf, size_t len)
{
	if (!img || (!buf && len) || obj >= img->m.info.object_count)
		return -EINVAL;
	const phosimg_object *o = &img->m.objects[obj];
	if (offset > o->size || len > o->size - offset)
		return -EINVAL;
	uint32_t cs = img->m.info.chunk_size;
	uint8_t *dst = buf;
	scratch *s = NULL;
	int err = 0;
	while (len && !err) {
		uint64_t idx = offset / cs, in = offset % cs;
		const entry *e = find(img, obj, idx);
		size_t n = e->raw_len - in < len ? e->raw_len - in : len;
		if (in == 0 && n == e->raw_len) {
			err = read_chunk(img, e, dst);
		} else {
			if (!s && !(s = scratch_get(img, cs))) {
				err = -ENOMEM;
				break;
			}
			err = read_chunk(img, e, s->p);
			if (!err)
				memcpy(dst, s->p + in, n);
		}
		dst += n;
		offset += n;
		len -= n;
	}
	if (s)
		scratch_put(img, s);
	return err;
}

struct phosimg_stream {
	phosimg *img;         /* the image streams are started on */
	XXH3_state_t *hash;
	const phosimg *owner; /* the image the chunk is stored in (a parent, maybe) */
	const entry *e;       /* the chunk started; NULL: none */
	uint32_t f;           /* its data file */
	uint64_t done;        /* bytes of it read */
	uint8_t pad[DATA_ALIGN];
};

int phosimg_stream_new(phosimg *img, phosimg_stream **out)
{
	if (!img || !out)
		return -EINVAL;
	phosimg_stream *s = calloc(1, sizeof(*s));
	if (s)
		s->hash = XXH3_createState();
	if (!s || !s->hash) {
		free(s);
		return -ENOMEM;
	}
	s->img = img;
	*out = s;
	return 0;
}

void phosimg_stream_free(phosimg_stream *s)
{
	if (!s)
		return;
	XXH3_freeState(s->hash);
	free(s);
}

int phosimg_stream_start(phosimg_stream *s, uint32_t obj, uint64_t index, uint32_t *len)
{
	s->e = NULL;
	const phosimg *img = s->img;
	const entry *e = find(img, obj, index);
	if (!e)
		return -EINVAL;
	while (e->flags & ENTRY_PARENT) {
		img = img->parent;
		e = find(img, (uint32_t)e->location, e->chunk); /* checked at open */
	}
	if (e->flags & ENTRY_LZ4)
		return -ENOTSUP;
	s->owner = img;
	s->e = e;
	s->f = (e->flags & ENTRY_STRIPE_MASK) >> ENTRY_STRIPE_SHIFT; /* checked at open */
	s->done = 0;
	XXH3_128bits_reset(s->hash);
	*len = e->raw_len;
	return 0;
}

/* Says what went wrong at offset `at` of the chunk under way's data file. */
static int stream_fail(const phosimg_stream *s, int err, uint64_t at, const char *what)
{
	char shown[PATH_MAX + 32];
	data_shown(s->owner, s->f, shown, sizeof(shown));
	return fmt_fail(err, "%s: offset %llu: chunk %llu of object %u: %s", shown, (unsigned long long)at,
			(unsigned long long)s->e->chunk, s->e->object, what);
}

int phosimg_stream_read(phosimg_stream *s, void *buf, size_t len)
{
	if (!s->e || (!buf && len) || len > s->e->stored_len - s->done)
		return -EINVAL;
	uint64_t at = s->e->location + s->done;
	int err = data_wait(s->owner, s->owner->fds[s->f], at + len);
	if (!err)
		err = fmt_read_hashing(s->owner->fds[s->f], buf, len, &at, s->hash);
	s->done = at - s->e->location;
	return err ? stream_fail(s, err == -ENODATA ? -EBADMSG : err, at, "cannot read") : 0;
}

int phosimg_stream_end(phosimg_stream *s)
{
	if (!s->e)
		return -EINVAL;
	const entry *e = s->e;
	int err = 0;
	if (s->done != e->stored_len) {
		err = -EINVAL;
		goto out;
	}
	uint64_t padding = align_up(e->stored_len, DATA_ALIGN) - e->stored_len;
	err = data_wait(s->owner, s->owner->fds[s->f], e->location + e->stored_len + padding);
	if (!err)
		err = fmt_read_all(s->owner->fds[s->f], s->pad, padding, e->location + e->stored_len);
	if (err) {
		err = stream_fail(s, err == -ENODATA ? -EBADMSG : err, e->location + e->stored_len,
				  "cannot read its padding");
		goto out;
	}
	for (uint64_t i = 0; i < padding; i++)
		if (s->pad[i]) {
			err = stream_fail(s, -EBADMSG, e->location + e->stored_len + i, "the padding after it is not zero");
			goto out;
		}
	uint8_t h[16];
	XXH128_hash_t d = XXH3_128bits_digest(s->hash);
	put64(h, d.low64);
	put64(h + 8, d.high64);
	if (memcmp(h, e->hash, 16) != 0)
		err = stream_fail(s, -EBADMSG, e->location, "checksum mismatch");
out:
	s->e = NULL;
	return err;
}

/* Whether f holds CRIU's page data (pages-*.img), by its name. */
static bool criu_page_data(const char *name)
{
	size_t n = strlen(name);
	return !strncmp(name, "pages-", 6) && n > 10 && !strcmp(name + n - 4, ".img");
}

/* Checks CRIU file f's checksum (dfd: the CRIU folder), reading it a
 * scratch buffer at a time. Errors: -EBADMSG (cut, or a mismatch), -ENOENT, -ENOMEM, with the
 * calling thread's last error naming the file. */
static int sum_file(phosimg *img, int dfd, const phosimg_criu_file *f)
{
	int fd = openat(dfd, f->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return fmt_fail(-ENOENT, "%s/%s: missing", img->criu_path, f->name);
	scratch *s = scratch_get(img, 1u << 20);
	XXH3_state_t *st3 = s ? XXH3_createState() : NULL;
	int err = st3 ? 0 : fmt_fail(-ENOMEM, "out of memory");
	if (st3)
		XXH3_128bits_reset(st3);
	for (uint64_t off = 0; !err && off < f->size;) {
		size_t n = f->size - off < s->cap ? (size_t)(f->size - off) : s->cap;
		uint64_t at = off;
		if (fmt_read_hashing(fd, s->p, n, &off, st3))
			err = fmt_fail(-EBADMSG, "%s/%s: offset %llu: cannot read", img->criu_path, f->name,
				       (unsigned long long)at);
	}
	if (!err) {
		XXH128_hash_t h = XXH3_128bits_digest(st3);
		uint8_t hb[16];
		put64(hb, h.low64);
		put64(hb + 8, h.high64);
		if (memcmp(hb, f->hash, 16) != 0)
			err = fmt_fail(-EBADMSG, "%s/%s: checksum mismatch", img->criu_path, f->name);
	}
	if (st3)
		XXH3_freeState(st3);
	if (s)
		scratch_put(img, s);
	close(fd);
	return err;
}

/* The checksums of several files, by up to SUM_THREADS threads: each
 * takes the next file. */
#define SUM_THREADS 4

typedef struct sums {
	phosimg *img;
	int dfd;
	const uint32_t *which; /* indexes into the manifest's CRIU files */
	uint32_t n;
	_Atomic uint32_t next;
	int *errs;	      /* each file's result */
	char (*msgs)[512];    /* and its message */
} sums;

static void *sum_files(void *arg)
{
	sums *j = arg;
	for (uint32_t k; (k = atomic_fetch_add(&j->next, 1)) < j->n;) {
		j->errs[k] = sum_file(j->img, j->dfd, &j->img->m.criu[j->which[k]]);
		if (j->errs[k])
			snprintf(j->msgs[k], sizeof(j->msgs[k]), "%s", phosimg_last_error());
	}
	return NULL;
}

/* Checks the checksums of the files `which` names (n of them), beside each
 * other; the error of the first in the manifest's order that fails. */
static int sum_all(phosimg *img, int dfd, const uint32_t *which, uint32_t n)
{
	if (!n)
		return 0;
	sums j = { .img = img, .dfd = dfd, .which = which, .n = n };
	j.errs = calloc(n, sizeof(*j.errs));
	j.msgs = calloc(n, sizeof(*j.msgs));
	if (!j.errs || !j.msgs) {
		free(j.errs);
		free(j.msgs);
		return fmt_fail(-ENOMEM, "out of memory");
	}
	pthread_t th[SUM_THREADS - 1];
	int made = 0;
	for (uint32_t t = 1; t < SUM_THREADS && t < n; t++)
		if (pthread_create(&th[made], NULL, sum_files, &j) == 0)
			made++;
	sum_files(&j);
	for (int t = 0; t < made; t++)
		pthread_join(th[t], NULL);
	int err = 0;
	for (uint32_t k = 0; k < n && !err; k++)
		if (j.errs[k])
			err = fmt_fail(j.errs[k], "%s", j.msgs[k]);
	free(j.errs);
	free(j.msgs);
	return err;
}

/* Checks the CRIU files against the manifest: the listed ones, of their
 * sizes (and the checksums of those sums names, several files at once),
 * and no others. */
static int verify_criu(phosimg *img, unsigned sums_of)
{
	const manifest *m = &img->m;
	int dfd = openat(img->dirfd, CRIU_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0 && (errno == ELOOP || errno == ENOTDIR))
		return fmt_fail(-EBADMSG, "%s: not a folder of the image's own (a symbolic link, or a file)",
				img->criu_path);
	if (dfd < 0)
		return m->info.criu_file_count ? fmt_fail(-errno, "%s: cannot open: %m", img->criu_path) : 0;
	uint32_t *which = calloc(m->info.criu_file_count ? m->info.criu_file_count : 1, sizeof(*which));
	uint32_t n = 0;
	int err = which ? 0 : fmt_fail(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < m->info.criu_file_count && !err; i++) {
		const phosimg_criu_file *f = &m->criu[i];
		struct stat st;
		if (fstatat(dfd, f->name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			err = fmt_fail(-ENOENT, "%s/%s: missing", img->criu_path, f->name);
		else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size)
			err = fmt_fail(-EBADMSG, "%s/%s: %lld bytes, the manifest says %llu", img->criu_path, f->name,
				       (long long)st.st_size, (unsigned long long)f->size);
		else if (sums_of & (criu_page_data(f->name) ? PHOSIMG_SUMS_PAGES : PHOSIMG_SUMS_REST))
			which[n++] = i;
	}
	/* No file may be there that the manifest does not list. */
	DIR *d = err ? NULL : fdopendir(dup(dfd));
	for (struct dirent *de; d && !err && (de = readdir(d));) {
		/* CRIU's statistics of a restore, which a CRIU run without a
		 * work directory of its own leaves in its images folder. */
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, "stats-restore"))
			continue;
		bool listed = false;
		for (uint32_t i = 0; i < m->info.criu_file_count && !listed; i++)
			listed = !strcmp(m->criu[i].name, de->d_name);
		if (!listed)
			err = fmt_fail(-EBADMSG, "%s/%s: not in the manifest", img->criu_path, de->d_name);
	}
	if (d)
		closedir(d);
	if (!err)
		err = sum_all(img, dfd, which, n);
	free(which);
	close(dfd);
	return err;
}

int phosimg_verify_criu(phosimg *img, unsigned sums)
{
	if (!img)
		return -EINVAL;
	fmt_clear_error();
	return verify_criu(img, sums);
}

int phosimg_verify(phosimg *img)
{
	if (!img)
		return -EINVAL;
	fmt_clear_error();
	for (; img; img = img->parent) {
		scratch *s = scratch_get(img, img->m.info.chunk_size);
		if (!s)
			return -ENOMEM;
		int err = 0;
		for (uint64_t k = 0; k < img->m.info.chunk_count && !err; k++)
			if (!(img->entries[k].flags & ENTRY_PARENT))
				err = read_chunk(img, &img->entries[k], s->p);
		scratch_put(img, s);
		if (!err)
			err = verify_criu(img, PHOSIMG_SUMS_ALL);
		if (err)
			return err;
	}
	return 0;
}
