/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Device memory mapped in the job's own context (mapping.h).
 */
#include <errno.h>
#include <string.h>

#include "mapping.h"

static void unmap(mapping *m)
{
	if (m->va) {
		cu.cuMemUnmap(m->va, m->size);
		cu.cuMemAddressFree(m->va, m->size);
	}
	if (m->h)
		cu.cuMemRelease(m->h);
	memset(m, 0, sizeof(*m));
}

void mapping_unmap_all(mapping *maps, int n)
{
	for (int k = 0; k < n; k++) {
		if (maps[k].va || maps[k].h)
			driver_use(maps[k].device, NULL);
		unmap(&maps[k]);
	}
}

int mapping_map(mapping *m, CUmemGenericAllocationHandle h, size_t size, int dev, perr *er)
{
	m->h = h;
	m->size = size;
	m->len = size;
	m->device = dev;
	CUresult r = cu.cuMemAddressReserve(&m->va, size, 0, 0, 0);
	if (r) {
		m->va = 0;
		return driver_fail(r, er, "reserving an address range");
	}
	r = cu.cuMemMap(m->va, size, 0, h, 0);
	if (r) {
		cu.cuMemAddressFree(m->va, size);
		m->va = 0;
		return driver_fail(r, er, "mapping device memory");
	}
	CUmemAccessDesc acc = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	r = cu.cuMemSetAccess(m->va, size, &acc, 1);
	return r ? driver_fail(r, er, "setting access to device memory") : 0;
}

int mapping_import(mapping *m, int fd, size_t size, int dev, perr *er)
{
	int e = driver_use(dev, er);
	if (e)
		return e;
	CUmemGenericAllocationHandle h;
	CUresult r = cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r)
		return driver_fail(r, er, "importing the process's device memory");
	return mapping_map(m, h, size, dev, er);
}

int mapping_owner(const uint64_t *first, int n, uint64_t g)
{
	int lo = 0, hi = n - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (first[mid] <= g)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

int mapping_copy_out(mapping_streams *ss, int dev, void *dst, CUdeviceptr src, size_t len, perr *er)
{
	if (dev < 0 || dev >= PHOSIMG_DEVICES_MAX)
		return pr_err(er, -EINVAL, "device %d is out of range", dev);
	if (dev != ss->dev) {
		int e = driver_use(dev, er);
		if (e)
			return e;
		ss->dev = dev;
	}
	CUresult r = ss->s[dev] ? CUDA_SUCCESS : cu.cuStreamCreate(&ss->s[dev], CU_STREAM_NON_BLOCKING);
	if (r)
		return driver_fail(r, er, "making a stream");
	r = cu.cuMemcpyDtoHAsync(dst, src, len, ss->s[dev]);
	if (!r)
		r = cu.cuStreamSynchronize(ss->s[dev]);
	return r ? driver_fail(r, er, "copying device memory to the host") : 0;
}

void mapping_streams_free(mapping_streams *ss)
{
	for (int d = 0; d < PHOSIMG_DEVICES_MAX; d++)
		if (ss->s[d]) {
			driver_use(d, NULL);
			cu.cuStreamDestroy(ss->s[d]);
			ss->s[d] = NULL;
		}
	ss->dev = -1;
}
