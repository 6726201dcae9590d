/*
 * A generated file's contents (text.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "text.h"

void text_add(text *t, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->oom = true;
			return;
		}
		if (t->s && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = t->cap ? t->cap * 2 : 4096;
		while (cap <= t->len + (size_t)n)
			cap *= 2;
		char *s = realloc(t->s, cap);
		if (!s) {
			t->oom = true;
			return;
		}
		t->s = s;
		t->cap = cap;
	}
}

void text_free(text *t)
{
	free(t->s);
	*t = (text){ 0 };
}
