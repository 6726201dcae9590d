/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libphosimg: write, read and verify phos checkpoint images.
 *
 * An image is a directory: manifest.phos, gpu.index, gpu.data and criu/.
 * FORMAT.md beside this file specifies every byte of it.
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure. When it fails because of the image (corruption, truncation, an
 * unsupported version) or of I/O, phosimg_last_error() gives a message for
 * people that names the file, the offset and what was wrong.
 *
 * Errors that mean the same thing everywhere:
 *   -EBADMSG          the image is corrupt or truncated
 *   -EPROTONOSUPPORT  the image has a major version this library lacks
 *   -ENOENT           a file of the image, or a parent image, is missing
 *   -EINVAL           a bad argument
 *   -ENOMEM           out of memory
 *   other             the errno of a failed system call (-ENOSPC, -EIO, …)
 */
#ifndef PHOSIMG_H
#define PHOSIMG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PHOSIMG_VERSION_MAJOR 1
#define PHOSIMG_VERSION_MINOR 6

/* The entries of an image directory. */
#define PHOSIMG_MANIFEST_FILE "manifest.phos"
#define PHOSIMG_INDEX_FILE "gpu.index"
#define PHOSIMG_DATA_FILE "gpu.data"
/* Since 1.3, the data may be split over several files (stripes), so that
 * several writers write at once: gpu.data, then gpu.data.1, gpu.data.2, … */
#define PHOSIMG_STRIPES_MAX 64
#define PHOSIMG_CRIU_DIR "criu"

#define PHOSIMG_CHUNK_DEFAULT (4u << 20)
#define PHOSIMG_CHUNK_MIN (4u << 10)
#define PHOSIMG_CHUNK_MAX (1u << 30)
#define PHOSIMG_NAME_MAX 255      /* device name, CRIU file name */
#define PHOSIMG_PATH_MAX 4095     /* parent path */
#define PHOSIMG_CMDLINE_MAX 65536 /* NUL-separated argv */
#define PHOSIMG_DEVICES_MAX 64
#define PHOSIMG_OBJECTS_MAX (1u << 20)
#define PHOSIMG_DEPTH_MAX 64 /* images in a parent chain, this one included */
#define PHOSIMG_MEMBERS_MAX 4096 /* processes in one image */
#define PHOSIMG_COMM_MAX 16      /* a member's name, NUL included */

enum phosimg_protocol {
	PHOSIMG_PROTO_STOP = 1,   /* stop the world */
	PHOSIMG_PROTO_COW = 2,    /* copy-on-write: state at t1 */
	PHOSIMG_PROTO_RECOPY = 3, /* recopy: state at t2 */
};

/* Object flags. */
#define PHOSIMG_OBJ_APP_VMM 0x1u /* the application made it with cuMemCreate */
#define PHOSIMG_OBJ_ASYNC 0x2u   /* a stream-ordered allocation */
#define PHOSIMG_OBJ_SLAB 0x4u    /* a slab holding small allocations */
/* (format 1.5) host memory made with cuMemCreate at a host location; its
 * NUMA node is in bits 16-23, and device is a GPU to fill it with */
#define PHOSIMG_OBJ_HOST 0x8u
#define PHOSIMG_OBJ_NUMA(flags) (((flags) >> 16) & 0xffu)

typedef struct phosimg_device {
	uint32_t ordinal;
	uint16_t cc_major, cc_minor;
	uint64_t total_mem;
	uint8_t uuid[16];
	char name[PHOSIMG_NAME_MAX + 1];
} phosimg_device;

/* A GPU memory object: one allocation's bytes. */
typedef struct phosimg_object {
	uint32_t id; /* its index in the image's object table */
	uint32_t device;
	uint64_t va;
	uint64_t size;
	uint32_t flags;
	/* The tracer's handle number for a PHOSIMG_OBJ_APP_VMM object, by
	 * which it maps the memory again after a restore; 0 otherwise.
	 * Format 1.1; read as 0 from 1.0 images. */
	uint32_t key;
	/* The process whose memory it is: a member's pid (format 1.2), else
	 * the checkpointed process's. The objects of one process are
	 * consecutive. */
	int32_t pid;
} phosimg_object;

/* Device memory a member maps that is an object of the image (format
 * 1.5): memory it imported from the owner, as NCCL's ranks share their
 * buffers (the owner may be itself). The image stores the bytes once, as
 * the owner's object; a restore gives the importer that object's memory
 * again. */
typedef struct phosimg_share {
	int32_t pid;     /* the member that maps it */
	uint32_t key;    /* that member's tracer's number for its import */
	uint32_t object; /* the object */
} phosimg_share;
#define PHOSIMG_SHARES_MAX (1u << 16)

/* Member flags. */
#define PHOSIMG_MEMBER_CUDA 0x1u   /* a CUDA process: the driver checkpointed it */
#define PHOSIMG_MEMBER_TRACED 0x2u /* ran under the tracer: its device memory is in the image */
/* The root only (format 1.4): the init of a pid namespace of the tree's
 * own (`phos run`); a restore gives the tree a new one, whatever pids
 * this machine has taken, and every member its pid there (ns_pid). */
#define PHOSIMG_MEMBER_NS_INIT 0x4u

/* One process of a checkpointed process tree (format 1.2). */
typedef struct phosimg_member {
	int32_t pid, ppid;
	uint32_t flags; /* PHOSIMG_MEMBER_* */
	/* Its objects: [first_object, first_object + object_count). Filled by
	 * the writer from the objects' pids; ignored in set_meta. */
	uint32_t first_object, object_count;
	char comm[PHOSIMG_COMM_MAX]; /* its name, as in /proc/PID/comm */
	/* Its pid inside the tree's own pid namespace (the root's is 1), when
	 * the root is PHOSIMG_MEMBER_NS_INIT; 0 otherwise, and in images
	 * before format 1.4. pid is always the host's. */
	int32_t ns_pid;
} phosimg_member;

/* What the checkpoint is of. */
typedef struct phosimg_meta {
	int32_t pid;
	uint32_t uid, gid;
	const char *cmdline; /* argv, each string NUL-terminated */
	size_t cmdline_len;
	uint32_t protocol; /* enum phosimg_protocol */
	uint64_t t1_ns, t2_ns; /* CLOCK_REALTIME nanoseconds; 0 = none */
	const phosimg_device *devices;
	uint32_t device_count;
	/* The processes of the tree, the root (pid) first; none for an image
	 * of one process written before format 1.2. */
	const phosimg_member *members;
	uint32_t member_count;
} phosimg_meta;

/* One named value of the job that wrote the image (format 1.6): what the
 * checkpoint cost, such as "stall_ns" or "step_ns.park" (FORMAT.md, "STATS"
 * lists the names phos writes). A name is 1 to PHOSIMG_STAT_NAME_MAX bytes
 * of [a-z0-9_.-], starting with a letter. */
#define PHOSIMG_STAT_NAME_MAX 64
#define PHOSIMG_STATS_MAX 1024 /* named values in one image */
typedef struct phosimg_stat {
	char name[PHOSIMG_STAT_NAME_MAX + 1];
	uint64_t value;
} phosimg_stat;

/* ---- writer --------------------------------------------------------------- */

typedef struct phosimg_writer phosimg_writer;

typedef struct phosimg_writer_opts {
	uint32_t chunk_size; /* 0 = PHOSIMG_CHUNK_DEFAULT; a power of two */
	bool lz4;            /* compress chunks that shrink */
	/* Parent image for an incremental checkpoint, as stored: absolute, or
	 * relative to the directory that will hold this image. NULL = none. */
	const char *parent;
	/* Data files written at once (0 or 1: gpu.data alone), at most
	 * PHOSIMG_STRIPES_MAX. A file system whose files each take one writer
	 * at a time (tmpfs) writes faster with one per writer thread. */
	uint32_t stripes;
} phosimg_writer_opts;

/* Starts an image that will be published at `path`, which must not exist.
 * Everything is written under a temporary name beside it (removed again by
 * phosimg_writer_abort, or left for the next create to clear if the writer
 * dies) and appears at `path` only when phosimg_writer_finish succeeds.
 * Errors: -EEXIST (path exists), -EINVAL, -ENOENT (parent image or the
 * directory missing), -EBADMSG (parent corrupt), errno of mkdir/open. */
int phosimg_writer_create(const char *path, const phosimg_writer_opts *opts, phosimg_writer **out);

/* Records the process, protocol, times, devices and members. The strings
 * and arrays are copied. Errors: -EINVAL (over the limits above, or the
 * first member is not pid), -ENOMEM. */
int phosimg_writer_set_meta(phosimg_writer *w, const phosimg_meta *meta);

/* Adds an object (its id is ignored) and returns its id in *id. Objects are
 * added before any chunk of theirs; in an image with members, obj->pid
 * names its member, and each member's objects are added one after another.
 * Errors: -EINVAL (size 0; a pid that is no member, or whose objects were
 * already followed by another member's), -E2BIG (too many objects),
 * -ENOMEM. */
int phosimg_writer_add_object(phosimg_writer *w, const phosimg_object *obj, uint32_t *id);

/* Records that member sh->pid maps object sh->object, which it imported,
 * under its tracer's key sh->key. Errors: -EINVAL (no such object, a pid
 * that is no member, a key the member already has), -E2BIG (too many),
 * -ENOMEM. */
int phosimg_writer_add_share(phosimg_writer *w, const phosimg_share *sh);

/* Stores one chunk of object `obj`: `offset` is a multiple of the chunk
 * size and `len` is the chunk size, or what is left of the object at its
 * end. Safe from several threads at once; chunks come in any order. The
 * data is read before the call returns. Errors: -EINVAL (not a chunk),
 * -EEXIST (chunk already stored), -ENOSPC/-EIO (writing failed: the writer
 * is then failed, and finish refuses to publish). */
int phosimg_writer_put(phosimg_writer *w, uint32_t obj, uint64_t offset, const void *data, size_t len);

/* Records that the chunk at `offset` of `obj` is unchanged since the parent
 * image, which holds an object with the same device, VA and size; no data
 * is written. Errors: -EINVAL, -EEXIST, -ENOENT (no parent, or no such
 * object or chunk in it). */
int phosimg_writer_put_unchanged(phosimg_writer *w, uint32_t obj, uint64_t offset);

/* Records the named value `name` (a stat: see phosimg_stat), replacing
 * the value an earlier call gave it; any time before finish, from any
 * thread. Errors: -EINVAL (a bad name), -E2BIG (PHOSIMG_STATS_MAX names
 * already), -ENOMEM. */
int phosimg_writer_set_stat(phosimg_writer *w, const char *name, uint64_t value);

/* The directory CRIU's image files go into (criu dump -D). */
const char *phosimg_writer_criu_dir(const phosimg_writer *w);

/* Bytes of chunk data written so far, after compression. */
uint64_t phosimg_writer_stored_bytes(const phosimg_writer *w);

/* The directory the image is written in until finish renames it to its
 * path; its gpu.data may be read while the image is written. */
const char *phosimg_writer_tmp_dir(const phosimg_writer *w);

/* How many bytes at the start of gpu.data are final: a reader of the
 * unpublished file may read below this offset, never above it. It grows
 * as chunks are stored, in steps of whole padded chunks; padding that the
 * file does not hold yet reads as zeros. Safe from any thread. */
uint64_t phosimg_writer_data_ready(const phosimg_writer *w);

/* Checks that every chunk of every object is stored, makes the image
 * durable (fsync) and publishes it at its path (rename). Frees w either
 * way; on failure nothing is published and the temporary files are gone.
 * Errors: -ENODATA (a chunk is missing), -EEXIST (path appeared), the
 * writer's earlier error, errno of fsync/rename. */
int phosimg_writer_finish(phosimg_writer *w);

/* Removes the half images in dir that writers which died left there
 * (".NAME.tmp-PID.N" whose PID no longer runs); images being written
 * stay. Errors: errno of opening dir. */
int phosimg_clear_stale(const char *dir);

/* Discards an unpublished image and frees w. */
void phosimg_writer_abort(phosimg_writer *w);

/* ---- reader --------------------------------------------------------------- */

typedef struct phosimg phosimg;

typedef struct phosimg_criu_file {
	char name[PHOSIMG_NAME_MAX + 1];
	uint64_t size;
	uint8_t hash[16];
} phosimg_criu_file;

/* An image's manifest, as read. */
typedef struct phosimg_info {
	uint16_t version_major, version_minor;
	uint8_t uuid[16];
	phosimg_meta meta; /* strings and devices point into the image */
	uint64_t created_ns;
	uint32_t chunk_size;
	bool has_parent;
	uint8_t parent_uuid[16];
	char parent_path[PHOSIMG_PATH_MAX + 1];
	const phosimg_object *objects;
	uint32_t object_count;
	uint64_t chunk_count;   /* index entries */
	uint64_t parent_chunks; /* of which refer to the parent */
	uint64_t raw_bytes;     /* sum of object sizes */
	uint64_t stored_bytes;  /* chunk bytes in this image's gpu.data */
	uint64_t data_file_size;
	const phosimg_criu_file *criu_files;
	uint32_t criu_file_count;
	const phosimg_share *shares; /* format 1.5; none before */
	uint32_t share_count;
	uint32_t depth; /* images in the chain: 1 without a parent */
	/* The writer's named values (format 1.6), in ascending byte order of
	 * their names; none before, or where it set none. */
	const phosimg_stat *stats;
	uint32_t stat_count;
} phosimg_info;

/* Where a chunk's bytes are. */
typedef struct phosimg_chunk {
	uint32_t object;
	uint64_t index;   /* chunk number within the object */
	uint32_t raw_len; /* bytes of the object it holds */
	uint32_t stored_len;
	bool lz4;
	bool in_parent;
	uint8_t hash[16]; /* XXH3-128 of the raw bytes */
} phosimg_chunk;

/* Opens the image at path and the chain of its parents, and checks their
 * structure: magic numbers, versions, checksums of the manifest and index,
 * sizes, and that every chunk of every object is there. Chunk data is
 * checked as it is read. Errors: -ENOENT, -EBADMSG, -EPROTONOSUPPORT,
 * -ELOOP (the parent chain is a cycle or deeper than PHOSIMG_DEPTH_MAX). */
int phosimg_open(const char *path, phosimg **out);

/* phosimg_open of an image whose data files are still being written in
 * order, as phos receive writes one (its manifest, index and CRIU files
 * whole): a file shorter than the manifest says is no error, and a read
 * of bytes not there yet waits for them, failing as a short file does
 * (-EBADMSG) once the file has not grown for 30 s. Errors: as
 * phosimg_open's. */
int phosimg_open_growing(const char *path, phosimg **out);

void phosimg_close(phosimg *img);

const phosimg_info *phosimg_get_info(const phosimg *img);

/* The path of the image's CRIU files. */
const char *phosimg_criu_dir(const phosimg *img);

/* The value of the stat `name` of the image in *value. Errors: -ENOENT
 * (the image has no such stat), -EINVAL. */
int phosimg_stat_get(const phosimg_info *in, const char *name, uint64_t *value);

/* Describes chunk `index` of object `obj`. Errors: -EINVAL (no such chunk). */
int phosimg_chunk_info(const phosimg *img, uint32_t obj, uint64_t index, phosimg_chunk *out);

/* Reads len bytes of object obj from offset into buf, following parents,
 * checking each chunk's checksum. Safe from several threads at once.
 * Errors: -EINVAL (outside the object), -EBADMSG (a chunk is corrupt),
 * errno of read. */
int phosimg_read(phosimg *img, uint32_t obj, uint64_t offset, void *buf, size_t len);

/* One chunk read in pieces, in order, for a copy that hands each piece on
 * (to a device) before it reads the next, through little memory that
 * stays in the CPU's cache. The chunk's checksum is known only at
 * phosimg_stream_end: until it returns 0, the bytes handed on are not
 * known good, and a caller whose end fails must not use them. One stream
 * is for one thread; several may read one image at once. */
typedef struct phosimg_stream phosimg_stream;

/* Makes a stream that reads img. Errors: -EINVAL, -ENOMEM. */
int phosimg_stream_new(phosimg *img, phosimg_stream **out);
/* Frees s (NULL: nothing). */
void phosimg_stream_free(phosimg_stream *s);
/* Starts chunk `index` of object obj, following parents; *len is its
 * raw bytes. Errors: -EINVAL (no such chunk), -ENOTSUP (the chunk is
 * compressed: phosimg_read it whole). */
int phosimg_stream_start(phosimg_stream *s, uint32_t obj, uint64_t index, uint32_t *len);
/* Reads the chunk's next len bytes into buf. Errors: -EINVAL (past the
 * chunk's end, or no chunk started), -EBADMSG (the data file ends
 * early), errno of read. */
int phosimg_stream_read(phosimg_stream *s, void *buf, size_t len);
/* Ends the chunk: checks that all of it was read, that its padding is
 * zero and its checksum matches. Errors: -EINVAL (bytes left unread, or
 * no chunk started), -EBADMSG (the chunk is corrupt), errno of read. */
int phosimg_stream_end(phosimg_stream *s);

/* Reads every chunk of the image and of its parents, every CRIU file and
 * the padding of the data file, and checks them all. Returns 0 when the
 * whole chain is sound; on the first fault, its error (-EBADMSG, -ENOENT…)
 * with phosimg_last_error() describing it. */
int phosimg_verify(phosimg *img);

/* Which CRIU files phosimg_verify_criu checks the checksums of (every
 * byte is read): the page data (CRIU's pages-*.img), the rest, or both. */
#define PHOSIMG_SUMS_PAGES 1u
#define PHOSIMG_SUMS_REST 2u
#define PHOSIMG_SUMS_ALL (PHOSIMG_SUMS_PAGES | PHOSIMG_SUMS_REST)

/* Checks the image's own CRIU files against its manifest's CRIU section
 * (every format version has one): each one listed is there, of its size,
 * and no other is; and the checksums of those that sums (PHOSIMG_SUMS_*,
 * 0 for none) names. Errors: -ENOENT (a file is missing), -EBADMSG (a
 * size, a checksum, a file not listed), -ENOMEM, with
 * phosimg_last_error() naming the file. */
int phosimg_verify_criu(phosimg *img, unsigned sums);

/* The message for the last error of this thread, or "" if none. */
const char *phosimg_last_error(void);

/* Writes uuid as 8-4-4-4-12 lowercase hex digits and a NUL into out
 * (PHOSIMG_UUID_TEXT bytes). */
#define PHOSIMG_UUID_TEXT 37
void phosimg_uuid_text(const uint8_t uuid[16], char out[PHOSIMG_UUID_TEXT]);

#ifdef __cplusplus
}
#endif
#endif
