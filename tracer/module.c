/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Modules, libraries and their functions. When an image is loaded, its
 * kernels' parameter layouts are read from the image (common/cubin); when
 * a function or kernel handle is obtained, it is bound to its kernel. A
 * launch of a handle never seen (obtained in a way we do not wrap) builds
 * its kernel from the driver: cuFuncGetName and cuFuncGetParamInfo.
 *
 * Launch-time lookups go through a lock-free open-addressing table from
 * handle to kernel; inserts take the mutex.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tracer.h"

#define TABLE_SIZE (1u << 17)

typedef struct loaded {
	void *module;
	cubin image;
	struct loaded *next;
} loaded;

/* Guarded by lock: modules, inserts into the table. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static loaded *modules;
static _Atomic(void *) keys[TABLE_SIZE];
static _Atomic(kernel_info *) values[TABLE_SIZE];

static size_t slot_of(const void *key)
{
	uintptr_t k = (uintptr_t)key;
	k ^= k >> 17;
	k *= 0xed5ad4bbu;
	k ^= k >> 11;
	return k & (TABLE_SIZE - 1);
}

static kernel_info *table_get(const void *key)
{
	for (size_t i = slot_of(key), n = 0; n < TABLE_SIZE; i = (i + 1) & (TABLE_SIZE - 1), n++) {
		void *k = atomic_load_explicit(&keys[i], memory_order_acquire);
		if (k == key)
			return atomic_load_explicit(&values[i], memory_order_acquire);
		if (!k)
			return NULL;
	}
	return NULL;
}

/* lock held */
static void table_put(void *key, kernel_info *v)
{
	for (size_t i = slot_of(key), n = 0; n < TABLE_SIZE; i = (i + 1) & (TABLE_SIZE - 1), n++) {
		void *k = atomic_load(&keys[i]);
		if (k == key || !k) {
			atomic_store_explicit(&values[i], v, memory_order_release);
			atomic_store_explicit(&keys[i], key, memory_order_release);
			return;
		}
	}
	tr_log("more than %u kernel handles: launches of new ones are not speculated", TABLE_SIZE);
}

/* Whether kernel `name` (mangled or not) is one of NCCL's. */
static bool is_nccl(const char *name)
{
	if (!strncmp(name, "_Z", 2))
		for (name += 2; *name >= '0' && *name <= '9'; name++)
			;
	return !strncmp(name, "ncclDevKernel", 13) || !strncmp(name, "ncclKernel", 10);
}

static kernel_info *kernel_new(const char *name, const cubin_kernel *layout)
{
	kernel_info *k = calloc(1, sizeof(*k));
	if (!k || !(k->name = strdup(name ? name : "?"))) {
		free(k);
		return NULL;
	}
	k->nparams = -1;
	k->indirect = name && is_nccl(name);
	if (layout && layout->nparams >= 0) {
		k->nparams = layout->nparams;
		memcpy(k->params, layout->params, sizeof(k->params[0]) * (size_t)layout->nparams);
	}
	for (int i = 0; i < CUBIN_MAX_PARAMS; i++)
		k->kinds[i] = PARAM_UNKNOWN;
	param_kind kinds[CUBIN_MAX_PARAMS];
	int n = name ? demangle_params(name, kinds, CUBIN_MAX_PARAMS) : -1;
	/* Trust the types only where they agree with the layout. */
	if (n >= 0 && (k->nparams < 0 || n == k->nparams))
		memcpy(k->kinds, kinds, sizeof(kinds[0]) * (size_t)n);
	return k;
}

/* Fills a kernel's layout from the driver: cuFuncGetParamInfo for a
 * function handle, cuKernelGetParamInfo for a kernel handle. */
static void layout_from_driver(kernel_info *k, void *handle, bool is_kernel)
{
	REAL(CUresult, cuFuncGetParamInfo, (CUfunction, size_t, size_t *, size_t *));
	REAL(CUresult, cuKernelGetParamInfo, (CUkernel, size_t, size_t *, size_t *));
	CUresult (*get)(void *, size_t, size_t *, size_t *) =
		is_kernel ? (CUresult(*)(void *, size_t, size_t *, size_t *))real_cuKernelGetParamInfo
			  : (CUresult(*)(void *, size_t, size_t *, size_t *))real_cuFuncGetParamInfo;
	if (!get)
		return;
	int n = 0;
	size_t off, size;
	CUresult r = CUDA_SUCCESS;
	while (n < CUBIN_MAX_PARAMS && (r = get(handle, (size_t)n, &off, &size)) == CUDA_SUCCESS) {
		k->params[n] = (cubin_param){ (uint16_t)off, (uint16_t)size };
		n++;
	}
	/* Past the last parameter the driver says INVALID_VALUE. */
	if (r == CUDA_ERROR_INVALID_VALUE)
		k->nparams = n;
}

void module_loaded(void *module, const void *image, size_t size)
{
	loaded *l = calloc(1, sizeof(*l));
	if (!l)
		return;
	l->module = module;
	if (cubin_parse(image, size, &l->image) != 0)
		l->image = (cubin){ 0 }; /* layouts will come from the driver */
	pthread_mutex_lock(&lock);
	l->next = modules;
	modules = l;
	pthread_mutex_unlock(&lock);
}

void module_unloaded(void *module)
{
	/* Kernel infos stay: handles may be compared after unload, and their
	 * counters are the process's history. */
	pthread_mutex_lock(&lock);
	for (loaded **p = &modules; *p; p = &(*p)->next) {
		if ((*p)->module == module) {
			loaded *l = *p;
			*p = l->next;
			cubin_free(&l->image);
			free(l);
			break;
		}
	}
	pthread_mutex_unlock(&lock);
}

void module_function(void *module, void *fn, const char *name, bool is_kernel)
{
	if (!fn || table_get(fn))
		return;
	pthread_mutex_lock(&lock);
	const cubin_kernel *layout = NULL;
	for (loaded *l = modules; l && !layout; l = l->next)
		if (l->module == module)
			layout = cubin_find(&l->image, name);
	kernel_info *k = table_get(fn);
	if (!k && (k = kernel_new(name, layout))) {
		if (k->nparams < 0)
			layout_from_driver(k, fn, is_kernel);
		table_put(fn, k);
	}
	pthread_mutex_unlock(&lock);
}

kernel_info *module_kernel(CUfunction fn)
{
	kernel_info *k = table_get(fn);
	if (k || !fn)
		return k;
	REAL(CUresult, cuFuncGetName, (const char **, CUfunction));
	REAL(CUresult, cuKernelGetName, (const char **, CUkernel));
	/* A launch may pass a function or a kernel handle: ask which. */
	const char *name = NULL;
	bool is_kernel = false;
	if ((!real_cuFuncGetName || real_cuFuncGetName(&name, fn) != CUDA_SUCCESS) && real_cuKernelGetName)
		is_kernel = real_cuKernelGetName(&name, (CUkernel)fn) == CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	if (!(k = table_get(fn)) && (k = kernel_new(name, NULL))) {
		layout_from_driver(k, fn, is_kernel);
		table_put(fn, k);
	}
	pthread_mutex_unlock(&lock);
	return k;
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
	return x < y ? -1 : x > y;
}

/* The distinct kernels of the table, sorted; *out is malloc'd. */
static size_t kernels(kernel_info ***out)
{
	kernel_info **v = malloc(TABLE_SIZE * sizeof(*v));
	size_t n = 0, u = 0;
	if (!v) {
		*out = NULL;
		return 0;
	}
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < TABLE_SIZE; i++)
		if (atomic_load(&keys[i]) && (v[n] = atomic_load(&values[i])))
			n++;
	pthread_mutex_unlock(&lock);
	/* Several handles may share a kernel; each counts once. */
	qsort(v, n, sizeof(*v), cmp_ptr);
	for (size_t i = 0; i < n; i++)
		if (!i || v[i] != v[i - 1])
			v[u++] = v[i];
	*out = v;
	return u;
}

int module_list(module_emit_fn emit, void *arg)
{
	kernel_info **v;
	size_t n = kernels(&v);
	static uint8_t buf[WIRE_MAX_PAYLOAD];
	uint32_t len = 0, count = 0;
	int e = v ? 0 : -ENOMEM;
	for (size_t i = 0; i < n && !e; i++) {
		size_t nl = strlen(v[i]->name);
		if (nl > 4000)
			nl = 4000; /* a name longer than that is cut */
		size_t rec = sizeof(wire_kernel) + (nl + 7) / 8 * 8;
		if (len + rec > sizeof(buf)) {
			e = emit(buf, len, count, arg);
			len = count = 0;
		}
		wire_kernel k = { .launches = atomic_load(&v[i]->launches), .reads = atomic_load(&v[i]->reads),
				  .writes = atomic_load(&v[i]->writes), .bytes_written = atomic_load(&v[i]->bytes_written),
				  .net_waits = atomic_load(&v[i]->net_waits), .nparams = v[i]->nparams, .name_len = (uint32_t)nl };
		memcpy(buf + len, &k, sizeof(k));
		memset(buf + len + sizeof(k), 0, rec - sizeof(k));
		memcpy(buf + len + sizeof(k), v[i]->name, nl);
		len += (uint32_t)rec;
		count++;
	}
	if (!e && count)
		e = emit(buf, len, count, arg);
	free(v);
	return e;
}

void module_stats(uint64_t *kernels_out, uint64_t *with_layout, uint64_t *launches)
{
	kernel_info **v;
	size_t n = kernels(&v);
	*kernels_out = n;
	*with_layout = *launches = 0;
	for (size_t i = 0; i < n; i++) {
		*with_layout += v[i]->nparams >= 0;
		*launches += atomic_load(&v[i]->launches);
	}
	free(v);
}
