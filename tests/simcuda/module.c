/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Modules, libraries, functions and kernel launches.
 *
 * A module is loaded from a real cubin (ELF), a fatbin holding one, or PTX
 * text. Kernel names come from the image: an ELF symbol that is a function
 * with the CUDA entry flag, or a PTX ".entry". Each kernel's parameter
 * layout comes from EIATTR_KPARAM_INFO in its .nv.info.<name> section, so a
 * launch copies its arguments by value, as the driver does, and runs later
 * on the stream. A kernel runs as the host function registered under its
 * mangled name (simcuda.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/cubin.h"
#include "internal.h"

#define MAX_NAME CUBIN_MAX_NAME

/* A kernel of a module, with its host implementation once found. */
typedef struct func {
	struct module *mod;
	const cubin_kernel *k;
	_Atomic(simcuda_kernel_fn) fn; /* resolved at first launch */
} func;

typedef struct module {
	cubin image;
	func **funcs; /* one per kernel of image */
	size_t n;
} module;

static void module_free(module *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		free(m->funcs[i]);
	free(m->funcs);
	cubin_free(&m->image);
	free(m);
}

static func *module_find(const module *m, const char *name)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->funcs[i]->k->name, name) == 0)
			return m->funcs[i];
	return NULL;
}

/* ---- kernel registry ---------------------------------------------------- */

typedef struct reg {
	char *name;
	simcuda_kernel_fn fn;
	struct reg *next;
} reg;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static reg *registry; /* guarded by reg_lock */

SC_EXPORT int simcuda_register_kernel(const char *name, simcuda_kernel_fn fn)
{
	if (!name || !fn || !*name || strlen(name) >= MAX_NAME)
		return -EINVAL;
	reg *r = malloc(sizeof(*r));
	if (!r || !(r->name = strdup(name))) {
		free(r);
		return -ENOMEM;
	}
	r->fn = fn;
	pthread_mutex_lock(&reg_lock);
	r->next = registry;
	registry = r;
	pthread_mutex_unlock(&reg_lock);
	return 0;
}

static simcuda_kernel_fn lookup_kernel(const char *name)
{
	simcuda_kernel_fn fn = NULL;
	pthread_mutex_lock(&reg_lock);
	for (reg *r = registry; r && !fn; r = r->next)
		if (strcmp(r->name, name) == 0)
			fn = r->fn;
	pthread_mutex_unlock(&reg_lock);
	if (!fn) {
		char sym[MAX_NAME + 32];
		snprintf(sym, sizeof(sym), "simcuda_kernel_%s", name);
		void *p = dlsym(RTLD_DEFAULT, sym);
		memcpy(&fn, &p, sizeof(fn));
	}
	return fn;
}

void sc_kernels_load_plugins(void)
{
	const char *list = getenv("SIMCUDA_KERNELS");
	if (!list || !*list)
		return;
	char *copy = strdup(list), *save = NULL;
	if (!copy)
		return;
	for (char *path = strtok_r(copy, ":", &save); path; path = strtok_r(NULL, ":", &save)) {
		/* Kept loaded for the life of the process: its kernels are used. */
		if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL))
			sc_log("cannot load kernel library %s: %s", path, dlerror());
	}
	free(copy);
}

static CUresult result_of(int e)
{
	switch (e) {
	case 0:
		return CUDA_SUCCESS;
	case -ENOMEM:
		return CUDA_ERROR_OUT_OF_MEMORY;
	case -ENOENT:
		return CUDA_ERROR_NO_BINARY_FOR_GPU;
	default:
		return CUDA_ERROR_INVALID_IMAGE;
	}
}

static CUresult load(module **out, const void *image, size_t size)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	if (!image)
		return CUDA_ERROR_INVALID_VALUE;
	module *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = result_of(cubin_parse(image, size, &m->image));
	if (!r && !(m->funcs = calloc(m->image.n, sizeof(*m->funcs))))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; !r && i < m->image.n; i++, m->n++) {
		func *f = calloc(1, sizeof(*f));
		if (!f) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		f->mod = m;
		f->k = m->image.kernels[i];
		m->funcs[i] = f;
	}
	if (r) {
		module_free(m);
		return r;
	}
	*out = m;
	return CUDA_SUCCESS;
}

static CUresult load_file(module **out, const char *path)
{
	if (!path)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_FILE_NOT_FOUND;
	struct stat st;
	unsigned char *buf = NULL;
	CUresult r = CUDA_ERROR_INVALID_IMAGE;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size < (1 << 30) &&
	    (buf = malloc((size_t)st.st_size + 1))) {
		size_t got = 0;
		while (got < (size_t)st.st_size) {
			ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		buf[got] = 0;
		if (got == (size_t)st.st_size)
			r = load(out, buf, got);
	}
	free(buf);
	close(fd);
	return r;
}

SC_EXPORT CUresult cuModuleLoad(CUmodule *mod, const char *path)
{
	SC_API();
	if (!mod)
		return CUDA_ERROR_INVALID_VALUE;
	return load_file((module **)mod, path);
}

SC_EXPORT CUresult cuModuleLoadData(CUmodule *mod, const void *image)
{
	SC_API();
	if (!mod)
		return CUDA_ERROR_INVALID_VALUE;
	return load((module **)mod, image, 0);
}

SC_EXPORT CUresult cuModuleLoadDataEx(CUmodule *mod, const void *image, unsigned int n, CUjit_option *opts,
				      void **vals)
{
	(void)n, (void)opts, (void)vals; /* JIT options do not apply */
	return cuModuleLoadData(mod, image);
}

SC_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *mod, const void *fatbin)
{
	return cuModuleLoadData(mod, fatbin);
}

SC_EXPORT CUresult cuModuleUnload(CUmodule mod)
{
	SC_API();
	if (!mod)
		return CUDA_ERROR_INVALID_HANDLE;
	sc_streams_drain(); /* launches in flight use its functions */
	module_free((module *)mod);
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuModuleGetFunction(CUfunction *pf, CUmodule mod, const char *name)
{
	if (!pf || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!mod)
		return CUDA_ERROR_INVALID_HANDLE;
	func *f = module_find((module *)mod, name);
	if (!f)
		return CUDA_ERROR_NOT_FOUND;
	*pf = (CUfunction)f;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
	if (!count || !mod)
		return CUDA_ERROR_INVALID_VALUE;
	*count = (unsigned)((module *)mod)->n;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction *fns, unsigned int n, CUmodule mod)
{
	if (!fns || !mod)
		return CUDA_ERROR_INVALID_VALUE;
	module *m = (module *)mod;
	for (size_t i = 0; i < n && i < m->n; i++)
		fns[i] = (CUfunction)m->funcs[i];
	return CUDA_SUCCESS;
}

/* ---- libraries: a library is a module; a kernel is its function ---------- */

SC_EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv,
				     unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo)
{
	SC_API();
	(void)jo, (void)jv, (void)njo, (void)lo, (void)lv, (void)nlo;
	if (!lib)
		return CUDA_ERROR_INVALID_VALUE;
	return load((module **)lib, code, 0);
}

SC_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *path, CUjit_option *jo, void **jv,
					 unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo)
{
	SC_API();
	(void)jo, (void)jv, (void)njo, (void)lo, (void)lv, (void)nlo;
	if (!lib)
		return CUDA_ERROR_INVALID_VALUE;
	return load_file((module **)lib, path);
}

SC_EXPORT CUresult cuLibraryUnload(CUlibrary lib)
{
	return cuModuleUnload((CUmodule)lib);
}

SC_EXPORT CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
	return cuModuleGetFunction((CUfunction *)k, (CUmodule)lib, name);
}

SC_EXPORT CUresult cuLibraryGetModule(CUmodule *mod, CUlibrary lib)
{
	if (!mod || !lib)
		return CUDA_ERROR_INVALID_VALUE;
	*mod = (CUmodule)lib;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuKernelGetFunction(CUfunction *pf, CUkernel k)
{
	if (!pf || !k)
		return CUDA_ERROR_INVALID_VALUE;
	*pf = (CUfunction)k;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuKernelGetName(const char **name, CUkernel k)
{
	if (!name || !k)
		return CUDA_ERROR_INVALID_VALUE;
	*name = ((func *)k)->k->name;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuFuncGetName(const char **name, CUfunction f)
{
	return cuKernelGetName(name, (CUkernel)f);
}

SC_EXPORT CUresult cuFuncGetModule(CUmodule *mod, CUfunction f)
{
	if (!mod || !f)
		return CUDA_ERROR_INVALID_VALUE;
	*mod = (CUmodule)((func *)f)->mod;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
	func *fn = (func *)f;
	if (!fn)
		return CUDA_ERROR_INVALID_HANDLE;
	const cubin_kernel *k = fn->k;
	if (k->nparams < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (index >= (size_t)k->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = k->params[index].offset;
	if (size)
		*size = k->params[index].size;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attr, CUfunction f)
{
	if (!value || !f)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*value = 1024;
		break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION:
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
		*value = 90;
		break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS:
		*value = 32;
		break;
	default:
		*value = 0;
	}
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value)
{
	(void)attr, (void)value;
	return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SC_EXPORT CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config)
{
	(void)config;
	return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SC_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel k, CUdevice dev)
{
	(void)dev;
	return cuFuncSetAttribute((CUfunction)k, attr, value);
}

SC_EXPORT CUresult cuKernelGetAttribute(int *value, CUfunction_attribute attr, CUkernel k, CUdevice dev)
{
	(void)dev;
	return cuFuncGetAttribute(value, attr, (CUfunction)k);
}

/* ---- launches ----------------------------------------------------------- */

typedef struct launch_task {
	simcuda_kernel_fn fn;
	simcuda_launch l;
	void *params[CUBIN_MAX_PARAMS];
	size_t nbuf;
	max_align_t buf[]; /* the arguments, copied at launch */
} launch_task;

static void launch_run(void *arg)
{
	launch_task *t = *(launch_task **)arg;
	t->fn(&t->l);
	free(t);
}

static CUresult launch(func *f, const unsigned grid[3], const unsigned block[3], unsigned shmem, CUstream s,
		       void **params, void **extra)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	for (int i = 0; i < 3; i++)
		if (grid[i] == 0 || block[i] == 0)
			return CUDA_ERROR_INVALID_VALUE;
	if ((uint64_t)block[0] * block[1] * block[2] > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	const cubin_kernel *k = f->k;
	simcuda_kernel_fn fn = atomic_load(&f->fn);
	if (!fn) {
		fn = lookup_kernel(k->name);
		if (!fn) {
			sc_log("kernel %s has no host implementation: returning CUDA_ERROR_NOT_SUPPORTED", k->name);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		atomic_store(&f->fn, fn);
	}

	/* Where the arguments come from: the params array or a packed buffer. */
	const void *packed = NULL;
	size_t packed_n = 0;
	for (void **e = extra; e && e[0] != CU_LAUNCH_PARAM_END; e += 2) {
		if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			packed = e[1];
		else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE)
			packed_n = e[1] ? *(size_t *)e[1] : 0;
		else
			return CUDA_ERROR_INVALID_VALUE;
	}
	if (packed && params)
		return CUDA_ERROR_INVALID_VALUE;
	size_t nbuf = packed ? packed_n : k->param_bytes;
	if (k->nparams > 0 && !packed && !params)
		return CUDA_ERROR_INVALID_VALUE;
	if (packed && k->nparams >= 0 && packed_n < k->param_bytes)
		return CUDA_ERROR_INVALID_VALUE;

	launch_task *t = calloc(1, sizeof(*t) + nbuf);
	if (!t)
		return CUDA_ERROR_OUT_OF_MEMORY;
	t->fn = fn;
	memcpy(t->l.grid, grid, sizeof(t->l.grid));
	memcpy(t->l.block, block, sizeof(t->l.block));
	t->l.shared_bytes = shmem;
	unsigned char *buf = (unsigned char *)t->buf;
	if (packed)
		memcpy(buf, packed, nbuf);
	if (k->nparams >= 0) {
		for (int i = 0; i < k->nparams; i++) {
			if (!packed)
				memcpy(buf + k->params[i].offset, params[i], k->params[i].size);
			t->params[i] = buf + k->params[i].offset;
		}
		t->l.params = t->params;
		t->l.arg_buffer = buf;
		t->l.arg_buffer_size = nbuf;
	} else {
		/* Layout unknown (PTX): arguments cannot be copied, so the
		 * kernel runs before the launch returns, after earlier work. */
		t->l.params = params;
		t->l.arg_buffer = packed;
		t->l.arg_buffer_size = packed_n;
		if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) {
			CUresult sr = cuStreamSynchronize(s);
			if (sr) {
				free(t);
				return sr;
			}
		}
		launch_task *tp = t;
		return sc_stream_submit(NULL, launch_run, &tp, sizeof(tp));
	}
	launch_task *tp = t;
	r = sc_stream_submit(s, launch_run, &tp, sizeof(tp));
	if (r)
		free(t);
	return r;
}

#define LAUNCH_API(name)                                                                          \
	SC_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, \
				unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params, \
				void **extra)                                                     \
	{                                                                                         \
		SC_API();                                                                         \
		const unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };              \
		return launch((func *)f, grid, block, shmem, s, params, extra);                   \
	}

LAUNCH_API(cuLaunchKernel)
LAUNCH_API(cuLaunchKernel_ptsz)

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	const unsigned grid[3] = { c->gridDimX, c->gridDimY, c->gridDimZ };
	const unsigned block[3] = { c->blockDimX, c->blockDimY, c->blockDimZ };
	return launch((func *)f, grid, block, c->sharedMemBytes, c->hStream, params, extra);
}

SC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	SC_API();
	return launch_ex(c, f, params, extra);
}

SC_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	SC_API();
	return launch_ex(c, f, params, extra);
}

/* A cooperative launch runs as any other here: the whole grid at once is
 * what a host function does anyway. */
#define LAUNCH_COOP_API(name)                                                                     \
	SC_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, \
				unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) \
	{                                                                                         \
		SC_API();                                                                         \
		const unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };              \
		return launch((func *)f, grid, block, shmem, s, params, NULL);                    \
	}

LAUNCH_COOP_API(cuLaunchCooperativeKernel)
LAUNCH_COOP_API(cuLaunchCooperativeKernel_ptsz)
