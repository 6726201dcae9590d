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
static int parse(const char *spec, gpu_ref *from, gpu_ref *to, int cap, int *n, char *err, size_t errlen)
{
	*n = 0;
	if (!spec || !*spec)
		return engine_fail(-EINVAL, err, errlen, "an empty --device list (expected OLD=NEW,…)");
	if (strlen(spec) > RESTORE_DEVICES_MAX)
		return engine_fail(-EINVAL, err, errlen, "a --device list longer than %d bytes", RESTORE_DEVICES_MAX);
	for (const char *p = spec; *p;) {
		size_t len = strcspn(p, ",");
		const char *eq = memchr(p, '=', len);
		if (*n == cap)
			return engine_fail(-EINVAL, err, errlen, "more than %d moves in the --device list", cap);
		if (!eq || parse_ref(p, (size_t)(eq - p), &from[*n]) ||
		    parse_ref(eq + 1, len - (size_t)(eq + 1 - p), &to[*n]))
			return engine_fail(-EINVAL, err, errlen,
					   "bad move '%.*s' in the --device list (expected OLD=NEW, each an ordinal or GPU-UUID)",
					   (int)(len > 80 ? 80 : len), p);
		(*n)++;
		p += len;
		if (*p == ',' && !*++p)
			return engine_fail(-EINVAL, err, errlen, "the --device list ends with a comma");
	}
	return 0;
}

int restore_devices_check(const char *spec, char *err, size_t errlen)
{
	gpu_ref from[PHOSIMG_DEVICES_MAX], to[PHOSIMG_DEVICES_MAX];
	int n;
	return parse(spec, from, to, PHOSIMG_DEVICES_MAX, &n, err, errlen);
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

int restore_devices(const phosimg_info *in, const char *spec, engine_devmap *map, char *desc, size_t desclen,
		    char *err, size_t errlen)
{
	memset(map, 0, sizeof(*map));
	if (desc && desclen)
		*desc = 0;
	const phosimg_device *old = in->meta.devices;
	uint32_t nold = in->meta.device_count;
	map->n = nold;
	for (uint32_t k = 0; k < nold; k++)
		map->to[k] = (int)old[k].ordinal;
	gpu_ref from[PHOSIMG_DEVICES_MAX], to[PHOSIMG_DEVICES_MAX];
	int nmoves = 0;
	if (spec && *spec) {
		int e = parse(spec, from, to, PHOSIMG_DEVICES_MAX, &nmoves, err, errlen);
		if (e)
			return e;
	}
	if (!nold) {
		if (nmoves)
			return engine_fail(-EINVAL, err, errlen, "the image records no GPUs, so --device has nothing to move");
		return 0;
	}
	phosimg_device here[PHOSIMG_DEVICES_MAX];
	uint32_t nhere = 0;
	if (driver_devices(here, PHOSIMG_DEVICES_MAX, &nhere) || !nhere)
		return engine_fail(-EIO, err, errlen, "cannot list this machine's GPUs");
	/* The bytes the image holds on each of its GPUs. */
	uint64_t bytes[PHOSIMG_DEVICES_MAX] = { 0 };
	for (uint32_t i = 0; i < in->object_count; i++)
		if (in->objects[i].device < PHOSIMG_DEVICES_MAX)
			bytes[in->objects[i].device] += in->objects[i].size;
	int dest[PHOSIMG_DEVICES_MAX]; /* index into here, or -1 */
	bool taken[PHOSIMG_DEVICES_MAX] = { false };
	for (uint32_t k = 0; k < nold; k++)
		dest[k] = -1;
	char a[48], b[48];
	for (int i = 0; i < nmoves; i++) {
		int k = find(old, nold, &from[i]), h = find(here, nhere, &to[i]);
		ref_text(&from[i], a, sizeof(a));
		ref_text(&to[i], b, sizeof(b));
		if (k < 0)
			return engine_fail(-EINVAL, err, errlen, "the image has no GPU %s (it has %u, ordinals 0 to %u)", a,
					   nold, nold - 1);
		if (h < 0)
			return engine_fail(-ENODEV, err, errlen, "this machine has no GPU %s (it has %u, ordinals 0 to %u)",
					   b, nhere, nhere - 1);
		if (dest[k] >= 0)
			return engine_fail(-EINVAL, err, errlen, "the image's GPU %s is moved twice", a);
		if (taken[h])
			return engine_fail(-EINVAL, err, errlen, "two of the image's GPUs are moved onto GPU %s", b);
		if (strcmp(old[k].name, here[h].name))
			return engine_fail(-EINVAL, err, errlen,
					   "GPU %s is an %s, but the image's GPU %s was an %s: the driver restores only onto the same chip",
					   b, here[h].name, a, old[k].name);
		dest[k] = h;
		taken[h] = true;
	}
	/* The rest: the same GPU if it is here and free, else one of its chip. */
	for (uint32_t k = 0; k < nold; k++) {
		if (dest[k] >= 0)
			continue;
		gpu_ref self = { .ordinal = -1 };
		memcpy(self.uuid, old[k].uuid, 16);
		int h = find(here, nhere, &self);
		if (h >= 0 && !taken[h]) {
			dest[k] = h;
			taken[h] = true;
		}
	}
	for (uint32_t k = 0; k < nold; k++) {
		if (dest[k] >= 0)
			continue;
		int h = -1;
		if (old[k].ordinal < nhere && !taken[old[k].ordinal] && !strcmp(here[old[k].ordinal].name, old[k].name))
			h = (int)old[k].ordinal;
		for (uint32_t j = 0; h < 0 && j < nhere; j++)
			if (!taken[j] && !strcmp(here[j].name, old[k].name))
				h = (int)j;
		if (h >= 0) {
			dest[k] = h;
			taken[h] = true;
		} else if (bytes[old[k].ordinal < PHOSIMG_DEVICES_MAX ? old[k].ordinal : 0]) {
			uuid_text(old[k].uuid, a);
			return engine_fail(-ENODEV, err, errlen,
					   "the image's GPU %u (%s, %s) holds device memory, and this machine has no free %s: "
					   "name a GPU for it with --device %u=NEW",
					   old[k].ordinal, old[k].name, a, old[k].name, old[k].ordinal);
		}
	}
	bool moved = nmoves > 0;
	for (uint32_t k = 0; k < nold; k++)
		if (dest[k] >= 0 && memcmp(here[dest[k]].uuid, old[k].uuid, 16))
			moved = true;
	if (!moved)
		return 0;
	map->pairs = true;
	size_t at = 0;
	for (uint32_t k = 0; k < nold; k++) {
		if (dest[k] < 0)
			continue;
		map->to[k] = (int)here[dest[k]].ordinal;
		memcpy(map->old[map->npairs], old[k].uuid, 16);
		memcpy(map->now[map->npairs], here[dest[k]].uuid, 16);
		map->npairs++;
		uuid_text(old[k].uuid, a);
		uuid_text(here[dest[k]].uuid, b);
		if (desc && at < desclen) {
			int w = snprintf(desc + at, desclen - at, "%s%u (%s) -> %u (%s)", at ? ", " : "", old[k].ordinal,
					 a, here[dest[k]].ordinal, b);
			at += w > 0 ? (size_t)w : 0;
		}
	}
	return 0;
}
