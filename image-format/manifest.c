/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The manifest: a header, typed sections and a checksummed trailer
 * (FORMAT.md, "Manifest"). Decoding trusts no length it reads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "format.h"

/* ---- encoding ------------------------------------------------------------- */

typedef struct buf {
	uint8_t *p;
	size_t n, cap;
	bool oom;
} buf;

static uint8_t *grow(buf *b, size_t n)
{
	if (b->oom)
		return NULL;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	uint8_t *at = b->p + b->n;
	memset(at, 0, n);
	b->n += n;
	return at;
}

static void add_bytes(buf *b, const void *src, size_t n)
{
	uint8_t *p = grow(b, n);
	if (p && n)
		memcpy(p, src, n);
}

static void add32(buf *b, uint32_t v)
{
	uint8_t *p = grow(b, 4);
	if (p)
		put32(p, v);
}

static void add16(buf *b, uint16_t v)
{
	uint8_t *p = grow(b, 2);
	if (p)
		put16(p, v);
}

static void add64(buf *b, uint64_t v)
{
	uint8_t *p = grow(b, 8);
	if (p)
		put64(p, v);
}

static void pad8(buf *b)
{
	grow(b, align_up(b->n, 8) - b->n);
}

/* Opens a section; close_section fills in its length. */
static size_t open_section(buf *b, uint32_t type, uint32_t flags)
{
	size_t at = b->n;
	add32(b, type);
	add32(b, flags);
	add64(b, 0);
	return at;
}

static void close_section(buf *b, size_t at)
{
	if (b->oom)
		return;
	put64(b->p + at + 8, b->n - at - SECTION_HEADER_SIZE);
	pad8(b);
}

int manifest_encode(const manifest *m, uint8_t **out, size_t *len)
{
	const phosimg_info *in = &m->info;
	buf b = { 0 };
	uint32_t nsec = 0;
	size_t s;

	grow(&b, MANIFEST_HEADER_SIZE);

	s = open_section(&b, SEC_PROCESS, 0), nsec++;
	add32(&b, (uint32_t)in->meta.pid);
	add32(&b, in->meta.uid);
	add32(&b, in->meta.gid);
	add32(&b, (uint32_t)in->meta.cmdline_len);
	add_bytes(&b, in->meta.cmdline, in->meta.cmdline_len);
	close_section(&b, s);

	s = open_section(&b, SEC_DEVICES, 0), nsec++;
	add32(&b, in->meta.device_count);
	add32(&b, 0);
	for (uint32_t i = 0; i < in->meta.device_count; i++) {
		const phosimg_device *d = &in->meta.devices[i];
		size_t nl = strnlen(d->name, PHOSIMG_NAME_MAX);
		add32(&b, d->ordinal);
		add16(&b, d->cc_major);
		add16(&b, d->cc_minor);
		add64(&b, d->total_mem);
		add_bytes(&b, d->uuid, 16);
		add16(&b, (uint16_t)nl);
		add_bytes(&b, d->name, nl);
		pad8(&b);
	}
	close_section(&b, s);

	s = open_section(&b, SEC_CHECKPOINT, SECTION_CRITICAL), nsec++;
	add_bytes(&b, in->uuid, 16);
	add32(&b, in->meta.protocol);
	add32(&b, in->chunk_size);
	add64(&b, in->meta.t1_ns);
	add64(&b, in->meta.t2_ns);
	add64(&b, in->created_ns);
	add32(&b, CHECKSUM_XXH3_128);
	add32(&b, 0);
	close_section(&b, s);

	if (in->has_parent) {
		size_t pl = strnlen(in->parent_path, PHOSIMG_PATH_MAX);
		s = open_section(&b, SEC_PARENT, SECTION_CRITICAL), nsec++;
		add_bytes(&b, in->parent_uuid, 16);
		add16(&b, (uint16_t)pl);
		add_bytes(&b, in->parent_path, pl);
		close_section(&b, s);
	}

	s = open_section(&b, SEC_OBJECTS, SECTION_CRITICAL), nsec++;
	add32(&b, in->object_count);
	add32(&b, 0);
	for (uint32_t i = 0; i < in->object_count; i++) {
		const phosimg_object *o = &in->objects[i];
		add32(&b, i);
		add32(&b, o->device);
		add64(&b, o->va);
		add64(&b, o->size);
		add32(&b, o->flags);
		add32(&b, o->key);
	}
	close_section(&b, s);

	/* Critical: a reader that knows no members would restore a tree's
	 * memory into one process. */
	if (in->meta.member_count) {
		s = open_section(&b, SEC_MEMBERS, SECTION_CRITICAL), nsec++;
		add32(&b, in->meta.member_count);
		add32(&b, 0);
		for (uint32_t i = 0; i < in->meta.member_count; i++) {
			const phosimg_member *mb = &in->meta.members[i];
			char comm[PHOSIMG_COMM_MAX] = { 0 };
			memcpy(comm, mb->comm, strnlen(mb->comm, PHOSIMG_COMM_MAX - 1));
			add32(&b, (uint32_t)mb->pid);
			add32(&b, (uint32_t)mb->ppid);
			add32(&b, mb->flags);
			add32(&b, mb->first_object);
			add32(&b, mb->object_count);
			add32(&b, (uint32_t)mb->ns_pid);
			add_bytes(&b, comm, PHOSIMG_COMM_MAX);
		}
		close_section(&b, s);
	}

	/* Critical: a reader that knows no shares would give the importer
	 * nothing where it maps the owner's memory. */
	if (in->share_count) {
		s = open_section(&b, SEC_SHARES, SECTION_CRITICAL), nsec++;
		add32(&b, in->share_count);
		add32(&b, 0);
		for (uint32_t i = 0; i < in->share_count; i++) {
			add32(&b, (uint32_t)in->shares[i].pid);
			add32(&b, in->shares[i].key);
			add32(&b, in->shares[i].object);
			add32(&b, 0);
		}
		close_section(&b, s);
	}

	s = open_section(&b, SEC_INDEX, SECTION_CRITICAL), nsec++;
	add64(&b, m->index_size);
	add64(&b, m->index_entries);
	add_bytes(&b, m->index_hash, 16);
	close_section(&b, s);

	s = open_section(&b, SEC_DATA, SECTION_CRITICAL), nsec++;
	add64(&b, m->data_size);
	add64(&b, m->stored_bytes);
	close_section(&b, s);

	if (m->nfiles > 1) {
		s = open_section(&b, SEC_STRIPES, SECTION_CRITICAL), nsec++;
		add32(&b, m->nfiles - 1);
		add32(&b, 0);
		for (uint32_t i = 1; i < m->nfiles; i++)
			add64(&b, m->file_size[i]);
		close_section(&b, s);
	}

	s = open_section(&b, SEC_CRIU, 0), nsec++;
	add32(&b, in->criu_file_count);
	add32(&b, 0);
	for (uint32_t i = 0; i < in->criu_file_count; i++) {
		const phosimg_criu_file *f = &in->criu_files[i];
		size_t nl = strnlen(f->name, PHOSIMG_NAME_MAX);
		add64(&b, f->size);
		add_bytes(&b, f->hash, 16);
		add16(&b, (uint16_t)nl);
		add_bytes(&b, f->name, nl);
		pad8(&b);
	}
	close_section(&b, s);

	/* Not critical: a reader that knows no stats loses nothing it needs. */
	if (in->stat_count) {
		s = open_section(&b, SEC_STATS, 0), nsec++;
		add32(&b, in->stat_count);
		add32(&b, 0);
		for (uint32_t i = 0; i < in->stat_count; i++) {
			size_t nl = strnlen(in->stats[i].name, PHOSIMG_STAT_NAME_MAX);
			add64(&b, in->stats[i].value);
			add16(&b, (uint16_t)nl);
			add_bytes(&b, in->stats[i].name, nl);
			pad8(&b);
		}
		close_section(&b, s);
	}

	size_t trailer = b.n;
	grow(&b, MANIFEST_TRAILER_SIZE);
	if (b.oom) {
		free(b.p);
		return -ENOMEM;
	}
	put32(b.p, MANIFEST_MAGIC);
	put16(b.p + 4, PHOSIMG_VERSION_MAJOR);
	put16(b.p + 6, PHOSIMG_VERSION_MINOR);
	put32(b.p + 8, ENDIAN_MARK);
	put32(b.p + 12, MANIFEST_HEADER_SIZE);
	put64(b.p + 16, b.n);
	put32(b.p + 24, nsec);
	put32(b.p + trailer, MANIFEST_END_MAGIC);
	fmt_hash(b.p, b.n - 16, b.p + b.n - 16);
	*out = b.p;
	*len = b.n;
	return 0;
}

/* ---- decoding ------------------------------------------------------------- */

typedef struct cursor {
	const uint8_t *p;
	size_t n, at;
	uint64_t base; /* file offset of p[0], for messages */
	const char *shown;
	const char *what;
} cursor;

#define BAD(c, ...) fmt_fail(-EBADMSG, __VA_ARGS__)

static bool take(cursor *c, size_t n, const uint8_t **out)
{
	if (c->n - c->at < n)
		return false;
	*out = c->p + c->at;
	c->at += n;
	return true;
}

static int short_section(const cursor *c)
{
	return BAD(c, "%s: offset %llu: %s section is truncated", c->shown,
		   (unsigned long long)(c->base + c->at), c->what);
}

static bool is_power_of_two(uint64_t v)
{
	return v && !(v & (v - 1));
}

static int dec_process(cursor *c, manifest *m)
{
	const uint8_t *p, *s;
	if (!take(c, 16, &p))
		return short_section(c);
	uint32_t len = get32(p + 12);
	if (len > PHOSIMG_CMDLINE_MAX || !take(c, len, &s))
		return BAD(c, "%s: offset %llu: command line of %u bytes is longer than its section", c->shown,
			   (unsigned long long)(c->base + 12), len);
	if (len && s[len - 1] != 0)
		return BAD(c, "%s: offset %llu: command line is not NUL-terminated", c->shown,
			   (unsigned long long)(c->base + 16));
	m->info.meta.pid = (int32_t)get32(p);
	m->info.meta.uid = get32(p + 4);
	m->info.meta.gid = get32(p + 8);
	m->cmdline = malloc(len + 1u);
	if (!m->cmdline)
		return -ENOMEM;
	memcpy(m->cmdline, s, len);
	m->cmdline[len] = 0;
	m->info.meta.cmdline = m->cmdline;
	m->info.meta.cmdline_len = len;
	return 0;
}

static int dec_devices(cursor *c, manifest *m)
{
	const uint8_t *p;
	if (!take(c, 8, &p))
		return short_section(c);
	uint32_t n = get32(p);
	if (n > PHOSIMG_DEVICES_MAX)
		return BAD(c, "%s: offset %llu: %u devices, more than %u", c->shown, (unsigned long long)c->base, n,
			   PHOSIMG_DEVICES_MAX);
	m->devices = calloc(n ? n : 1, sizeof(*m->devices));
	if (!m->devices)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		phosimg_device *d = &m->devices[i];
		const uint8_t *name;
		if (!take(c, 34, &p))
			return short_section(c);
		uint16_t nl = get16(p + 32);
		if (nl > PHOSIMG_NAME_MAX || !take(c, nl, &name) || memchr(name, 0, nl))
			return BAD(c, "%s: offset %llu: device %u has a bad name", c->shown,
				   (unsigned long long)(c->base + c->at), i);
		d->ordinal = get32(p);
		d->cc_major = get16(p + 4);
		d->cc_minor = get16(p + 6);
		d->total_mem = get64(p + 8);
		memcpy(d->uuid, p + 16, 16);
		memcpy(d->name, name, nl);
		d->name[nl] = 0;
		c->at = align_up(c->at, 8) < c->n ? align_up(c->at, 8) : c->n;
	}
	m->info.meta.devices = m->devices;
	m->info.meta.device_count = n;
	return 0;
}

static int dec_checkpoint(cursor *c, manifest *m)
{
	const uint8_t *p;
	if (!take(c, CHECKPOINT_SECTION_SIZE, &p))
		return short_section(c);
	phosimg_info *in = &m->info;
	memcpy(in->uuid, p, 16);
	in->meta.protocol = get32(p + 16);
	in->chunk_size = get32(p + 20);
	in->meta.t1_ns = get64(p + 24);
	in->meta.t2_ns = get64(p + 32);
	in->created_ns = get64(p + 40);
	uint32_t algo = get32(p + 48);
	if (in->meta.protocol < PHOSIMG_PROTO_STOP || in->meta.protocol > PHOSIMG_PROTO_RECOPY)
		return BAD(c, "%s: offset %llu: unknown protocol %u", c->shown, (unsigned long long)(c->base + 16),
			   in->meta.protocol);
	if (!is_power_of_two(in->chunk_size) || in->chunk_size < PHOSIMG_CHUNK_MIN ||
	    in->chunk_size > PHOSIMG_CHUNK_MAX)
		return BAD(c, "%s: offset %llu: chunk size %u is not a power of two from 4 KiB to 1 GiB", c->shown,
			   (unsigned long long)(c->base + 20), in->chunk_size);
	if (algo != CHECKSUM_XXH3_128)
		return BAD(c, "%s: offset %llu: unknown checksum algorithm %u", c->shown,
			   (unsigned long long)(c->base + 48), algo);
	return 0;
}

static int dec_parent(cursor *c, manifest *m)
{
	const uint8_t *p, *s;
	if (!take(c, 18, &p))
		return short_section(c);
	uint16_t len = get16(p + 16);
	if (len == 0 || len > PHOSIMG_PATH_MAX || !take(c, len, &s) || memchr(s, 0, len))
		return BAD(c, "%s: offset %llu: bad parent path", c->shown, (unsigned long long)(c->base + 16));
	m->info.has_parent = true;
	memcpy(m->info.parent_uuid, p, 16);
	memcpy(m->info.parent_path, s, len);
	m->info.parent_path[len] = 0;
	return 0;
}

static int dec_objects(cursor *c, manifest *m)
{
	const uint8_t *p;
	if (!take(c, 8, &p))
		return short_section(c);
	uint32_t n = get32(p);
	if (n > PHOSIMG_OBJECTS_MAX || (uint64_t)n * OBJECT_RECORD_SIZE > c->n - c->at)
		return BAD(c, "%s: offset %llu: %u objects do not fit in their section", c->shown,
			   (unsigned long long)c->base, n);
	m->objects = calloc(n ? n : 1, sizeof(*m->objects));
	if (!m->objects)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		take(c, OBJECT_RECORD_SIZE, &p);
		phosimg_object *o = &m->objects[i];
		o->id = get32(p);
		o->device = get32(p + 4);
		o->va = get64(p + 8);
		o->size = get64(p + 16);
		o->flags = get32(p + 24);
		o->key = m->info.version_minor >= 1 ? get32(p + 28) : 0;
		if (o->id != i || o->size == 0 || o->va + o->size < o->va)
			return BAD(c, "%s: offset %llu: object record %u is invalid (id %u, size %llu)", c->shown,
				   (unsigned long long)(c->base + c->at - OBJECT_RECORD_SIZE), i, o->id,
				   (unsigned long long)o->size);
		m->info.raw_bytes += o->size;
	}
	m->info.objects = m->objects;
	m->info.object_count = n;
	return 0;
}

static int dec_members(cursor *c, manifest *m)
{
	const uint8_t *p;
	if (!take(c, 8, &p))
		return short_section(c);
	uint32_t n = get32(p);
	if (n == 0 || n > PHOSIMG_MEMBERS_MAX || (uint64_t)n * MEMBER_RECORD_SIZE > c->n - c->at)
		return BAD(c, "%s: offset %llu: %u members do not fit in their section", c->shown,
			   (unsigned long long)c->base, n);
	m->members = calloc(n, sizeof(*m->members));
	if (!m->members)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		take(c, MEMBER_RECORD_SIZE, &p);
		phosimg_member *mb = &m->members[i];
		mb->pid = (int32_t)get32(p);
		mb->ppid = (int32_t)get32(p + 4);
		mb->flags = get32(p + 8);
		mb->first_object = get32(p + 12);
		mb->object_count = get32(p + 16);
		mb->ns_pid = m->info.version_minor >= 4 ? (int32_t)get32(p + 20) : 0;
		memcpy(mb->comm, p + 24, PHOSIMG_COMM_MAX);
		mb->comm[PHOSIMG_COMM_MAX - 1] = 0;
		if (mb->pid <= 0)
			return BAD(c, "%s: offset %llu: member %u has pid %d", c->shown,
				   (unsigned long long)(c->base + c->at - MEMBER_RECORD_SIZE), i, (int)mb->pid);
		if (mb->ns_pid < 0 || (i && (mb->flags & PHOSIMG_MEMBER_NS_INIT)))
			return BAD(c, "%s: offset %llu: member %u has namespace pid %d%s", c->shown,
				   (unsigned long long)(c->base + c->at - MEMBER_RECORD_SIZE), i, (int)mb->ns_pid,
				   mb->ns_pid < 0 ? "" : " and says it is its namespace's init, but is not the root");
	}
	/* In a tree of its own namespace, each member has a pid there, the
	 * root 1, and no two the same: restore finds them by it. */
	for (uint32_t i = 0; (m->members[0].flags & PHOSIMG_MEMBER_NS_INIT) && i < n; i++) {
		const phosimg_member *mb = &m->members[i];
		if (mb->ns_pid <= 0 || (i == 0) != (mb->ns_pid == 1))
			return BAD(c, "%s: member %u (pid %d) has pid %d in the tree's namespace", c->shown, i,
				   (int)mb->pid, (int)mb->ns_pid);
		for (uint32_t j = 0; j < i; j++)
			if (m->members[j].ns_pid == mb->ns_pid)
				return BAD(c, "%s: two members have pid %d in the tree's namespace", c->shown,
					   (int)mb->ns_pid);
	}
	m->info.meta.members = m->members;
	m->info.meta.member_count = n;
	return 0;
}

static int dec_shares(cursor *c, manifest *m)
{
	const uint8_t *p;
	if (!take(c, 8, &p))
		return short_section(c);
	uint32_t n = get32(p);
	if (n == 0 || n > PHOSIMG_SHARES_MAX || (uint64_t)n * SHARE_RECORD_SIZE > c->n - c->at)
		return BAD(c, "%s: offset %llu: %u shares do not fit in their section", c->shown,
			   (unsigned long long)c->base, n);
	m->shares = calloc(n, sizeof(*m->shares));
	if (!m->shares)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		take(c, SHARE_RECORD_SIZE, &p);
		m->shares[i] = (phosimg_share){ (int32_t)get32(p), get32(p + 4), get32(p + 8) };
	}
	m->info.shares = m->shares;
	m->info.share_count = n;
	return 0;
}

/* Each share names a member, an object, and a key the member has once. */
static int check_shares(const char *shown, const phosimg_info *in)
{
	for (uint32_t i = 0; i < in->share_count; i++) {
		const phosimg_share *sh = &in->shares[i];
		bool member = false;
		for (uint32_t j = 0; j < in->meta.member_count; j++)
			member |= in->meta.members[j].pid == sh->pid;
		if (!member)
			return fmt_fail(-EBADMSG, "%s: share %u names pid %d, which is no member", shown, i,
					(int)sh->pid);
		if (sh->object >= in->object_count)
			return fmt_fail(-EBADMSG, "%s: share %u of pid %d names object %u, which is not in the image",
					shown, i, (int)sh->pid, sh->object);
		for (uint32_t j = 0; j < i; j++)
			if (in->shares[j].pid == sh->pid && in->shares[j].key == sh->key)
				return fmt_fail(-EBADMSG, "%s: pid %d has key %u in two shares", shown, (int)sh->pid,
						sh->key);
	}
	return 0;
}

/* Gives every object its process: the member whose range holds it, or
 * the checkpointed process. Ranges must lie inside the object table and
 * not overlap; the first member is the checkpointed process. */
static int assign_owners(const char *shown, manifest *m)
{
	phosimg_info *in = &m->info;
	for (uint32_t k = 0; k < in->object_count; k++)
		m->objects[k].pid = in->meta.pid;
	if (!in->meta.member_count)
		return 0;
	if (in->meta.members[0].pid != in->meta.pid)
		return fmt_fail(-EBADMSG, "%s: the first member (pid %d) is not the checkpointed process (pid %d)",
				shown, (int)in->meta.members[0].pid, (int)in->meta.pid);
	uint8_t *owned = calloc(in->object_count ? in->object_count : 1, 1);
	if (!owned)
		return -ENOMEM;
	int e = 0;
	uint32_t covered = 0;
	for (uint32_t i = 0; !e && i < in->meta.member_count; i++) {
		const phosimg_member *mb = &in->meta.members[i];
		for (uint32_t j = 0; !e && j < i; j++)
			if (in->meta.members[j].pid == mb->pid)
				e = fmt_fail(-EBADMSG, "%s: pid %d is a member twice", shown, (int)mb->pid);
		if (!e && (uint64_t)mb->first_object + mb->object_count > in->object_count)
			e = fmt_fail(-EBADMSG, "%s: member %d's objects %u+%u lie outside the %u objects", shown,
				     (int)mb->pid, mb->first_object, mb->object_count, in->object_count);
		for (uint32_t k = mb->first_object; !e && k < mb->first_object + mb->object_count; k++) {
			if (owned[k]++)
				e = fmt_fail(-EBADMSG, "%s: object %u belongs to two members", shown, k);
			m->objects[k].pid = mb->pid;
		}
		covered += mb->object_count;
	}
	free(owned);
	if (!e && covered != in->object_count)
		e = fmt_fail(-EBADMSG, "%s: %u of %u objects belong to no member", shown, in->object_count - covered,
			     in->object_count);
	return e;
}

static int dec_index(cursor *c, manifest *m)
{
	const uint8_t *p;
	if (!take(c, INDEX_SECTION_SIZE, &p))
		return short_section(c);
	m->index_size = get64(p);
	m->index_entries = get64(p + 8);
	memcpy(m->index_hash, p + 16, 16);
	return 0;
}

static int dec_data(cursor *c, manifest *m)
{
	const uint8_t *p;
	if (!take(c, DATA_SECTION_SIZE, &p))
		return short_section(c);
	m->data_size = get64(p);
	m->stored_bytes = get64(p + 8);
	return 0;
}

static int dec_stripes(cursor *c, manifest *m)
{
	const uint8_t *p;
	if (!take(c, 8, &p))
		return short_section(c);
	uint32_t n = get32(p);
	if (n == 0 || n >= PHOSIMG_STRIPES_MAX || (uint64_t)n * 8 > c->n - c->at)
		return BAD(c, "%s: offset %llu: %u more data files (1 to %u) do not fit in their section", c->shown,
			   (unsigned long long)c->base, n, PHOSIMG_STRIPES_MAX - 1);
	for (uint32_t i = 1; i <= n; i++) {
		take(c, 8, &p);
		m->file_size[i] = get64(p);
	}
	m->nfiles = 1 + n;
	return 0;
}

static bool good_file_name(const uint8_t *s, size_t n)
{
	if (n == 0 || memchr(s, 0, n) || memchr(s, '/', n))
		return false;
	return !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.');
}

static int dec_criu(cursor *c, manifest *m)
{
	const uint8_t *p, *name;
	if (!take(c, 8, &p))
		return short_section(c);
	uint32_t n = get32(p);
	/* Each record takes at least 32 bytes. */
	if ((uint64_t)n * 32 > c->n - c->at)
		return BAD(c, "%s: offset %llu: %u CRIU files do not fit in their section", c->shown,
			   (unsigned long long)c->base, n);
	m->criu = calloc(n ? n : 1, sizeof(*m->criu));
	if (!m->criu)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		phosimg_criu_file *f = &m->criu[i];
		if (!take(c, 26, &p))
			return short_section(c);
		uint16_t nl = get16(p + 24);
		if (nl > PHOSIMG_NAME_MAX || !take(c, nl, &name) || !good_file_name(name, nl))
			return BAD(c, "%s: offset %llu: CRIU file %u has a bad name", c->shown,
				   (unsigned long long)(c->base + c->at), i);
		f->size = get64(p);
		memcpy(f->hash, p + 8, 16);
		memcpy(f->name, name, nl);
		f->name[nl] = 0;
		if (i && strcmp(m->criu[i - 1].name, f->name) >= 0)
			return BAD(c, "%s: offset %llu: CRIU files are not in strictly ascending name order",
				   c->shown, (unsigned long long)(c->base + c->at));
		c->at = align_up(c->at, 8) < c->n ? align_up(c->at, 8) : c->n;
	}
	m->info.criu_files = m->criu;
	m->info.criu_file_count = n;
	return 0;
}

bool manifest_stat_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > PHOSIMG_STAT_NAME_MAX || s[0] < 'a' || s[0] > 'z')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' ||
		      s[i] == '-'))
			return false;
	return true;
}

static int dec_stats(cursor *c, manifest *m)
{
	const uint8_t *p, *name;
	if (!take(c, 8, &p))
		return short_section(c);
	uint32_t n = get32(p);
	if (n > PHOSIMG_STATS_MAX || (uint64_t)n * STAT_RECORD_MIN > c->n - c->at)
		return BAD(c, "%s: offset %llu: %u stats do not fit in their section (at most %u)", c->shown,
			   (unsigned long long)c->base, n, PHOSIMG_STATS_MAX);
	m->stats = calloc(n ? n : 1, sizeof(*m->stats));
	if (!m->stats)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		phosimg_stat *st = &m->stats[i];
		if (!take(c, 10, &p))
			return short_section(c);
		uint16_t nl = get16(p + 8);
		if (nl > PHOSIMG_STAT_NAME_MAX || !take(c, nl, &name) || !manifest_stat_name_ok((const char *)name, nl))
			return BAD(c, "%s: offset %llu: stat %u has a bad name (1 to %u bytes of [a-z0-9_.-], a letter "
				      "first)", c->shown, (unsigned long long)(c->base + c->at), i, PHOSIMG_STAT_NAME_MAX);
		st->value = get64(p);
		memcpy(st->name, name, nl);
		st->name[nl] = 0;
		if (i && strcmp(m->stats[i - 1].name, st->name) >= 0)
			return BAD(c, "%s: offset %llu: stats are not in strictly ascending name order ('%s' after '%s')",
				   c->shown, (unsigned long long)(c->base + c->at), st->name, m->stats[i - 1].name);
		c->at = align_up(c->at, 8) < c->n ? align_up(c->at, 8) : c->n;
	}
	m->info.stats = m->stats;
	m->info.stat_count = n;
	return 0;
}

int phosimg_stat_get(const phosimg_info *in, const char *name, uint64_t *value)
{
	if (!in || !name || !value)
		return -EINVAL;
	for (uint32_t i = 0; i < in->stat_count; i++)
		if (!strcmp(in->stats[i].name, name)) {
			*value = in->stats[i].value;
			return 0;
		}
	return -ENOENT;
}

int manifest_decode(const uint8_t *p, size_t len, const char *shown, manifest *m)
{
	memset(m, 0, sizeof(*m));
	if (len < 8 || get32(p) != MANIFEST_MAGIC)
		return fmt_fail(-EBADMSG, "%s: offset 0: not a phos manifest (bad magic)", shown);
	uint16_t major = get16(p + 4), minor = get16(p + 6);
	if (major != PHOSIMG_VERSION_MAJOR)
		return fmt_fail(-EPROTONOSUPPORT, "%s: offset 4: format version %u.%u, this reader knows %u.x",
				shown, major, minor, PHOSIMG_VERSION_MAJOR);
	if (len < MANIFEST_HEADER_SIZE + MANIFEST_TRAILER_SIZE)
		return fmt_fail(-EBADMSG, "%s: %zu bytes, shorter than a header and a trailer", shown, len);
	if (get32(p + 8) != ENDIAN_MARK)
		return fmt_fail(-EBADMSG, "%s: offset 8: bad byte-order mark", shown);
	uint32_t hsize = get32(p + 12);
	uint64_t fsize = get64(p + 16);
	if (fsize != len)
		return fmt_fail(-EBADMSG, "%s: offset 16: records a size of %llu bytes but has %zu", shown,
				(unsigned long long)fsize, len);
	if (hsize < MANIFEST_HEADER_SIZE || hsize % 8 || hsize > len - MANIFEST_TRAILER_SIZE)
		return fmt_fail(-EBADMSG, "%s: offset 12: bad header size %u", shown, hsize);
	uint8_t h[16];
	fmt_hash(p, len - 16, h);
	if (memcmp(h, p + len - 16, 16) != 0)
		return fmt_fail(-EBADMSG, "%s: offset %zu: checksum mismatch", shown, len - 16);
	if (get32(p + len - MANIFEST_TRAILER_SIZE) != MANIFEST_END_MAGIC)
		return fmt_fail(-EBADMSG, "%s: offset %zu: bad trailer magic", shown, len - MANIFEST_TRAILER_SIZE);

	m->info.version_major = major;
	m->info.version_minor = minor;
	uint32_t nsec = get32(p + 24), seen = 0;
	size_t at = hsize, end = len - MANIFEST_TRAILER_SIZE;
	for (uint32_t i = 0; i < nsec; i++) {
		if (end - at < SECTION_HEADER_SIZE)
			return fmt_fail(-EBADMSG, "%s: offset %zu: section %u of %u is missing", shown, at, i, nsec);
		uint32_t type = get32(p + at), flags = get32(p + at + 4);
		uint64_t slen = get64(p + at + 8);
		if (slen > end - at - SECTION_HEADER_SIZE)
			return fmt_fail(-EBADMSG, "%s: offset %zu: section of %llu bytes runs past the trailer", shown,
					at + 8, (unsigned long long)slen);
		cursor c = { p + at + SECTION_HEADER_SIZE, (size_t)slen, 0, at + SECTION_HEADER_SIZE, shown, "" };
		static const char *names[] = { "", "process", "devices", "checkpoint", "parent",
					       "objects", "index", "data", "criu", "members", "stripes", "shares",
					       "stats" };
		int e = 0;
		if (type >= SEC_PROCESS && type <= SEC_STATS) {
			if (seen & (1u << type))
				return fmt_fail(-EBADMSG, "%s: offset %zu: second %s section", shown, at, names[type]);
			seen |= 1u << type;
			c.what = names[type];
		}
		switch (type) {
		case SEC_PROCESS: e = dec_process(&c, m); break;
		case SEC_DEVICES: e = dec_devices(&c, m); break;
		case SEC_CHECKPOINT: e = dec_checkpoint(&c, m); break;
		case SEC_PARENT: e = dec_parent(&c, m); break;
		case SEC_OBJECTS: e = dec_objects(&c, m); break;
		case SEC_INDEX: e = dec_index(&c, m); break;
		case SEC_DATA: e = dec_data(&c, m); break;
		case SEC_CRIU: e = dec_criu(&c, m); break;
		case SEC_MEMBERS: e = dec_members(&c, m); break;
		case SEC_STRIPES: e = dec_stripes(&c, m); break;
		case SEC_SHARES: e = dec_shares(&c, m); break;
		case SEC_STATS: e = dec_stats(&c, m); break;
		default:
			if (flags & SECTION_CRITICAL)
				return fmt_fail(-EPROTONOSUPPORT,
						"%s: offset %zu: critical section of unknown type %u", shown, at, type);
		}
		if (e)
			return e;
		at = align_up(at + SECTION_HEADER_SIZE + slen, 8);
		if (at > end)
			return fmt_fail(-EBADMSG, "%s: offset %zu: section padding runs past the trailer", shown, at);
	}
	if (at != end)
		return fmt_fail(-EBADMSG, "%s: offset %zu: %zu bytes after the last section", shown, at, end - at);
	const uint32_t required = 1u << SEC_CHECKPOINT | 1u << SEC_OBJECTS | 1u << SEC_INDEX | 1u << SEC_DATA;
	if ((seen & required) != required)
		return fmt_fail(-EBADMSG, "%s: a required section is missing", shown);
	if (!m->nfiles)
		m->nfiles = 1;
	m->file_size[0] = m->data_size;
	int e = assign_owners(shown, m);
	return e ? e : check_shares(shown, &m->info);
}

void manifest_free(manifest *m)
{
	free(m->cmdline);
	free(m->devices);
	free(m->objects);
	free(m->members);
	free(m->shares);
	free(m->stats);
	free(m->criu);
	memset(m, 0, sizeof(*m));
}

void phosimg_uuid_text(const uint8_t uuid[16], char out[PHOSIMG_UUID_TEXT])
{
	char *p = out;
	for (int i = 0; i < 16; i++)
		p += sprintf(p, "%02x%s", uuid[i], (i == 3 || i == 5 || i == 7 || i == 9) ? "-" : "");
}
