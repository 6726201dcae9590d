/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Which version of a driver entry point cuGetProcAddress gives for a base
 * name and the CUDA version the caller was built for (cuMemAlloc at 12000
 * is cuMemAlloc_v2). Shared by tests/simcuda, which answers such lookups,
 * and the tracer, which must wrap the right ABI.
 */
#ifndef PHOS_CUVERSIONS_H
#define PHOS_CUVERSIONS_H

#include <stddef.h>

/* Writes into buf the exported symbol that `name` means at `cuda_version`:
 * name itself, or name with a version suffix. Returns buf, or NULL if it
 * does not fit. */
char *cuversion_symbol(const char *name, int cuda_version, char *buf, size_t n);

#endif
