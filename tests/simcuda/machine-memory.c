/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The machine's device memory, where $SIMCUDA_MEMORY_MIB is set: then,
 * as on a GPU, the device memory every process of the machine holds
 * counts against each device's total, once, however many processes map
 * it (an import takes no memory). simcuda's device memory is a memfd
 * named for it (memory.c); what the machine holds is every such memfd
 * some process has open or mapped, found in /proc. A process in a pid
 * namespace of its own sees its namespace's processes: its own memory
 * and what it maps of others' (a CoW shadow pool), which is what it can
 * run out of.
 *
 * Without $SIMCUDA_MEMORY_MIB each process counts its own memory alone
 * (memory.c), against an H200's total.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

bool sc_machine_memory(void)
{
	const char *m = getenv("SIMCUDA_MEMORY_MIB");
	return m && *m;
}

const char *sc_machine_tag(void)
{
	static char tag[32];
	if (!*tag)
		snprintf(tag, sizeof(tag), "-m%s", sc_machine_memory() ? getenv("SIMCUDA_MEMORY_MIB") : "");
	return tag;
}

typedef struct seen {
	ino_t *ino;
	size_t n, cap;
	uint64_t bytes;
} seen;

/* Counts the memfd behind path (an fd or a mapping) once, if it is
 * device memory of this machine. */
static void count(seen *s, const char *path, const char *target)
{
	const char *pre = "/memfd:simcuda-phys-d";
	const char *tag = sc_machine_tag();
	const char *end = strstr(target, " (deleted)");
	size_t len = end ? (size_t)(end - target) : strlen(target);
	if (strncmp(target, pre, strlen(pre)) || len < strlen(tag) || strncmp(target + len - strlen(tag), tag, strlen(tag)))
		return;
	struct stat st;
	if (stat(path, &st) != 0)
		return;
	for (size_t i = 0; i < s->n; i++)
		if (s->ino[i] == st.st_ino)
			return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		ino_t *v = realloc(s->ino, cap * sizeof(*v));
		if (!v)
			return;
		s->ino = v;
		s->cap = cap;
	}
	s->ino[s->n++] = st.st_ino;
	s->bytes += (uint64_t)st.st_size;
}

/* The memfds process pid has open, and those it maps. */
static void scan(seen *s, const char *pid)
{
	char path[384], target[256];
	snprintf(path, sizeof(path), "/proc/%s/fd", pid);
	DIR *d = opendir(path);
	for (struct dirent *de; d && (de = readdir(d));) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd/%s", pid, de->d_name);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		count(s, path, target);
	}
	if (d)
		closedir(d);
	snprintf(path, sizeof(path), "/proc/%s/maps", pid);
	FILE *f = fopen(path, "re");
	char line[512];
	while (f && fgets(line, sizeof(line), f)) {
		char *name = strstr(line, "/memfd:simcuda-phys-d");
		unsigned long lo, hi;
		if (!name || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		name[strcspn(name, "\n")] = 0;
		snprintf(path, sizeof(path), "/proc/%s/map_files/%lx-%lx", pid, lo, hi);
		count(s, path, name);
	}
	if (f)
		fclose(f);
}

uint64_t sc_machine_used(void)
{
	seen s = { 0 };
	DIR *d = opendir("/proc");
	for (struct dirent *de; d && (de = readdir(d));)
		if (de->d_name[0] >= '1' && de->d_name[0] <= '9')
			scan(&s, de->d_name);
	if (d)
		closedir(d);
	free(s.ino);
	return s.bytes;
}
