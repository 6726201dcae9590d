/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Speculation: what each call reads and writes, at the scope of whole
 * buffers. A launch's arguments are looked up in the buffer table:
 *  - a pointer to const is read;
 *  - a pointer to non-const is read and written;
 *  - an argument of unknown type is scanned 8 bytes at a time, and every
 *    word that points into a buffer is read and written.
 * A launch whose arguments cannot be seen at all (no layout) counts as
 * reading and writing nothing it can name; its kernel says so in
 * its counters (nparams -1). NCCL's kernels write where their arguments
 * do not point (kernel_info.indirect).
 *
 * While a CoW copy runs, every buffer written is protected before the
 * call is queued. While a lazy restore brings memory back, every buffer
 * read or written must be back before the call is queued. A launch with
 * no layout, or with a pointer to pointers (T**: the buffers it reaches
 * are not among its arguments), or of an indirect kernel, has an
 * unbounded write set and goes
 * through the safety net instead (spec_net).
 */
#include <string.h>

#include "tracer.h"

#define MAX_TOUCHED 64

typedef struct touched {
	uint32_t id[MAX_TOUCHED];
	uint8_t how[MAX_TOUCHED]; /* bit 0 read, bit 1 write */
	uint64_t va[MAX_TOUCHED], size[MAX_TOUCHED];
	int n;
} touched;

static void touch(touched *t, uint64_t addr, bool write)
{
	buffer_ref b;
	if (!addr || !alloc_find(addr, &b))
		return;
	for (int i = 0; i < t->n; i++) {
		if (t->id[i] == b.id) {
			t->how[i] |= (uint8_t)(1 | (write ? 2 : 0));
			return;
		}
	}
	if (t->n < MAX_TOUCHED) {
		t->id[t->n] = b.id;
		t->how[t->n] = (uint8_t)(1 | (write ? 2 : 0));
		t->va[t->n] = b.va;
		t->size[t->n++] = b.size;
	}
}

void spec_launch(kernel_info *k, void **params, void **extra, CUstream s)
{
	atomic_fetch_add_explicit(&k->launches, 1, memory_order_relaxed);
	const uint8_t *packed = NULL;
	for (void **e = extra; e && e[0] != CU_LAUNCH_PARAM_END; e += 2)
		if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			packed = e[1];
	if (k->nparams < 0 || (!params && !packed)) {
		spec_net(k);
		return;
	}
	touched t = { .n = 0 };
	bool unbounded = k->indirect;
	for (int i = 0; i < k->nparams; i++) {
		const uint8_t *arg = params ? params[i] : packed + k->params[i].offset;
		uint16_t size = k->params[i].size;
		uint64_t v;
		switch (k->kinds[i]) {
		case PARAM_SCALAR:
			break;
		case PARAM_PTR_INDIRECT:
			unbounded = true;
			/* the pointer array itself is read and written */
			__attribute__((fallthrough));
		case PARAM_PTR_CONST:
		case PARAM_PTR_MUT:
			if (size == 8) {
				memcpy(&v, arg, 8);
				touch(&t, v, k->kinds[i] != PARAM_PTR_CONST);
			}
			break;
		default:
			for (uint16_t off = 0; off + 8 <= size; off += 8) {
				memcpy(&v, arg + off, 8);
				touch(&t, v, true);
			}
		}
	}
	uint64_t rd = 0, wr = 0, bytes = 0;
	for (int i = 0; i < t.n; i++) {
		bool w = t.how[i] & 2;
		alloc_count(t.id[i], true, w);
		lazy_need(t.va[i], t.size[i]);
		rd++;
		if (w) {
			wr++;
			bytes += t.size[i];
			cow_before_write(t.va[i], t.size[i], s);
		}
	}
	if (unbounded || t.n == MAX_TOUCHED)
		spec_net(k);
	atomic_fetch_add_explicit(&k->reads, rd, memory_order_relaxed);
	atomic_fetch_add_explicit(&k->writes, wr, memory_order_relaxed);
	atomic_fetch_add_explicit(&k->bytes_written, bytes, memory_order_relaxed);
}

void spec_range(uint64_t addr, size_t len, bool read, bool write, CUstream s)
{
	/* Whole buffers are the scope of the counters; CoW protects the
	 * bytes the call writes, which are known exactly. */
	buffer_ref b;
	if (alloc_find(addr, &b))
		alloc_count(b.id, read, write);
	if (read || write)
		lazy_need(addr, len);
	if (write)
		cow_before_write(addr, len, s);
}

void spec_net(kernel_info *k)
{
	lazy_net(k);
	cow_net(k);
}
