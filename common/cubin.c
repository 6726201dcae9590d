/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reading CUDA device code images (cubin.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cubin.h"

#define EM_CUDA 190
#define STO_CUDA_ENTRY 0x10
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIFMT_SVAL 4
#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u

static void kernel_free(cubin_kernel *k)
{
	if (k) {
		free(k->name);
		free(k);
	}
}

void cubin_free(cubin *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		kernel_free(c->kernels[i]);
	free(c->kernels);
	c->kernels = NULL;
	c->n = 0;
}

static int cubin_add(cubin *m, const char *name, size_t len)
{
	if (len == 0 || len >= CUBIN_MAX_NAME)
		return -EINVAL;
	cubin_kernel **v = realloc(m->kernels, (m->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	m->kernels = v;
	cubin_kernel *k = calloc(1, sizeof(*k));
	if (!k || !(k->name = strndup(name, len))) {
		free(k);
		return -ENOMEM;
	}
	k->nparams = -1;
	m->kernels[m->n++] = k;
	return 0;
}

static cubin_kernel *find_mut(const cubin *m, const char *name)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->kernels[i]->name, name) == 0)
			return m->kernels[i];
	return NULL;
}

const cubin_kernel *cubin_find(const cubin *c, const char *name)
{
	return find_mut(c, name);
}


static uint16_t rd16(const unsigned char *p)
{
	uint16_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint32_t rd32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

typedef struct elf_view {
	const unsigned char *d;
	size_t size;
	uint64_t shoff;
	uint16_t shentsize, shnum, shstrndx;
} elf_view;

/* Returns a pointer to section i's header, or NULL when out of bounds. */
static const unsigned char *elf_shdr(const elf_view *e, size_t i)
{
	if (i >= e->shnum)
		return NULL;
	uint64_t off = e->shoff + i * (uint64_t)e->shentsize;
	return off + 64 <= e->size ? e->d + off : NULL;
}

/* Section data bounds, or false when they lie outside the image. */
static bool elf_sdata(const elf_view *e, const unsigned char *sh, const unsigned char **p, size_t *n)
{
	uint32_t type = rd32(sh + 4);
	uint64_t off = rd64(sh + 24), size = rd64(sh + 32);
	if (type == 8 /* SHT_NOBITS */) {
		*p = NULL;
		*n = 0;
		return true;
	}
	if (off > e->size || size > e->size - off)
		return false;
	*p = e->d + off;
	*n = (size_t)size;
	return true;
}

static const char *elf_str(const unsigned char *tab, size_t n, uint32_t off, size_t *len)
{
	if (off >= n)
		return NULL;
	const unsigned char *end = memchr(tab + off, 0, n - off);
	if (!end)
		return NULL;
	*len = (size_t)(end - (tab + off));
	return (const char *)tab + off;
}

/* Size of an ELF image from its headers (the driver gets no length). */
static size_t elf_extent(const unsigned char *d)
{
	uint64_t shoff = rd64(d + 0x28);
	uint16_t shentsize = rd16(d + 0x3a), shnum = rd16(d + 0x3c);
	uint64_t end = shoff + (uint64_t)shentsize * shnum;
	if (shentsize != 64 || end > (1ull << 31))
		return 0;
	for (uint16_t i = 0; i < shnum; i++) {
		const unsigned char *sh = d + shoff + (uint64_t)i * 64;
		if (rd32(sh + 4) == 8)
			continue;
		uint64_t e = rd64(sh + 24) + rd64(sh + 32);
		if (e > (1ull << 31))
			return 0;
		if (e > end)
			end = e;
	}
	return (size_t)end;
}

/* Reads one kernel's parameter layout from .nv.info.<name>. */
static void parse_nv_info(cubin_kernel *f, const unsigned char *p, size_t n)
{
	int count = 0;
	size_t i = 0, total = 0;
	while (i + 4 <= n) {
		unsigned fmt = p[i], attr = p[i + 1];
		size_t len = fmt == EIFMT_SVAL ? rd16(p + i + 2) : 0;
		if (i + 4 + len > n)
			return; /* malformed: keep the layout unknown */
		if (attr == EIATTR_KPARAM_INFO && fmt == EIFMT_SVAL && len >= 12) {
			uint16_t ordinal = rd16(p + i + 8), offset = rd16(p + i + 10);
			uint32_t flags = rd32(p + i + 12);
			uint16_t size = (uint16_t)((flags >> 18) & 0x3fff);
			if (ordinal >= CUBIN_MAX_PARAMS)
				return;
			f->params[ordinal] = (cubin_param){ offset, size };
			if (ordinal + 1 > count)
				count = ordinal + 1;
			if ((size_t)offset + size > total)
				total = (size_t)offset + size;
		} else if (attr == EIATTR_CBANK_PARAM_SIZE && fmt != EIFMT_SVAL) {
			if (rd16(p + i + 2) > total)
				total = rd16(p + i + 2);
		}
		i += 4 + len;
	}
	f->nparams = count;
	f->param_bytes = total;
}

static int parse_elf(cubin *m, const unsigned char *d, size_t size)
{
	if (size < 64 || memcmp(d, "\177ELF", 4) != 0 || d[4] != 2 /* 64-bit */ || d[5] != 1 /* LE */)
		return -EINVAL;
	if (rd16(d + 0x12) != EM_CUDA)
		return -EINVAL;
	elf_view e = { d, size, rd64(d + 0x28), rd16(d + 0x3a), rd16(d + 0x3c), rd16(d + 0x3e) };
	if (e.shentsize != 64)
		return -EINVAL;
	const unsigned char *shstr_h = elf_shdr(&e, e.shstrndx), *shstr;
	size_t shstr_n;
	if (!shstr_h || !elf_sdata(&e, shstr_h, &shstr, &shstr_n))
		return -EINVAL;

	/* Kernels: function symbols with the CUDA entry flag. */
	for (size_t i = 0; i < e.shnum; i++) {
		const unsigned char *sh = elf_shdr(&e, i), *syms, *strs, *strh;
		size_t nsyms, nstrs;
		if (!sh)
			return -EINVAL;
		if (rd32(sh + 4) != 2 /* SHT_SYMTAB */)
			continue;
		if (!elf_sdata(&e, sh, &syms, &nsyms) || !(strh = elf_shdr(&e, rd32(sh + 40))) ||
		    !elf_sdata(&e, strh, &strs, &nstrs))
			return -EINVAL;
		for (size_t s = 0; s + 24 <= nsyms; s += 24) {
			const unsigned char *sym = syms + s;
			size_t len;
			if ((sym[4] & 0xf) != 2 /* STT_FUNC */ || !(sym[5] & STO_CUDA_ENTRY))
				continue;
			const char *name = elf_str(strs, nstrs, rd32(sym), &len);
			if (!name)
				return -EINVAL;
			int r = cubin_add(m, name, len);
			if (r)
				return r;
		}
	}
	/* Parameter layouts. */
	for (size_t i = 0; i < e.shnum; i++) {
		const unsigned char *sh = elf_shdr(&e, i), *data;
		size_t len, n;
		const char *sname = elf_str(shstr, shstr_n, rd32(sh), &len);
		if (!sname || strncmp(sname, ".nv.info.", 9) != 0)
			continue;
		cubin_kernel *f = find_mut(m, sname + 9);
		if (f && elf_sdata(&e, sh, &data, &n))
			parse_nv_info(f, data, n);
	}
	return m->n ? 0 : -ENOENT;
}

static int parse_ptx(cubin *m, const unsigned char *d, size_t size)
{
	const char *s = (const char *)d, *end = s + size;
	const char *p = s;
	while ((p = memmem(p, (size_t)(end - p), ".entry", 6)) != NULL) {
		p += 6;
		if (p >= end || (*p != ' ' && *p != '\t'))
			continue;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		const char *n = p;
		while (p < end && *p != '(' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
			p++;
		int r = cubin_add(m, n, (size_t)(p - n));
		if (r)
			return r;
	}
	return m->n ? 0 : -ENOENT;
}

static bool looks_like_ptx(const unsigned char *d, size_t size)
{
	return size > 8 && memmem(d, size, ".version", 8) && memmem(d, size, ".target", 7);
}

static int parse_fatbin(cubin *m, const unsigned char *d, size_t size)
{
	if (size < 16 || rd32(d) != FATBIN_MAGIC)
		return -EINVAL;
	uint16_t hsize = rd16(d + 6);
	uint64_t fsize = rd64(d + 8);
	if (hsize < 16 || fsize > size - hsize)
		return -EINVAL;
	const unsigned char *p = d + hsize, *end = d + hsize + fsize, *ptx = NULL;
	size_t ptx_n = 0;
	while (end - p >= 16) {
		uint16_t kind = rd16(p);
		uint32_t ehsize = rd32(p + 4);
		uint64_t psize = rd64(p + 8);
		if (ehsize < 16 || ehsize > (size_t)(end - p) || psize > (size_t)(end - p) - ehsize)
			return -EINVAL;
		const unsigned char *payload = p + ehsize;
		if (kind == 2 && psize >= 64 && memcmp(payload, "\177ELF", 4) == 0) {
			int r = parse_elf(m, payload, psize);
			if (r != -EINVAL)
				return r;
		} else if (kind == 1 && !ptx && looks_like_ptx(payload, psize)) {
			ptx = payload;
			ptx_n = psize;
		}
		p += ehsize + psize;
	}
	/* No usable cubin (compressed, or none): fall back to PTX text. */
	return ptx ? parse_ptx(m, ptx, ptx_n) : -ENOENT;
}

/* Parses an image of known size. */
static int parse_image(cubin *m, const unsigned char *d, size_t size)
{
	if (size >= 4 && memcmp(d, "\177ELF", 4) == 0)
		return parse_elf(m, d, size);
	if (size >= 4 && rd32(d) == FATBIN_MAGIC)
		return parse_fatbin(m, d, size);
	if (looks_like_ptx(d, size))
		return parse_ptx(m, d, size);
	return -EINVAL;
}

/* Parses an image the caller passed by pointer only. */
static int parse_unsized(cubin *m, const void *image)
{
	const unsigned char *d = image;
	if (rd32(d) == FATBIN_WRAPPER_MAGIC) {
		const void *inner;
		memcpy(&inner, d + 8, sizeof(inner));
		return inner ? parse_unsized(m, inner) : -EINVAL;
	}
	if (memcmp(d, "\177ELF", 4) == 0) {
		if (d[4] != 2 || rd16(d + 0x12) != EM_CUDA)
			return -EINVAL;
		size_t n = elf_extent(d);
		return n ? parse_elf(m, d, n) : -EINVAL;
	}
	if (rd32(d) == FATBIN_MAGIC) {
		uint64_t n = rd64(d + 8) + rd16(d + 6);
		return n < (1ull << 31) ? parse_fatbin(m, d, (size_t)n) : -EINVAL;
	}
	return parse_image(m, d, strlen(image));
}


int cubin_parse(const void *image, size_t size, cubin *out)
{
	if (!image || !out)
		return -EINVAL;
	cubin c = { 0 };
	int e = size ? parse_image(&c, image, size) : parse_unsized(&c, image);
	if (e) {
		cubin_free(&c);
		return e;
	}
	*out = c;
	return 0;
}
