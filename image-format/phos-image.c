/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * phos-image: inspect, check and extract phos checkpoint images.
 *
 *   phos-image ls DIR                     objects and sizes
 *   phos-image info [--json] DIR          the manifest, as text or JSON
 *   phos-image verify DIR                 exit 0 if sound, 1 if corrupt
 *   phos-image cat DIR OBJECT [OFF LEN]   raw bytes of an object
 *   phos-image diff A B                   objects and chunks that differ
 *
 * Exit status: 0 success (sound, same), 1 corrupt or different, 2 usage or
 * operational error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "phosimg.h"

#define EXIT_DIFFERENT 1
#define EXIT_TROUBLE 2

static const char *prog = "phos-image";

static int usage(FILE *f)
{
	fprintf(f, "usage: %s ls DIR\n"
		   "       %s info [--json] DIR\n"
		   "       %s verify DIR\n"
		   "       %s cat DIR OBJECT [OFFSET LEN]\n"
		   "       %s diff A B\n",
		prog, prog, prog, prog, prog);
	return f == stdout ? 0 : EXIT_TROUBLE;
}

static int open_image(const char *path, phosimg **img)
{
	int e = phosimg_open(path, img);
	if (e) {
		const char *msg = phosimg_last_error();
		fprintf(stderr, "%s: %s\n", prog, *msg ? msg : strerror(-e));
	}
	return e;
}

static const char *protocol_name(uint32_t p)
{
	switch (p) {
	case PHOSIMG_PROTO_STOP: return "stop";
	case PHOSIMG_PROTO_COW: return "cow";
	case PHOSIMG_PROTO_RECOPY: return "recopy";
	default: return "unknown";
	}
}

static void print_uuid(FILE *f, const uint8_t u[16])
{
	char t[PHOSIMG_UUID_TEXT];
	phosimg_uuid_text(u, t);
	fputs(t, f);
}

static void print_time(const char *key, uint64_t ns)
{
	if (!ns) {
		printf("%s: -\n", key);
		return;
	}
	time_t s = (time_t)(ns / 1000000000u);
	struct tm tm;
	char buf[64];
	gmtime_r(&s, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	printf("%s: %s.%09" PRIu64 "Z\n", key, buf, ns % 1000000000u);
}

static void flags_text(uint32_t fl, char *buf, size_t n)
{
	snprintf(buf, n, "%s%s%s%s", fl & PHOSIMG_OBJ_APP_VMM ? "vmm," : "", fl & PHOSIMG_OBJ_ASYNC ? "async," : "",
		 fl & PHOSIMG_OBJ_SLAB ? "slab," : "", fl ? "" : "-");
	size_t l = strlen(buf);
	if (l > 1 && buf[l - 1] == ',')
		buf[l - 1] = 0;
}

static int cmd_ls(phosimg *img)
{
	const phosimg_info *in = phosimg_get_info(img);
	printf("%-6s %-8s %-6s %-18s %14s %-10s %8s %8s %14s\n", "OBJECT", "PID", "DEVICE", "VA", "SIZE", "FLAGS",
	       "CHUNKS", "PARENT", "STORED");
	for (uint32_t i = 0; i < in->object_count; i++) {
		const phosimg_object *o = &in->objects[i];
		uint64_t n = o->size / in->chunk_size + (o->size % in->chunk_size != 0), par = 0, stored = 0;
		for (uint64_t c = 0; c < n; c++) {
			phosimg_chunk ch;
			phosimg_chunk_info(img, i, c, &ch);
			par += ch.in_parent;
			stored += ch.stored_len;
		}
		char fl[32];
		flags_text(o->flags, fl, sizeof(fl));
		printf("%-6u %-8d %-6u 0x%016" PRIx64 " %14" PRIu64 " %-10s %8" PRIu64 " %8" PRIu64 " %14" PRIu64 "\n",
		       i, (int)o->pid, o->device, o->va, o->size, fl, n, par, stored);
	}
	return 0;
}

static int cmd_info(phosimg *img)
{
	const phosimg_info *in = phosimg_get_info(img);
	printf("format: %u.%u\n", in->version_major, in->version_minor);
	printf("image: ");
	print_uuid(stdout, in->uuid);
	printf("\nprotocol: %s\n", protocol_name(in->meta.protocol));
	print_time("created", in->created_ns);
	print_time("t1", in->meta.t1_ns);
	print_time("t2", in->meta.t2_ns);
	printf("pid: %d\nuid: %u\ngid: %u\ncmdline:", in->meta.pid, in->meta.uid, in->meta.gid);
	for (size_t at = 0; at < in->meta.cmdline_len; at += strlen(in->meta.cmdline + at) + 1)
		printf(" %s", in->meta.cmdline + at);
	printf("\n");
	for (uint32_t i = 0; i < in->meta.device_count; i++) {
		const phosimg_device *d = &in->meta.devices[i];
		printf("device %u: %s, compute capability %u.%u, %" PRIu64 " bytes, GPU-", d->ordinal, d->name,
		       d->cc_major, d->cc_minor, d->total_mem);
		print_uuid(stdout, d->uuid);
		printf("\n");
	}
	for (uint32_t i = 0; i < in->meta.member_count; i++) {
		const phosimg_member *m = &in->meta.members[i];
		printf("member %d: %s, parent %d, %s%s, objects %u+%u", (int)m->pid, m->comm, (int)m->ppid,
		       m->flags & PHOSIMG_MEMBER_TRACED ? "traced" : "untraced",
		       m->flags & PHOSIMG_MEMBER_CUDA ? " CUDA" : "", m->first_object, m->object_count);
		if (in->meta.members[0].flags & PHOSIMG_MEMBER_NS_INIT)
			printf(", pid %d in its namespace%s", (int)m->ns_pid,
			       m->flags & PHOSIMG_MEMBER_NS_INIT ? " (its init)" : "");
		printf("\n");
	}
	for (uint32_t i = 0; i < in->share_count; i++)
		printf("share: member %d maps object %u (its key %u)\n", (int)in->shares[i].pid, in->shares[i].object,
		       in->shares[i].key);
	printf("chunk size: %u\n", in->chunk_size);
	printf("objects: %u\n", in->object_count);
	printf("gpu bytes: %" PRIu64 "\n", in->raw_bytes);
	printf("chunks: %" PRIu64 " (%" PRIu64 " in the parent)\n", in->chunk_count, in->parent_chunks);
	printf("stored bytes: %" PRIu64 "\n", in->stored_bytes);
	if (in->has_parent) {
		printf("parent: %s (", in->parent_path);
		print_uuid(stdout, in->parent_uuid);
		printf(")\n");
	} else {
		printf("parent: -\n");
	}
	printf("chain depth: %u\n", in->depth);
	uint64_t criu = 0;
	for (uint32_t i = 0; i < in->criu_file_count; i++)
		criu += in->criu_files[i].size;
	printf("criu files: %u (%" PRIu64 " bytes)\n", in->criu_file_count, criu);
	for (uint32_t i = 0; i < in->stat_count; i++)
		printf("stat %s: %" PRIu64 "\n", in->stats[i].name, in->stats[i].value);
	return 0;
}

/* ---- info --json -------------------------------------------------------------- */

/* A JSON string of the n bytes at s; bytes that are not UTF-8 (a command
 * line may hold any) become '?'. */
static json_t *jstr(const char *s, size_t n)
{
	json_t *j = json_stringn(s, n);
	if (j)
		return j;
	char *t = malloc(n + 1);
	if (!t)
		return NULL;
	for (size_t i = 0; i < n; i++)
		t[i] = (unsigned char)s[i] < 0x80 && s[i] ? s[i] : '?';
	j = json_stringn(t, n);
	free(t);
	return j;
}

/* An unsigned 64-bit number: exact up to 2^63 - 1, JSON's reach in
 * jansson, and a floating-point number past it. */
static json_t *jnum(uint64_t v)
{
	return v <= INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

static json_t *juuid(const char *prefix, const uint8_t u[16])
{
	char t[PHOSIMG_UUID_TEXT], s[PHOSIMG_UUID_TEXT + 8];
	phosimg_uuid_text(u, t);
	snprintf(s, sizeof(s), "%s%s", prefix, t);
	return json_string(s);
}

/* A time as nanoseconds, or null where the manifest says none (0). */
static json_t *jtime(uint64_t ns)
{
	return ns ? jnum(ns) : json_null();
}

static json_t *json_cmdline(const phosimg_meta *m)
{
	json_t *a = json_array();
	for (size_t at = 0; a && at < m->cmdline_len;) {
		size_t n = strnlen(m->cmdline + at, m->cmdline_len - at);
		json_array_append_new(a, jstr(m->cmdline + at, n));
		at += n + 1;
	}
	return a;
}

static json_t *json_devices(const phosimg_meta *m)
{
	json_t *a = json_array();
	for (uint32_t i = 0; a && i < m->device_count; i++) {
		const phosimg_device *d = &m->devices[i];
		char cc[16];
		snprintf(cc, sizeof(cc), "%u.%u", d->cc_major, d->cc_minor);
		json_array_append_new(a, json_pack("{s:I, s:o, s:s, s:o, s:o}", "ordinal", (json_int_t)d->ordinal,
						   "name", jstr(d->name, strlen(d->name)), "compute_capability", cc,
						   "total_mem", jnum(d->total_mem), "uuid", juuid("GPU-", d->uuid)));
	}
	return a;
}

static json_t *json_members(const phosimg_meta *m)
{
	json_t *a = json_array();
	bool ns = m->member_count && (m->members[0].flags & PHOSIMG_MEMBER_NS_INIT);
	for (uint32_t i = 0; a && i < m->member_count; i++) {
		const phosimg_member *mb = &m->members[i];
		json_t *o = json_pack("{s:i, s:i, s:o, s:b, s:b, s:I, s:I}", "pid", (int)mb->pid, "ppid", (int)mb->ppid,
				      "comm", jstr(mb->comm, strnlen(mb->comm, PHOSIMG_COMM_MAX)), "traced",
				      (int)!!(mb->flags & PHOSIMG_MEMBER_TRACED), "cuda",
				      (int)!!(mb->flags & PHOSIMG_MEMBER_CUDA), "first_object", (json_int_t)mb->first_object,
				      "object_count", (json_int_t)mb->object_count);
		if (o && ns) {
			json_object_set_new(o, "ns_pid", json_integer(mb->ns_pid));
			json_object_set_new(o, "ns_init", json_boolean(mb->flags & PHOSIMG_MEMBER_NS_INIT));
		}
		json_array_append_new(a, o);
	}
	return a;
}

static json_t *json_shares(const phosimg_info *in)
{
	json_t *a = json_array();
	for (uint32_t i = 0; a && i < in->share_count; i++)
		json_array_append_new(a, json_pack("{s:i, s:I, s:I}", "pid", (int)in->shares[i].pid, "object",
						   (json_int_t)in->shares[i].object, "key", (json_int_t)in->shares[i].key));
	return a;
}

static json_t *json_stats(const phosimg_info *in)
{
	json_t *o = json_object();
	for (uint32_t i = 0; o && i < in->stat_count; i++)
		json_object_set_new(o, in->stats[i].name, jnum(in->stats[i].value));
	return o;
}

/* The manifest as one JSON object (phos-image(1) lists its keys). */
static json_t *info_json(const phosimg_info *in)
{
	char format[16];
	snprintf(format, sizeof(format), "%u.%u", in->version_major, in->version_minor);
	uint64_t criu = 0;
	for (uint32_t i = 0; i < in->criu_file_count; i++)
		criu += in->criu_files[i].size;
	json_t *parent = in->has_parent ? json_pack("{s:o, s:o}", "path", jstr(in->parent_path, strlen(in->parent_path)),
						    "uuid", juuid("", in->parent_uuid))
					: json_null();
	return json_pack("{s:s, s:o, s:s, s:o, s:o, s:o, s:i, s:I, s:I, s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:o, "
			 "s:o, s:o, s:o, s:I, s:{s:I, s:o}, s:o}",
			 "format", format, "uuid", juuid("", in->uuid), "protocol", protocol_name(in->meta.protocol),
			 "created_ns", jtime(in->created_ns), "t1_ns", jtime(in->meta.t1_ns), "t2_ns",
			 jtime(in->meta.t2_ns), "pid", (int)in->meta.pid, "uid", (json_int_t)in->meta.uid, "gid",
			 (json_int_t)in->meta.gid, "cmdline", json_cmdline(&in->meta), "devices", json_devices(&in->meta),
			 "members", json_members(&in->meta), "shares", json_shares(in), "chunk_size",
			 (json_int_t)in->chunk_size, "object_count", (json_int_t)in->object_count, "gpu_bytes",
			 jnum(in->raw_bytes), "chunks", jnum(in->chunk_count), "parent_chunks", jnum(in->parent_chunks),
			 "stored_bytes", jnum(in->stored_bytes), "parent", parent, "chain_depth", (json_int_t)in->depth,
			 "criu_files", "count", (json_int_t)in->criu_file_count, "bytes", jnum(criu), "stats",
			 json_stats(in));
}

static int cmd_info_json(phosimg *img)
{
	json_t *j = info_json(phosimg_get_info(img));
	if (!j) {
		fprintf(stderr, "%s: out of memory making the manifest's JSON\n", prog);
		return EXIT_TROUBLE;
	}
	int e = json_dumpf(j, stdout, JSON_INDENT(2));
	json_decref(j);
	if (e || fputc('\n', stdout) == EOF || fflush(stdout) != 0) {
		fprintf(stderr, "%s: write to standard output failed: %s\n", prog, strerror(errno));
		return EXIT_TROUBLE;
	}
	return 0;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-')
		return -EINVAL;
	*v = x;
	return 0;
}

/* OBJECT is an object's number, or its VA as 0x…. */
static int find_object(const phosimg_info *in, const char *s, uint32_t *obj)
{
	uint64_t v;
	if (parse_u64(s, &v))
		return -EINVAL;
	if (strncmp(s, "0x", 2) == 0 || strncmp(s, "0X", 2) == 0) {
		for (uint32_t i = 0; i < in->object_count; i++)
			if (in->objects[i].va == v) {
				*obj = i;
				return 0;
			}
		return -ENOENT;
	}
	if (v >= in->object_count)
		return -ENOENT;
	*obj = (uint32_t)v;
	return 0;
}

static int cmd_cat(phosimg *img, int argc, char **argv)
{
	const phosimg_info *in = phosimg_get_info(img);
	uint32_t obj;
	if (find_object(in, argv[0], &obj)) {
		fprintf(stderr, "%s: no object %s in the image\n", prog, argv[0]);
		return EXIT_TROUBLE;
	}
	uint64_t off = 0, len = in->objects[obj].size;
	if (argc == 3 && (parse_u64(argv[1], &off) || parse_u64(argv[2], &len))) {
		fprintf(stderr, "%s: OFFSET and LEN are numbers\n", prog);
		return EXIT_TROUBLE;
	}
	if (off > in->objects[obj].size || len > in->objects[obj].size - off) {
		fprintf(stderr, "%s: %" PRIu64 "+%" PRIu64 " is outside object %u (%" PRIu64 " bytes)\n", prog, off, len,
			obj, in->objects[obj].size);
		return EXIT_TROUBLE;
	}
	size_t bufsz = 4u << 20;
	char *buf = malloc(bufsz);
	if (!buf)
		return EXIT_TROUBLE;
	int rc = 0;
	while (len && !rc) {
		size_t n = len < bufsz ? (size_t)len : bufsz;
		int e = phosimg_read(img, obj, off, buf, n);
		if (e) {
			fprintf(stderr, "%s: %s\n", prog, *phosimg_last_error() ? phosimg_last_error() : strerror(-e));
			rc = e == -EBADMSG ? EXIT_DIFFERENT : EXIT_TROUBLE;
			break;
		}
		if (fwrite(buf, 1, n, stdout) != n) {
			fprintf(stderr, "%s: write to standard output failed: %s\n", prog, strerror(errno));
			rc = EXIT_TROUBLE;
		}
		off += n;
		len -= n;
	}
	free(buf);
	if (!rc && fflush(stdout) != 0)
		rc = EXIT_TROUBLE;
	return rc;
}

/* Prints the chunk numbers of obj that differ, as ranges. */
static int diff_object(phosimg *a, uint32_t oa, phosimg *b, uint32_t ob)
{
	const phosimg_info *ia = phosimg_get_info(a), *ib = phosimg_get_info(b);
	const phosimg_object *x = &ia->objects[oa];
	if (ia->chunk_size != ib->chunk_size) {
		printf("object %u (va 0x%" PRIx64 "): chunk sizes differ (%u, %u)\n", oa, x->va, ia->chunk_size,
		       ib->chunk_size);
		return 1;
	}
	uint64_t n = x->size / ia->chunk_size + (x->size % ia->chunk_size != 0), first = UINT64_MAX, count = 0;
	char line[256] = "";
	size_t used = 0;
	for (uint64_t c = 0; c <= n; c++) {
		bool differ = false;
		if (c < n) {
			phosimg_chunk ca, cb;
			phosimg_chunk_info(a, oa, c, &ca);
			phosimg_chunk_info(b, ob, c, &cb);
			differ = memcmp(ca.hash, cb.hash, 16) != 0;
		}
		if (differ) {
			count++;
			if (first == UINT64_MAX)
				first = c;
		} else if (first != UINT64_MAX) {
			if (used < sizeof(line) - 48) {
				used += (size_t)snprintf(line + used, sizeof(line) - used, first + 1 == c ? "%s%" PRIu64 : "%s%" PRIu64 "-%" PRIu64,
							 used ? ", " : "", first, c - 1);
			} else if (!strstr(line, "…")) {
				snprintf(line + used, sizeof(line) - used, ", …");
			}
			first = UINT64_MAX;
		}
	}
	if (count)
		printf("object %u (va 0x%" PRIx64 "): %" PRIu64 " of %" PRIu64 " chunks differ: %s\n", oa, x->va, count,
		       n, line);
	return count != 0;
}

/* The object of `in` at x's device and VA, or in->object_count. */
static uint32_t counterpart(const phosimg_info *in, const phosimg_object *x)
{
	uint32_t i = 0;
	while (i < in->object_count && (in->objects[i].va != x->va || in->objects[i].device != x->device))
		i++;
	return i;
}

static int cmd_diff(phosimg *a, phosimg *b)
{
	const phosimg_info *ia = phosimg_get_info(a), *ib = phosimg_get_info(b);
	int differ = 0;
	/* Objects are matched by device and VA: ids may be renumbered. */
	for (uint32_t i = 0; i < ia->object_count; i++) {
		const phosimg_object *x = &ia->objects[i];
		uint32_t j = counterpart(ib, x);
		if (j == ib->object_count) {
			printf("object %u (va 0x%" PRIx64 ", %" PRIu64 " bytes): only in A\n", i, x->va, x->size);
			differ = 1;
		} else if (ib->objects[j].size != x->size) {
			printf("object %u (va 0x%" PRIx64 "): %" PRIu64 " bytes in A, %" PRIu64 " in B\n", i, x->va,
			       x->size, ib->objects[j].size);
			differ = 1;
		} else {
			differ |= diff_object(a, i, b, j);
		}
	}
	for (uint32_t j = 0; j < ib->object_count; j++) {
		const phosimg_object *y = &ib->objects[j];
		if (counterpart(ia, y) == ia->object_count) {
			printf("object %u of B (va 0x%" PRIx64 ", %" PRIu64 " bytes): only in B\n", j, y->va, y->size);
			differ = 1;
		}
	}
	return differ ? EXIT_DIFFERENT : 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return usage(stdout);
	if (argc < 3)
		return usage(stderr);
	const char *cmd = argv[1];
	phosimg *img = NULL, *other = NULL;
	int rc;

	if (!strcmp(cmd, "verify") && argc == 3) {
		if (open_image(argv[2], &img))
			return EXIT_DIFFERENT;
		int e = phosimg_verify(img);
		const phosimg_info *in = phosimg_get_info(img);
		if (e) {
			fprintf(stderr, "%s: %s: corrupt: %s\n", prog, argv[2],
				*phosimg_last_error() ? phosimg_last_error() : strerror(-e));
			rc = EXIT_DIFFERENT;
		} else {
			printf("%s: sound: %u objects, %" PRIu64 " chunks, %u CRIU files, chain of %u image%s\n",
			       argv[2], in->object_count, in->chunk_count, in->criu_file_count, in->depth,
			       in->depth == 1 ? "" : "s");
			rc = 0;
		}
	} else if (!strcmp(cmd, "ls") && argc == 3) {
		if (open_image(argv[2], &img))
			return EXIT_TROUBLE;
		rc = cmd_ls(img);
	} else if (!strcmp(cmd, "info") && argc == 3 && strcmp(argv[2], "--json")) {
		if (open_image(argv[2], &img))
			return EXIT_TROUBLE;
		rc = cmd_info(img);
	} else if (!strcmp(cmd, "info") && argc == 4 && !strcmp(argv[2], "--json")) {
		if (open_image(argv[3], &img))
			return EXIT_TROUBLE;
		rc = cmd_info_json(img);
	} else if (!strcmp(cmd, "cat") && (argc == 4 || argc == 6)) {
		if (isatty(STDOUT_FILENO)) {
			fprintf(stderr, "%s: cat writes raw bytes: redirect standard output\n", prog);
			return EXIT_TROUBLE;
		}
		if (open_image(argv[2], &img))
			return EXIT_TROUBLE;
		rc = cmd_cat(img, argc - 3, argv + 3);
	} else if (!strcmp(cmd, "diff") && argc == 4) {
		if (open_image(argv[2], &img) || open_image(argv[3], &other)) {
			phosimg_close(img);
			return EXIT_TROUBLE;
		}
		rc = cmd_diff(img, other);
	} else {
		return usage(stderr);
	}
	phosimg_close(img);
	phosimg_close(other);
	return rc;
}
