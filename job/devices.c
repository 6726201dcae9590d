/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Restore onto other GPUs: which of this machine's GPUs each of an image's
 * GPUs goes to (doc/ARCHITECTURE.md, "The restore protocols").
 *
 * The image lists the GPUs the checkpointing phosfs saw (ordinal, UUID,
 * chip). A spec "OLD=NEW,…" names some moves; each side is an ordinal or
 * a UUID (GPU-…). Every GPU of the image not named goes:
 *   - to the GPU with its UUID, when this machine has it and it is free;
 *   - else to a free GPU of the same chip (its own ordinal first);
 *   - else nowhere, which is an error only if the image holds memory on it.
 * The driver restores only onto the same chip, and no two GPUs onto one.
 *
 * The driver is given gpuPairs (every GPU of the image that has a place)
 * when a spec was given, or when any GPU moved; otherwise nothing, as
 * before. Every GPU, not only the moved ones: the r580 driver refuses
 * (CUDA_ERROR_INVALID_VALUE) pairs that leave out a GPU of the process,
 * even one it never used (tests/gpu/driver_moves_process_to_other_gpu.c,
 * on two H200s). Whether it accepts a list without a GPU this machine
 * lacks (the "nowhere" case) is not known: no machine here had fewer
 * GPUs than an image.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/driver.h"
#include "restore.h"

/* One side of a move: an ordinal, or a UUID. */
typedef struct gpu_ref {
	int ordinal; /* -1: by UUID */
	uint8_t uuid[16];
} gpu_ref;

static int parse_ref(const char *s, size_t len, gpu_ref *r)
{
	memset(r, 0, sizeof(*r));
	r->ordinal = -1;
	if (len && len <= 2 && strspn(s, "0123456789") >= len) {
		r->ordinal = atoi(s);
		return r->ordinal < PHOSIMG_DEVICES_MAX ? 0 : -EINVAL;
	}
	if (len < 4 || strncmp(s, "GPU-", 4))
		return -EINVAL;
	int nib = 0;
	for (size_t i = 4; i < len; i++) {
		if (s[i] == '-')
			continue;
		if (!isxdigit((unsigned char)s[i]) || nib == 32)
			return -EINVAL;
		int v = isdigit((unsigned char)s[i]) ? s[i] - '0' : tolower((unsigned char)s[i]) - 'a' + 10;
		r->uuid[nib / 2] |= (uint8_t)(nib % 2 ? v : v << 4);
		nib++;
	}
	return nib == 32 ? 0 : -EINVAL;
}

/* Splits spec into moves; n of them. */
static int parse(const char *spec, gpu_ref *from, gpu_ref *to, int cap, int *n, perr *er)
{
	*n = 0;
	if (!spec || !*spec)
		return pr_err(er, -EINVAL, "an empty --device list (expected OLD=NEW,…)");
	if (strlen(spec) > RESTORE_DEVICES_MAX)
		return pr_err(er, -EINVAL, "a --device list longer than %d bytes", RESTORE_DEVICES_MAX);
	for (const char *p = spec; *p;) {
		size_t len = strcspn(p, ",");
		const char *eq = memchr(p, '=', len);
		if (*n == cap)
			return pr_err(er, -EINVAL, "more than %d moves in the --device list", cap);
		if (!eq || parse_ref(p, (size_t)(eq - p), &from[*n]) ||
		    parse_ref(eq + 1, len - (size_t)(eq + 1 - p), &to[*n]))
			return pr_err(er, -EINVAL,
				      "bad move '%.*s' in the --device list (expected OLD=NEW, each an ordinal or GPU-UUID)",
				      (int)(len > 80 ? 80 : len), p);
		(*n)++;
		p += len;
		if (*p == ',' && !*++p)
			return pr_err(er, -EINVAL, "the --device list ends with a comma");
	}
	return 0;
}

int restore_devices_check(const char *spec, perr *er)
{
	gpu_ref from[PHOSIMG_DEVICES_MAX], to[PHOSIMG_DEVICES_MAX];
	int n;
	return parse(spec, from, to, PHOSIMG_DEVICES_MAX, &n, er);
}

/* "GPU-" and the UUID, as nvidia-smi names a GPU (out: 48 bytes). */
static void uuid_text(const uint8_t *u, char *out)
{
	memcpy(out, "GPU-", 4);
	phosimg_uuid_text(u, out + 4);
}

/* The index in devs (n of them) that ref names, or -1. */
static int find(const phosimg_device *devs, uint32_t n, const gpu_ref *ref)
{
	for (uint32_t i = 0; i < n; i++)
		if (ref->ordinal >= 0 ? devs[i].ordinal == (uint32_t)ref->ordinal : !memcmp(devs[i].uuid, ref->uuid, 16))
			return (int)i;
	return -1;
}

static void ref_text(const gpu_ref *r, char *out, size_t len)
{
	if (r->ordinal >= 0)
		snprintf(out, len, "%d", r->ordinal);
	else
		uuid_text(r->uuid, out);
}

/* A placement under way: the image's GPUs (old) onto this machine's
 * (here). */
typedef struct placing {
	const phosimg_device *old;
	uint32_t nold;
	phosimg_device here[PHOSIMG_DEVICES_MAX];
	uint32_t nhere;
	uint64_t bytes[PHOSIMG_DEVICES_MAX]; /* the image's bytes on each old GPU */
	int dest[PHOSIMG_DEVICES_MAX];       /* per old GPU: an index into here, or -1 */
	bool taken[PHOSIMG_DEVICES_MAX];     /* per GPU here */
} placing;

/* Places old GPU k on GPU h here. */
static void put(placing *p, uint32_t k, int h)
{
	p->dest[k] = h;
	p->taken[h] = true;
}

/* The moves asked for. */
static int place_asked(placing *p, const gpu_ref *from, const gpu_ref *to, int nmoves, perr *er)
{
	char a[48], b[48];
	for (int i = 0; i < nmoves; i++) {
		int k = find(p->old, p->nold, &from[i]), h = find(p->here, p->nhere, &to[i]);
		ref_text(&from[i], a, sizeof(a));
		ref_text(&to[i], b, sizeof(b));
		if (k < 0)
			return pr_err(er, -EINVAL, "the image has no GPU %s (it has %u, ordinals 0 to %u)", a,
				      p->nold, p->nold - 1);
		if (h < 0)
			return pr_err(er, -ENODEV, "this machine has no GPU %s (it has %u, ordinals 0 to %u)",
				      b, p->nhere, p->nhere - 1);
		if (p->dest[k] >= 0)
			return pr_err(er, -EINVAL, "the image's GPU %s is moved twice", a);
		if (p->taken[h])
			return pr_err(er, -EINVAL, "two of the image's GPUs are moved onto GPU %s", b);
		if (strcmp(p->old[k].name, p->here[h].name))
			return pr_err(er, -EINVAL,
				      "GPU %s is an %s, but the image's GPU %s was an %s: the driver restores only onto the same chip",
				      b, p->here[h].name, a, p->old[k].name);
		put(p, (uint32_t)k, h);
	}
	return 0;
}

/* The rest: the same GPU if it is here and free, else one of its chip
 * (its own ordinal first). A GPU that holds memory and finds none
 * fails. */
static int place_rest(placing *p, perr *er)
{
	const phosimg_device *old = p->old;
	for (uint32_t k = 0; k < p->nold; k++) {
		gpu_ref self = { .ordinal = -1 };
		memcpy(self.uuid, old[k].uuid, 16);
		int h = p->dest[k] < 0 ? find(p->here, p->nhere, &self) : -1;
		if (h >= 0 && !p->taken[h])
			put(p, k, h);
	}
	for (uint32_t k = 0; k < p->nold; k++) {
		if (p->dest[k] >= 0)
			continue;
		int h = -1;
		uint32_t o = old[k].ordinal;
		if (o < p->nhere && !p->taken[o] && !strcmp(p->here[o].name, old[k].name))
			h = (int)o;
		for (uint32_t j = 0; h < 0 && j < p->nhere; j++)
			if (!p->taken[j] && !strcmp(p->here[j].name, old[k].name))
				h = (int)j;
		if (h >= 0) {
			put(p, k, h);
		} else if (p->bytes[o < PHOSIMG_DEVICES_MAX ? o : 0]) {
			char a[48];
			uuid_text(old[k].uuid, a);
			return pr_err(er, -ENODEV,
				      "the image's GPU %u (%s, %s) holds device memory, and this machine has no free %s: "
				      "name a GPU for it with --device %u=NEW",
				      o, old[k].name, a, old[k].name, o);
		}
	}
	return 0;
}

/* The placement as the driver's gpuPairs (every GPU placed), and in
 * words into desc. */
static void pairs_of(const placing *p, engine_devmap *map, char *desc, size_t desclen)
{
	map->pairs = true;
	size_t at = 0;
	for (uint32_t k = 0; k < p->nold; k++) {
		int h = p->dest[k];
		if (h < 0)
			continue;
		map->to[k] = (int)p->here[h].ordinal;
		memcpy(map->old[map->npairs], p->old[k].uuid, 16);
		memcpy(map->now[map->npairs], p->here[h].uuid, 16);
		map->npairs++;
		char a[48], b[48];
		uuid_text(p->old[k].uuid, a);
		uuid_text(p->here[h].uuid, b);
		if (desc && at < desclen) {
			int w = snprintf(desc + at, desclen - at, "%s%u (%s) -> %u (%s)", at ? ", " : "",
					 p->old[k].ordinal, a, p->here[h].ordinal, b);
			at += w > 0 ? (size_t)w : 0;
		}
	}
}

int restore_devices(const phosimg_info *in, const char *spec, engine_devmap *map, char *desc, size_t desclen,
		    perr *er)
{
	memset(map, 0, sizeof(*map));
	if (desc && desclen)
		*desc = 0;
	placing p = { .old = in->meta.devices, .nold = in->meta.device_count };
	map->n = p.nold;
	for (uint32_t k = 0; k < p.nold; k++) {
		map->to[k] = (int)p.old[k].ordinal;
		p.dest[k] = -1;
	}
	gpu_ref from[PHOSIMG_DEVICES_MAX], to[PHOSIMG_DEVICES_MAX];
	int nmoves = 0;
	if (spec && *spec) {
		int e = parse(spec, from, to, PHOSIMG_DEVICES_MAX, &nmoves, er);
		if (e)
			return e;
	}
	if (!p.nold)
		return nmoves ? pr_err(er, -EINVAL,
				       "the image records no GPUs, so --device has nothing to move")
			      : 0;
	if (driver_devices(p.here, PHOSIMG_DEVICES_MAX, &p.nhere) || !p.nhere)
		return pr_err(er, -EIO, "cannot list this machine's GPUs");
	for (uint32_t i = 0; i < in->object_count; i++)
		if (in->objects[i].device < PHOSIMG_DEVICES_MAX)
			p.bytes[in->objects[i].device] += in->objects[i].size;
	int e = place_asked(&p, from, to, nmoves, er);
	if (!e)
		e = place_rest(&p, er);
	if (e)
		return e;
	bool moved = nmoves > 0;
	for (uint32_t k = 0; k < p.nold; k++)
		if (p.dest[k] >= 0 && memcmp(p.here[p.dest[k]].uuid, p.old[k].uuid, 16))
			moved = true;
	if (moved)
		pairs_of(&p, map, desc, desclen);
	return 0;
}
