/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Wrappers of the driver's queries about an address: what lies there,
 * and where its allocation begins and ends.
 *
 * The driver answers them only where memory is mapped. Under the tracer
 * an allocation's memory is unmapped while it is parked (the gate holds
 * the call meanwhile) and, after a lazy restore, until its object is back:
 * such a query first brings the object back, as a launch that uses it
 * would. Triton's launchers (its own and Inductor's static one) ask
 * cuPointerGetAttribute of every tensor they launch with, so without this
 * the first step after a lazy restore failed with "invalid argument".
 *
 * A small allocation is a block of a slab object (alloc.c): its range is
 * the block's, as cudaMalloc would have made it; and since the tracer
 * gives every allocation a legacy IPC handle of its own (ipc.c), each is
 * IPC capable.
 */
#include <string.h>

#include "tracer.h"

/* Answers attribute a of ptr from the buffer table where the tracer knows
 * better than the driver (into data); false where the driver answers. */
static bool ours(CUpointer_attribute a, void *data, CUdeviceptr ptr)
{
	buffer_ref b;
	if (!data || !alloc_find(ptr, &b) || !alloc_owned(b.id))
		return false;
	switch (a) {
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = b.va;
		return true;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = b.size;
		return true;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(int *)data = 1;
		return true;
	default:
		return false;
	}
}

TR_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
	REAL(CUresult, cuPointerGetAttribute, (void *, CUpointer_attribute, CUdeviceptr));
	if (!tr_enabled())
		return real_cuPointerGetAttribute(data, attr, ptr);
	GATE();
	lazy_need(ptr, 1);
	CUresult r = real_cuPointerGetAttribute(data, attr, ptr);
	if (r == CUDA_SUCCESS)
		ours(attr, data, ptr);
	return r;
}

TR_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr)
{
	REAL(CUresult, cuPointerGetAttributes, (unsigned int, CUpointer_attribute *, void **, CUdeviceptr));
	if (!tr_enabled())
		return real_cuPointerGetAttributes(n, attrs, data, ptr);
	GATE();
	lazy_need(ptr, 1);
	CUresult r = real_cuPointerGetAttributes(n, attrs, data, ptr);
	for (unsigned int i = 0; r == CUDA_SUCCESS && attrs && data && i < n; i++)
		ours(attrs[i], data[i], ptr);
	return r;
}

TR_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attr, CUdeviceptr ptr)
{
	REAL(CUresult, cuPointerSetAttribute, (const void *, CUpointer_attribute, CUdeviceptr));
	if (!tr_enabled())
		return real_cuPointerSetAttribute(value, attr, ptr);
	GATE();
	lazy_need(ptr, 1);
	return real_cuPointerSetAttribute(value, attr, ptr);
}

TR_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	REAL(CUresult, cuMemGetAddressRange_v2, (CUdeviceptr *, size_t *, CUdeviceptr));
	buffer_ref b;
	/* A slab block is its own allocation to the application. */
	if (tr_enabled() && alloc_find(dptr, &b)) {
		if (base)
			*base = b.va;
		if (size)
			*size = b.size;
		return CUDA_SUCCESS;
	}
	return real_cuMemGetAddressRange_v2(base, size, dptr);
}
