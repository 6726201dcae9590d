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

#include "internal.h"

#define MAX_PARAMS 256
#define MAX_NAME 1024
#define EM_CUDA 190
#define STO_CUDA_ENTRY 0x10
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIFMT_SVAL 4
#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u

typedef struct param {
	uint16_t offset, size;
} param;

typedef struct func {
	struct module *mod;
	char *name;
	int nparams; /* -1: layout unknown (PTX) */
	param params[MAX_PARAMS];
	size_t param_bytes;
	_Atomic(simcuda_kernel_fn) fn; /* resolved at first launch */
} func;

typedef struct module {
	func **funcs;
	size_t n;
} module;

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

/* ---- image parsing ------------------------------------------------------ */

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

static void func_free(func *f)
{
	if (f) {
		free(f->name);
		free(f);
	}
}

static void module_free(module *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		func_free(m->funcs[i]);
	free(m->funcs);
	free(m);
}

static int module_add(module *m, const char *name, size_t len)
{
	if (len == 0 || len >= MAX_NAME)
		return -EINVAL;
	func **v = realloc(m->funcs, (m->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	m->funcs = v;
	func *f = calloc(1, sizeof(*f));
	if (!f || !(f->name = strndup(name, len))) {
		free(f);
		return -ENOMEM;
	}
	f->mod = m;
	f->nparams = -1;
	m->funcs[m->n++] = f;
	return 0;
}

static func *module_find(const module *m, const char *name)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->funcs[i]->name, name) == 0)
			return m->funcs[i];
	return NULL;
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
static void parse_nv_info(func *f, const unsigned char *p, size_t n)
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
			if (ordinal >= MAX_PARAMS)
				return;
			f->params[ordinal] = (param){ offset, size };
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

static int parse_elf(module *m, const unsigned char *d, size_t size)
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
			int r = module_add(m, name, len);
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
		func *f = module_find(m, sname + 9);
		if (f && elf_sdata(&e, sh, &data, &n))
			parse_nv_info(f, data, n);
	}
	return m->n ? 0 : -ENOENT;
}

static int parse_ptx(module *m, const unsigned char *d, size_t size)
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
		int r = module_add(m, n, (size_t)(p - n));
		if (r)
			return r;
	}
	return m->n ? 0 : -ENOENT;
}

static bool looks_like_ptx(const unsigned char *d, size_t size)
{
	return size > 8 && memmem(d, size, ".version", 8) && memmem(d, size, ".target", 7);
}

static int parse_fatbin(module *m, const unsigned char *d, size_t size)
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
static int parse_image(module *m, const unsigned char *d, size_t size)
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
static int parse_unsized(module *m, const void *image)
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

static CUresult load(module **out, const void *image, size_t size, bool sized)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	if (!image)
		return CUDA_ERROR_INVALID_VALUE;
	module *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = result_of(sized ? parse_image(m, image, size) : parse_unsized(m, image));
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
			r = load(out, buf, got, true);
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
	return load((module **)mod, image, 0, false);
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
	return load((module **)lib, code, 0, false);
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
	*name = ((func *)k)->name;
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
	if (fn->nparams < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (index >= (size_t)fn->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = fn->params[index].offset;
	if (size)
		*size = fn->params[index].size;
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
	void *params[MAX_PARAMS];
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
	simcuda_kernel_fn fn = atomic_load(&f->fn);
	if (!fn) {
		fn = lookup_kernel(f->name);
		if (!fn) {
			sc_log("kernel %s has no host implementation: returning CUDA_ERROR_NOT_SUPPORTED", f->name);
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
	size_t nbuf = packed ? packed_n : f->param_bytes;
	if (f->nparams > 0 && !packed && !params)
		return CUDA_ERROR_INVALID_VALUE;
	if (packed && f->nparams >= 0 && packed_n < f->param_bytes)
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
	if (f->nparams >= 0) {
		for (int i = 0; i < f->nparams; i++) {
			if (!packed)
				memcpy(buf + f->params[i].offset, params[i], f->params[i].size);
			t->params[i] = buf + f->params[i].offset;
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
