/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Device memory the members of a tree share (shared.c): memory one member
 * made with cuMemCreate and exported, and another imported from the fd
 * and mapped, as the ranks of an NCCL job share their buffers. Its tracer
 * parks such an import like its own memory, marked WIRE_OBJ_IMPORTED; it
 * is the owner's object, so the image stores its bytes once and records
 * the import as a share. The driver's fds are all opens of one device
 * file: the owner is found by the open file itself (kcmp), which the
 * importer got from the owner, who keeps a dup of each fd it exported
 * and hands those over as WIRE_OBJ_ALIAS records.
 */
#ifndef PHOS_ENGINE_SHARED_H
#define PHOS_ENGINE_SHARED_H

#include "copy-out.h"
#include "park.h"

/* The imports of a tree's members, each with its owner's object. */
typedef struct engine_shares {
	engine_parked imported; /* the importers' records, with their fds */
	int *owner;             /* per import: its object's index in the tree's parked objects */
	engine_parked aliases;  /* the owners' WIRE_OBJ_ALIAS records, given back at unpark */
	int unseen;             /* objects marked WIRE_OBJ_SHARED */
} engine_shares;

/* Moves the records marked WIRE_OBJ_IMPORTED or WIRE_OBJ_ALIAS out of
 * parked into out, finds each import's owner among the rest (a process
 * may import its own memory) and marks that WIRE_OBJ_SHARED, as it marks
 * host memory (WIRE_OBJ_HOST: the CPU writes it); an import's size
 * becomes its owner's. On failure out is empty and parked as it was, but
 * for the marks on host memory. Errors: -EOPNOTSUPP (memory whose owner is not among the parked
 * objects: er names the process), -ENOMEM. */
int engine_shares_take(engine_parked *parked, engine_shares *out, perr *er);

/* Closes the imports' fds and frees out. */
void engine_shares_free(engine_shares *s);

/* pid's objects of all, then its imports and aliases of s (the records
 * the tracer unparks), into out: its arrays are out's, to free with
 * engine_parked_drop; the fds stay all's and s's. Errors: -ENOMEM. */
int engine_shares_view(const engine_parked *all, const engine_shares *s, pid_t pid, engine_parked *out);

/* After a restore's fill: pid's objects of filled (the objects of in
 * that sel selects, NULL: all, in image order), then its shares of in,
 * each with the fd of its object, into out as engine_shares_view does.
 * Errors: -ENOMEM, -EBADMSG (a share's object was not filled). */
int engine_shares_restored(const phosimg_info *in, const engine_parked *filled, const bool *sel, pid_t pid,
			   engine_parked *out);

/* Records each import as a share in the image that copy c writes (begun
 * with the tree's parked objects). Errors: the writer's (er says). */
int engine_shares_record(const engine_shares *s, const engine_copy *c, phosimg_writer *w, perr *er);

#endif
