/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A small Itanium C++ demangler that answers one question: what is each
 * parameter of a kernel? A pointer to const (read only), a pointer to
 * non-const (read and written), a scalar, or something else (a struct, a
 * template parameter: unknown). It understands the forms kernel names
 * take, and gives up (-1) on anything else, which makes every parameter
 * unknown: the caller then scans such parameters conservatively.
 *
 *   _Z3addPKfS0_Pfi  ->  add(const float*, const float*, float*, int)
 */
#include <ctype.h>
#include <string.h>

#include "tracer.h"

#define MAX_SUBS 64

/* What a parsed type is, as far as we care. */
typedef struct tinfo {
	param_kind kind;
	bool is_const; /* the type itself is const-qualified */
} tinfo;

typedef struct parser {
	const char *p, *end;
	tinfo subs[MAX_SUBS];
	int nsubs;
	tinfo targs[MAX_SUBS]; /* template arguments of the function name */
	int ntargs;
	bool fail;
} parser;

static void add_sub(parser *s, tinfo t)
{
	if (s->nsubs < MAX_SUBS)
		s->subs[s->nsubs++] = t;
}

static bool eat(parser *s, char c)
{
	if (s->p < s->end && *s->p == c) {
		s->p++;
		return true;
	}
	return false;
}

static unsigned long number(parser *s)
{
	unsigned long v = 0;
	if (s->p >= s->end || !isdigit((unsigned char)*s->p)) {
		s->fail = true;
		return 0;
	}
	while (s->p < s->end && isdigit((unsigned char)*s->p) && v < 1000000)
		v = v * 10 + (unsigned long)(*s->p++ - '0');
	return v;
}

/* <source-name> ::= <length> <identifier> */
static void source_name(parser *s)
{
	unsigned long n = number(s);
	if (s->fail || n > (unsigned long)(s->end - s->p)) {
		s->fail = true;
		return;
	}
	s->p += n;
}

/* <seq-id>_ after S: S_ is 0, S0_ is 1, SA_ is 11 … */
static int seq_id(parser *s)
{
	if (eat(s, '_'))
		return 0;
	int v = 0;
	while (s->p < s->end && *s->p != '_') {
		char c = *s->p++;
		if (isdigit((unsigned char)c))
			v = v * 36 + (c - '0');
		else if (c >= 'A' && c <= 'Z')
			v = v * 36 + (c - 'A' + 10);
		else {
			s->fail = true;
			return 0;
		}
	}
	if (!eat(s, '_'))
		s->fail = true;
	return v + 1;
}

static tinfo type(parser *s);

/* <template-args> ::= I <template-arg>+ E ; we keep the types. */
static void template_args(parser *s, tinfo *out, int *nout)
{
	while (!s->fail && s->p < s->end && *s->p != 'E') {
		if (eat(s, 'L')) { /* a literal: L <type> <value> E */
			type(s);
			while (s->p < s->end && *s->p != 'E')
				s->p++;
			if (!eat(s, 'E'))
				s->fail = true;
			if (out && *nout < MAX_SUBS)
				out[(*nout)++] = (tinfo){ PARAM_SCALAR, false };
		} else if (eat(s, 'J')) { /* a pack */
			template_args(s, NULL, NULL);
		} else {
			tinfo t = type(s);
			if (out && *nout < MAX_SUBS)
				out[(*nout)++] = t;
		}
	}
	if (!eat(s, 'E'))
		s->fail = true;
}

/* <nested-name> ::= N [CV] <prefix> <unqualified-name> E; returns whether
 * it ended in template args. */
static bool nested_name(parser *s, tinfo *targs, int *ntargs)
{
	bool templ = false;
	while (eat(s, 'K') || eat(s, 'V') || eat(s, 'r'))
		;
	int parts = 0;
	while (!s->fail && s->p < s->end && *s->p != 'E') {
		if (parts)
			add_sub(s, (tinfo){ PARAM_UNKNOWN, false }); /* each prefix */
		templ = false;
		if (eat(s, 'S')) {
			if (eat(s, 't'))
				source_name(s);
			else
				seq_id(s);
		} else if (eat(s, 'I')) {
			if (ntargs)
				*ntargs = 0;
			template_args(s, targs, ntargs);
			templ = true;
		} else if (isdigit((unsigned char)*s->p)) {
			source_name(s);
		} else if (eat(s, 'C') || eat(s, 'D')) { /* constructors, destructors */
			if (s->p < s->end)
				s->p++;
		} else {
			s->fail = true;
		}
		parts++;
	}
	if (!eat(s, 'E'))
		s->fail = true;
	return templ;
}

static param_kind builtin(char c)
{
	return strchr("bcahstijlmxynofdegz", c) ? PARAM_SCALAR : PARAM_UNKNOWN;
}

static tinfo type(parser *s)
{
	tinfo t = { PARAM_UNKNOWN, false };
	if (s->fail || s->p >= s->end) {
		s->fail = true;
		return t;
	}
	char c = *s->p++;
	if (c == 'v' || builtin(c) == PARAM_SCALAR)
		return (tinfo){ PARAM_SCALAR, false };
	switch (c) {
	case 'D': /* Dh half, DF16_ …, Dn nullptr: scalars */
		if (eat(s, 'F')) {
			number(s);
			eat(s, '_');
		} else if (s->p < s->end) {
			s->p++;
		}
		return (tinfo){ PARAM_SCALAR, false };
	case 'K':
	case 'V':
	case 'r': {
		tinfo inner = type(s);
		inner.is_const = inner.is_const || c == 'K';
		add_sub(s, inner);
		return inner;
	}
	case 'P':
	case 'R':
	case 'O': {
		tinfo pointee = type(s);
		bool indirect = pointee.kind == PARAM_PTR_CONST || pointee.kind == PARAM_PTR_MUT ||
				pointee.kind == PARAM_PTR_INDIRECT;
		t.kind = indirect ? PARAM_PTR_INDIRECT : pointee.is_const ? PARAM_PTR_CONST : PARAM_PTR_MUT;
		add_sub(s, t);
		return t;
	}
	case 'S': {
		if (eat(s, 't')) {
			source_name(s);
			add_sub(s, t);
			return t;
		}
		int id = seq_id(s);
		if (!s->fail && id < s->nsubs)
			t = s->subs[id];
		else
			s->fail = true;
		if (s->p < s->end && *s->p == 'I') { /* a template of a substitution */
			s->p++;
			template_args(s, NULL, NULL);
			add_sub(s, (tinfo){ PARAM_UNKNOWN, false });
			return (tinfo){ PARAM_UNKNOWN, false };
		}
		return t;
	}
	case 'T': { /* a template parameter */
		int id = seq_id(s);
		if (!s->fail && id < s->ntargs)
			t = s->targs[id];
		add_sub(s, t);
		return t;
	}
	case 'N':
		nested_name(s, NULL, NULL);
		add_sub(s, t);
		return t;
	default:
		if (isdigit((unsigned char)c)) {
			s->p--;
			source_name(s);
			if (eat(s, 'I')) {
				add_sub(s, t);
				template_args(s, NULL, NULL);
			}
			add_sub(s, t);
			return t; /* a struct or class by value */
		}
		s->fail = true;
		return t;
	}
}

int demangle_params(const char *mangled, param_kind *kinds, int max)
{
	parser s = { .p = mangled, .end = mangled + strlen(mangled) };
	if (!eat(&s, '_') || !eat(&s, 'Z'))
		return -1; /* extern "C": no types */
	bool templ;
	if (eat(&s, 'N')) {
		templ = nested_name(&s, s.targs, &s.ntargs);
	} else {
		source_name(&s);
		templ = false;
		if (eat(&s, 'I')) {
			add_sub(&s, (tinfo){ PARAM_UNKNOWN, false });
			template_args(&s, s.targs, &s.ntargs);
			templ = true;
		}
	}
	if (s.fail)
		return -1;
	if (templ)
		type(&s); /* a template function's encoding starts with its return type */
	int n = 0;
	if (s.p < s.end && *s.p == 'v' && s.p + 1 == s.end)
		return 0; /* (void) */
	while (!s.fail && s.p < s.end && *s.p != '.') {
		tinfo t = type(&s);
		if (n < max)
			kinds[n] = t.kind;
		n++;
	}
	return s.fail || n > max ? -1 : n;
}
