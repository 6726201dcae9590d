/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The tracer's demangler: the parameter kinds of typical kernel names
 * (pointers to const and non-const, scalars, structs, templates,
 * substitutions), "unknown" for what it does not understand, and no crash
 * on 200,000 mutated names.
 */
#include "../tracer/demangle.c"
#include "tap.h"

static const char *kinds_of(const char *name)
{
	static char out[64];
	param_kind k[32];
	int n = demangle_params(name, k, 32);
	if (n < 0)
		return "fail";
	for (int i = 0; i < n && i < 60; i++)
		out[i] = "scmu"[k[i]];
	out[n < 60 ? n : 60] = 0;
	return out;
}

int main(void)
{
	plan(9);
	ok(!strcmp(kinds_of("_Z3addPKfS0_Pfi"), "ccms"), "add(const float*, const float*, float*, int): %s",
	   kinds_of("_Z3addPKfS0_Pfi"));
	ok(!strcmp(kinds_of("_Z5twicePf"), "m"), "twice(float*)");
	ok(!strcmp(kinds_of("_Z4fourPKfS0_PfS1_"), "ccmm"), "four(const float*, const float*, float*, float*): %s",
	   kinds_of("_Z4fourPKfS0_PfS1_"));
	ok(!strcmp(kinds_of("_ZN2ns6kernelEPKdPdm"), "cms"), "ns::kernel(const double*, double*, unsigned long)");
	ok(!strcmp(kinds_of("_Z6reduceIfLi256EEvPKT_PS0_i"), "cms"),
	   "a template: reduce<float, 256>(const float*, float*, int): %s",
	   kinds_of("_Z6reduceIfLi256EEvPKT_PS0_i"));
	ok(!strcmp(kinds_of("_Z4step6ParamsPf"), "um"), "a struct by value is unknown: step(Params, float*)");
	ok(!strcmp(kinds_of("fill"), "fail"), "an extern \"C\" name has no types");
	ok(!strcmp(kinds_of("_Z1fv"), ""), "f(void) has no parameters");

	/* Mutations of real names: truncated, bytes replaced, digits grown. */
	static const char *seeds[] = { "_Z3addPKfS0_Pfi", "_Z6reduceIfLi256EEvPKT_PS0_i", "_ZN2ns6kernelEPKdPdm",
				       "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_"
				       "6detail5ArrayIPcLi1EEEEEviT0_T1_" };
	unsigned seed = 7;
	int done_ok = 1;
	for (int i = 0; i < 200000; i++) {
		char name[256];
		const char *s = seeds[i % 4];
		size_t n = strlen(s);
		memcpy(name, s, n + 1);
		int muts = 1 + rand_r(&seed) % 4;
		for (int m = 0; m < muts; m++) {
			size_t at = (size_t)rand_r(&seed) % n;
			switch (rand_r(&seed) % 3) {
			case 0: name[at] = (char)(rand_r(&seed) % 94 + 33); break;
			case 1: name[at] = 0; n = at ? at : 1; break;
			default: name[at] = (char)('0' + rand_r(&seed) % 10); break;
			}
		}
		param_kind k[8];
		int r = demangle_params(name, k, 8);
		done_ok &= r >= -1 && r <= 8;
	}
	ok(done_ok, "200000 mutated names are parsed or refused, within bounds, without a crash");
	return done();
}
