/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Reading CUDA device code images: cubins (ELF), fatbins holding them, and
 * PTX text. Gives each kernel's name and, from a cubin, its parameter
 * layout (EIATTR_KPARAM_INFO in .nv.info.<kernel>). Used by the tracer to
 * know what a launch's arguments are, and by tests/simcuda to run kernels.
 *
 * Nothing read from an image is trusted: every offset and length is checked
 * against the image's bounds.
 */
#ifndef PHOS_CUBIN_H
#define PHOS_CUBIN_H

#include <stddef.h>
#include <stdint.h>

#define CUBIN_MAX_PARAMS 256
#define CUBIN_MAX_NAME 4096

typedef struct cubin_param {
	uint16_t offset, size; /* in the kernel's parameter buffer */
} cubin_param;

typedef struct cubin_kernel {
	char *name;        /* as in the image: mangled for C++ */
	int nparams;       /* -1: layout unknown (PTX, or no .nv.info) */
	uint32_t param_bytes;
	cubin_param params[CUBIN_MAX_PARAMS];
} cubin_kernel;

typedef struct cubin {
	cubin_kernel **kernels;
	size_t n;
} cubin;

/* Parses an image. With size > 0 the image is that long; with size 0 it
 * was passed by pointer only, as the driver API does, and its length comes
 * from its headers (cubin, fatbin, the cudart fatbin wrapper) or its NUL
 * (PTX). On success *out holds at least one kernel.
 * Errors: -EINVAL (not an image, or malformed), -ENOENT (no kernels, or
 * only compressed code), -ENOMEM. */
int cubin_parse(const void *image, size_t size, cubin *out);

/* The kernel of that name, or NULL. */
const cubin_kernel *cubin_find(const cubin *c, const char *name);

void cubin_free(cubin *c);

#endif
