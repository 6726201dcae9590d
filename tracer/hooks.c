/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * How the application reaches the driver, and how it reaches us instead.
 *
 *  - Linked with -lcuda: libphos.so, preloaded, defines the wrapped entry
 *    points under their own names, so they are found first.
 *  - dlsym(handle, "cu…"): the dlsym override returns the wrapper; so for
 *    "nccl…", and nccl.c notes the real function.
 *  - cuGetProcAddress(name, version, flags): its wrappers ask the driver,
 *    then return the wrapper of the very entry point the driver gave (the
 *    version and per-thread-stream variant matter: their ABIs differ).
 *
 * Everything not wrapped, cuGetExportTable included, passes through.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "../common/cuversions.h"
#include "tracer.h"

void *(*real_dlsym_fn)(void *, const char *) __attribute__((visibility("hidden")));

/* dlsym is called by sanitizer runtimes while they start, before they can
 * check anything: what it runs must not be instrumented. */
#define UNCHECKED __attribute__((no_sanitize("address", "undefined")))

UNCHECKED static void *libc_dlsym(void *handle, const char *name)
{
	if (!real_dlsym_fn) {
		void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (!p)
			p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		*(void **)&real_dlsym_fn = p;
	}
	return real_dlsym_fn && name && *name ? real_dlsym_fn(handle, name) : NULL;
}

static void *cuda_handle(void)
{
	static void *h;
	if (!h)
		h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		h = dlopen("libcuda.so.1", RTLD_NOW);
	return h;
}

void *tr_dlsym_real(void *handle, const char *sym)
{
	return libc_dlsym(handle, sym);
}

void *tr_real(const char *sym)
{
	void *h = cuda_handle();
	return h ? libc_dlsym(h, sym) : NULL;
}

static void *next_after(const void *caller, const char *name);

void *tr_real_next(const char *sym)
{
	return next_after((const void *)tr_real_next, sym);
}

/* Our own definition of sym, if libphos.so wraps it. */
static void *wrapper_of(const char *sym)
{
	static Dl_info self;
	if (!self.dli_fbase && !dladdr((void *)wrapper_of, &self))
		return NULL;
	static void *me;
	if (!me)
		me = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	void *p = me ? libc_dlsym(me, sym) : NULL;
	Dl_info where;
	if (!p || !dladdr(p, &where) || where.dli_fbase != self.dli_fbase)
		return NULL;
	return p;
}

/*
 * RTLD_NEXT depends on who asks: glibc's dlsym looks at its return address.
 * So dlsym here is a few instructions that jump (not call) to glibc's for
 * every name not starting with "cu" or "nccl", and to tr_dlsym_cu, with the caller's
 * return address, for the others. Sanitizer runtimes, which resolve their
 * interceptors with dlsym(RTLD_NEXT) before anything is set up, thus reach
 * glibc as if the tracer were not there.
 */
void *tr_dlsym_cu(void *handle, const char *name, const void *caller) __attribute__((visibility("hidden")));
void *tr_resolve_dlsym(void) __attribute__((visibility("hidden")));

UNCHECKED void *tr_resolve_dlsym(void)
{
	libc_dlsym(NULL, ""); /* resolves real_dlsym_fn */
	return (void *)real_dlsym_fn;
}

/* The objects after the caller's, in load order, each for a definition of
 * its own: RTLD_NEXT for a "cu" name. */
static void *next_after(const void *caller, const char *name)
{
	Dl_info info;
	struct link_map *lm = NULL;
	if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return NULL;
	for (struct link_map *l = lm->l_next; l; l = l->l_next) {
		if (!l->l_name || !l->l_name[0])
			continue;
		void *h = dlopen(l->l_name, RTLD_NOW | RTLD_NOLOAD);
		void *p = h ? libc_dlsym(h, name) : NULL;
		struct link_map *owner = NULL;
		if (h)
			dlclose(h);
		if (p && dladdr1(p, &info, (void **)&owner, RTLD_DL_LINKMAP) && owner == l)
			return p;
	}
	return NULL;
}

void *tr_dlsym_cu(void *handle, const char *name, const void *caller)
{
	void *p = handle == RTLD_NEXT ? next_after(caller, name) : libc_dlsym(handle, name);
	if (p && tr_enabled()) {
		void *w = wrapper_of(name);
		if (w && name[0] == 'n')
			nccl_note_real(name, p); /* NCCL, perhaps dlopen'd alone */
		if (w)
			return w;
	}
	return p;
}

#if defined(__x86_64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	"	test %rsi, %rsi\n"
	"	jz 1f\n"
	"	cmpb $0x63, (%rsi)\n" /* 'c' */
	"	jne 3f\n"
	"	cmpb $0x75, 1(%rsi)\n" /* 'u' */
	"	jne 1f\n"
	"	jmp 4f\n"
	"3:	cmpb $0x6e, (%rsi)\n" /* 'n' */
	"	jne 1f\n"
	"	cmpb $0x63, 1(%rsi)\n" /* 'c' */
	"	jne 1f\n"
	"	cmpb $0x63, 2(%rsi)\n" /* 'c' */
	"	jne 1f\n"
	"	cmpb $0x6c, 3(%rsi)\n" /* 'l' */
	"	jne 1f\n"
	"4:	movq (%rsp), %rdx\n" /* the caller */
	"	jmp tr_dlsym_cu\n"
	"1:	movq real_dlsym_fn(%rip), %rax\n"
	"	test %rax, %rax\n"
	"	jz 2f\n"
	"	jmp *%rax\n"
	"2:	push %rdi\n"
	"	push %rsi\n"
	"	sub $8, %rsp\n"
	"	call tr_resolve_dlsym\n"
	"	add $8, %rsp\n"
	"	pop %rsi\n"
	"	pop %rdi\n"
	"	jmp *%rax\n"
	".size dlsym, .-dlsym\n");
#else
/* Elsewhere, RTLD_NEXT lookups of other names are answered as if asked by
 * libphos.so. */
TR_EXPORT void *dlsym(void *handle, const char *name)
{
	if (name && ((name[0] == 'c' && name[1] == 'u') || !strncmp(name, "nccl", 4)))
		return tr_dlsym_cu(handle, name, __builtin_return_address(0));
	return libc_dlsym(handle, name);
}
#endif

/* The wrapper for what cuGetProcAddress returned as p for sym. */
static void *wrap_proc(const char *sym, void *p, int version, cuuint64_t flags)
{
	char base[256], cand[3][272];
	if (!cuversion_symbol(sym, version, base, sizeof(base)))
		return p;
	int n = 0;
	if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
		snprintf(cand[n++], sizeof(cand[0]), "%s_ptds", base);
		snprintf(cand[n++], sizeof(cand[0]), "%s_ptsz", base);
	}
	snprintf(cand[n++], sizeof(cand[0]), "%s", base);
	/* The entry point whose address the driver gave. */
	for (int i = 0; i < n; i++) {
		if (tr_real(cand[i]) == p) {
			void *w = wrapper_of(cand[i]);
			return w ? w : p;
		}
	}
	/* An address the driver does not export: trust the version table. */
	for (int i = 0; i < n; i++) {
		if (tr_real(cand[i])) {
			void *w = wrapper_of(cand[i]);
			if (w)
				tr_debug("cuGetProcAddress(%s, %d) gave an unexported address; wrapping it as %s", sym,
					 version, cand[i]);
			return w ? w : p;
		}
	}
	return p;
}

TR_EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *status)
{
	REAL(CUresult, cuGetProcAddress_v2,
	     (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *));
	if (!real_cuGetProcAddress_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real_cuGetProcAddress_v2(sym, pfn, version, flags, status);
	if (r == CUDA_SUCCESS && sym && pfn && *pfn && tr_enabled())
		*pfn = wrap_proc(sym, *pfn, version, flags);
	return r;
}

/* The legacy cuGetProcAddress (no status), which cuda.h renames. */
TR_EXPORT CUresult tr_cuGetProcAddress_v1(const char *sym, void **pfn, int version, cuuint64_t flags)
	__asm__("cuGetProcAddress");
CUresult tr_cuGetProcAddress_v1(const char *sym, void **pfn, int version, cuuint64_t flags)
{
	static CUresult (*real)(const char *, void **, int, cuuint64_t);
	if (!real)
		*(void **)&real = tr_real("cuGetProcAddress");
	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real(sym, pfn, version, flags);
	if (r == CUDA_SUCCESS && sym && pfn && *pfn && tr_enabled())
		*pfn = wrap_proc(sym, *pfn, version, flags);
	return r;
}
