/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Running CRIU (criu.c): dump, restore, the lazy-pages daemon, and its
 * log turned into a sentence for people.
 */
#ifndef PHOS_ENGINE_CRIU_H
#define PHOS_ENGINE_CRIU_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "cgroup.h"
#include "criu-image.h"
#include "error.h"

/* CRIU plugins (criu -L): phos's, for device files that forked children
 * of CUDA processes keep. NULL or "" for none. Set once, before jobs. */
extern const char *engine_criu_plugins;

/* Whether criu takes --parallel-pages (mk/criu-patches/): its dump then
 * writes the pages of the tree's processes at once, one writer each. The
 * first call for a criu runs `criu --help` (make it before a stall); the
 * answer is kept for the next ones. False when criu cannot be run. */
bool criu_parallel_pages(const char *criu);

/* Whether criu takes --snapshot-pages (mk/criu-patches/): its dump then
 * saves the tree's pages from a copy-on-write clone of each process,
 * after the tree runs on. Asked as criu_parallel_pages. */
bool criu_snapshot_pages(const char *criu);

/* Whether criu takes --start-fd (mk/criu-patches/): its dump then readies
 * itself and waits for a byte before it seizes the tree. Asked as
 * criu_parallel_pages. */
bool criu_start_fd(const char *criu);

/* How many threads criu restore reads each task's pages with
 * (--pages-threads, mk/criu-patches/): the CPUs, at most 8, or
 * $PHOS_RESTORE_PAGE_THREADS (0 to 64); 0 where criu lacks the option.
 * Asked as criu_parallel_pages. */
int criu_pages_threads(const char *criu);

/* A dump whose tree runs on while CRIU still writes its pages. */
typedef struct criu_tail {
	pid_t pid;          /* CRIU; 0 when nothing is left to wait for */
	pid_t root;         /* the dumped tree's */
	uint64_t end_ns;    /* its deadline (engine_now_ns; 0: none) */
	int timeout_s;
	const atomic_bool *cancel; /* its dumper's (criu_dump_cancel_on) */
	char log[PATH_MAX];
	char dir[PATH_MAX];
} criu_tail;

/* What a dump leaves of its tree: running (--leave-running), nothing
 * (CRIU kills it), or stopped (--leave-stopped: every task stays stopped
 * until it is sent SIGCONT or SIGKILL). */
enum { CRIU_LEAVE_RUNNING = 0, CRIU_LEAVE_KILLED = 1, CRIU_LEAVE_STOPPED = 2 };

/* A dump made ready ahead of its tree's stall (criu_dump_ready). */
typedef struct criu_dumper {
	pid_t pid;  /* CRIU, when started; 0 otherwise */
	int go;     /* its --start-fd's write end, or -1 */
	int status; /* its --status-fd's read end, or -1 */
	pid_t root;
	int leave; /* CRIU_LEAVE_* */
	bool snapshot;
	int timeout_s;
	const atomic_bool *cancel; /* NULL, or criu_dump_cancel_on's */
	char criu[PATH_MAX], dir[PATH_MAX], log[PATH_MAX];
} criu_dumper;

/* Readies criu_dump's dump of pid's tree (same arguments; tail: whether
 * criu_dump_go will be given one): where criu takes --start-fd, CRIU
 * starts now and readies all it can without the tree; it seizes nothing
 * before criu_dump_go. The dump's timeout counts from criu_dump_go.
 * criu_dump_drop ends d either way. Errors: -ENAMETOOLONG, socketpair's,
 * pipe's and fork's, or CRIU's log that cannot be opened (er says
 * which). */
int criu_dump_ready(const char *criu, pid_t pid, const char *dir, int leave, int timeout_s, const char *log,
		    bool tail, criu_dumper *d, perr *er);

/* Lets d's dump seize its tree (starting CRIU now where it did not start
 * ahead), and returns as criu_dump. Errors: as criu_dump's. */
int criu_dump_go(criu_dumper *d, criu_tail *tail, perr *er);

/* From now on, d's dump (and the tail criu_dump_go gives) is stopped
 * once *cancel reads true: before criu_dump_go, CRIU never starts on the
 * tree; after it, CRIU is killed with its process group within 50 ms,
 * except while it holds the tree (ptrace: its code may be in the tree's
 * processes), which it is left to let go of first, within the dump's
 * deadline. criu_dump_go or criu_dump_wait then fails -ECANCELED. cancel
 * must outlive d and its tail. */
void criu_dump_cancel_on(criu_dumper *d, const atomic_bool *cancel);

/* Ends what is left of d: a CRIU still waiting to start is told not to
 * (it ends without touching the tree, and says so in its log) and reaped,
 * killed with its process group after 2 s. */
void criu_dump_drop(criu_dumper *d);

/* Runs `criu dump` of pid's tree into dir (with --parallel-pages where
 * criu has it), leaving it as leave says (CRIU_LEAVE_*); CRIU is stopped after
 * timeout_s seconds (0: never). CRIU's log goes to log. With tail, where
 * criu takes --snapshot-pages and the tree is left running, it returns once the tree runs
 * on, and *tail is what is left: criu_dump_wait ends it (tail->pid 0: the
 * dump is whole). Errors: -EIO (er gives CRIU's first real error, what
 * it names, and what to do), -ENOSPC (the store holding dir was full when
 * it failed), -ETIMEDOUT, -ECANCELED (criu_dump_cancel_on), pipe's. */
int criu_dump(const char *criu, pid_t pid, const char *dir, int leave, int timeout_s, const char *log,
	      criu_tail *tail, perr *er);

/* Waits, within the dump's deadline, until CRIU has written what tail
 * left and ended; nothing to do when tail->pid is 0 (it is 0 after).
 * Errors: as criu_dump's. */
int criu_dump_wait(criu_tail *tail, perr *er);

/* Runs `criu restore` from dir, detached; *root is then the restored
 * tree's root as this (the host's) pid namespace sees it: its old pid, or
 * any, for a tree CRIU gave a pid namespace of its own. With lazy_dir (a
 * criu_pages_start's work directory), the tree runs before its CPU pages
 * are back. With script (or NULL), CRIU runs it at each of its actions
 * (--action-script; a gate's: criu-gate.h). st (or NULL) gets what CRIU
 * measured (all 0 where it wrote no statistics). With cg, the tree goes
 * into cg's cgroups (CRIU joins them before it makes the tree, and leaves
 * the image's alone); with NULL, into the cgroups the image names, made
 * where missing, as CRIU does. With PHOS_DEBUG set, CRIU logs at -v4.
 * Errors as criu_dump, and -EIO when CRIU says no root or cannot join a
 * cgroup of cg. */
int criu_restore(const char *criu, const char *dir, const char *lazy_dir, const char *script, const char *log,
		 const engine_cgroups *cg, pid_t *root, criu_restore_stats *st, perr *er);

/* Starts `criu lazy-pages` for the image in dir, with work directory
 * work (its socket; one per restore) and its log at log, and waits until
 * it listens. *daemon is its pid, for criu_pages_wait. Errors: -EIO (it
 * did not start; er gives its first error), fork's errno. */
int criu_pages_start(const char *criu, const char *dir, const char *work, const char *log, pid_t *daemon,
		     perr *er);

/* Waits until the lazy-pages daemon has given back every page and ended.
 * Errors: -EIO (it failed: pages it had not given back are lost; er
 * gives its first error), waitpid's errno. */
int criu_pages_wait(pid_t daemon, const char *log, perr *er);

/* Turns CRIU's log into one sentence for people: its first real error
 * line (harmless warnings skipped), with what that line names and advice
 * for the errors phos knows; "" when the log holds no error. pid is the
 * dumped tree's root (0 for a restore). */
void criu_explain(const char *log, pid_t pid, char *out, size_t len);

/* What this machine's CRIU cannot do, one sentence per limit, for the
 * log at start ("" if nothing): e.g. other users' processes without
 * CAP_SYS_RESOURCE. */
void criu_limits(char *out, size_t len);

#endif
