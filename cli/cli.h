/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The phos command line's own parts (phos.c is its main): the files of
 * the mount (cli.c), phos run's --on-signal (cli-signal.c), a job name's
 * folder of images in the store (cli-jobs.c), --restore-from (cli-resume.c),
 * phos run's wait for its job (cli-wait.c), and --json (cli-json.c).
 * Functions that return an int return 0 or a negative errno, unless said.
 */
#ifndef PHOS_CLI_H
#define PHOS_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* ---- cli.c: the files of a phosfs mount ---- */

/* Where phosfs is mounted: $PHOS_MOUNT, or /phos. */
const char *cli_mount(void);

/* A whole (small) file into a malloc'd string; NULL with errno set. */
char *cli_slurp(const char *path);

/* The value of "key: value" in text, into out; false where text lacks key. */
bool cli_field(const char *text, const char *key, char *out, size_t len);

/* Says on stderr why path (a file of the mount) could not be opened
 * (e: its errno), in words a person can act on; who: who may open it. */
void cli_open_failed(const char *path, int e, const char *who);

/* Writes cmd to the ctl file at path and reads phosfs's answer into reply
 * ("ok", "restore 3", "error: …"; the first line). 0, or the negative
 * errno of the open (-ENOENT…) or of the write (-EBUSY, -EINVAL…). Says
 * nothing. */
int cli_ctl(const char *path, const char *cmd, char *reply, size_t len);

/* phosfs's store, from the mount's version file, into out. -ENOENT
 * (phosfs is not mounted). */
int cli_store(char *out, size_t len);

/* ---- cli-signal.c: --on-signal SIG=ACTION ---- */

enum sig_proto { SIG_DEFAULT, SIG_COW, SIG_RECOPY, SIG_STOP };

typedef struct on_signal {
	int sig;             /* 0: no action for this signal */
	enum sig_proto proto; /* SIG_DEFAULT: phosfs chooses (cow where traced, else stop) */
	bool kill;           /* the checkpoint ends the job (ACTION-kill) */
	bool pass;           /* the signal is passed on once it is taken (not with ,nopass or -kill) */
} on_signal;

#define ON_SIGNAL_MAX 65

/* The actions by signal number (an entry's sig is 0 where none). */
typedef struct on_signals {
	on_signal by[ON_SIGNAL_MAX];
	int n; /* how many signals have one */
} on_signals;

/* A signal's number from its name (TERM, SIGTERM, term, or a number);
 * -EINVAL for none. */
int signal_number(const char *name);

/* The signal's name without SIG ("TERM"), or "?" */
const char *signal_name(int sig);

/* Parses one --on-signal SIG=ACTION[,nopass] into set. Errors: -EINVAL
 * with why saying what is wrong (no '=', an unknown signal or action,
 * KILL or STOP, which cannot be caught, a signal given twice, ,nopass
 * after an action that kills). */
int on_signal_parse(const char *spec, on_signals *set, char *why, size_t len);

/* The checkpoint a signal's action takes, of process job, through its
 * ctl; waits for it to end, up to timeout_s (then cancels it). A
 * checkpoint already under way is waited for first. *image gets the
 * image's path (store/JOB/NAME), *stall_ms its stall. Errors: -ETIMEDOUT,
 * -EIO (it failed), or the ctl write's, with why saying what phosfs said. */
int signal_checkpoint(const on_signal *a, pid_t job, const char *store, int timeout_s, char *image, size_t ilen,
		      double *stall_ms, char *why, size_t len);

/* ---- cli-jobs.c: a job name's images in the store ---- */

/* Whether s can name a job: 1 to 64 of A-Z a-z 0-9 . _ -, not starting
 * with '.'. */
bool job_name_ok(const char *s);

/* The folder of job name's images: STORE/jobs/NAME. */
void job_dir(const char *store, const char *name, char *out, size_t len);

/* Links image (a published image of the store) as job name's newest:
 * STORE/jobs/NAME/N -> image, and latest -> N. Keeps the keep newest
 * (0: all); an older one's link goes, and its image with it when it is an
 * image of the store. Errors: -ELOOP (STORE/jobs or STORE/jobs/NAME is a
 * link phos did not make), -ENOTDIR, mkdir's, symlink's, rename's. */
int job_record(const char *store, const char *name, const char *image, int keep);

/* Removes link, a job's link to an image found damaged, leaving the image
 * for a person to look at, so that a prune never keeps it in place of a
 * good one. Errors: -EINVAL (not a link), lstat's, unlink's. */
int job_forget(const char *link);

/* The images at from, newest first: from itself when it is an image (it
 * holds manifest.phos), else the entries of a folder of images (a job's,
 * or phosfs's STORE/PID): what latest names, then the numbered ones, from
 * the highest. *out is malloc'd, each path too (cli_free_paths). Errors:
 * -ENOENT (from is neither), -ENOMEM. A folder with no image gives 0
 * paths. */
int job_images(const char *from, char ***out, int *n);

/* Frees paths from job_images. */
void cli_free_paths(char **paths, int n);

/* ---- cli-resume.c: --restore-from, and restoring one image ---- */

/* Checks every chunk and CRIU file of image. 0, or -errno with why. */
int cli_image_verify(const char *image, char *why, size_t len);

/* Restores image through the mount's ctl, with words after its path
 * ("lazy device=0=1", or NULL), and follows it until its tree runs
 * (whole: until all its device memory is back too). 0 with *pid (and the
 * restore's id in *idp, unless NULL); -EIO or -ETIMEDOUT when it failed;
 * -EACCES or -ENOTCONN (phosfs is not mounted) when no image could be
 * restored; why says which. */
int cli_restore_image(const char *image, const char *words, bool whole, pid_t *pid, unsigned *idp, char *why,
		      size_t len);

/* Follows restore id (/restores/ID) until its tree runs (whole: until all
 * its device memory is back too): 0 with *pid, or -EIO (it failed) or
 * -ETIMEDOUT, with why. */
int cli_restore_follow(unsigned id, bool whole, pid_t *pid, char *why, size_t len);

/* Restores the first good image of imgs (newest first): each is verified
 * (every chunk and CRIU file), then restored through phosfs, and followed
 * until all its device memory is back; one that is damaged or fails is
 * passed over, saying so on stderr. *pid: the restored job's pid, *used
 * the image. -ENOENT when none is good; -EACCES, -ENOTCONN (phosfs is not
 * mounted) and such, which no other image would change, said on stderr. */
int resume_newest(char **imgs, int n, pid_t *pid, char *used, size_t ulen);

/* ---- cli-wait.c: phos run, waiting for its job ---- */

typedef struct run_watch {
	pid_t job;   /* the job's pid: its /phos/PID */
	pid_t root;  /* where signals go: its init, or the job itself */
	bool child;  /* root is phos run's child (else restored: its status file says how it ended) */
	const char *store;
	const char *name; /* the job's name (its images are linked in the store), or NULL */
	int keep;         /* images a name keeps */
	int timeout_s;    /* how long a checkpoint on a signal may take */
	const on_signals *acts;
	const char *status_file; /* where the job's init says how the job ended (run_status_path), or "" */
	int events;       /* /events, to link what phosfs's schedule publishes under name, or -1 */
} run_watch;

/* Waits for the job to end; on each signal of set (blocked, read from a
 * signalfd) takes its action first, then passes the signal on to root
 * (unless the action says not to). Returns phos run's exit status: the
 * job's, 128+SIG after an action that ended the job, or 1 when it cannot
 * follow the job. The init's status file is removed. */
int run_wait(const run_watch *w, const sigset_t *set);

/* ---- cli-every.c: --checkpoint-every ---- */

/* Checks --checkpoint-every (DURATION or auto) and --mtbf (DURATION, with
 * auto only); either may be NULL. Errors: -EINVAL with why. */
int every_parse(const char *every, const char *mtbf, char *why, size_t len);

/* Asks phosfs for the job's schedule (keep > 0: it keeps the newest keep
 * of the job's numbered images), saying on stderr what it did. Errors:
 * the ctl write's, said. */
int every_start(pid_t job, const char *every, const char *mtbf, int keep);

/* /events of the mount, opened O_NONBLOCK, or -1 (said on stderr). */
int every_events_open(void);

/* Reads what fd has and calls published(image, arg) for each
 * checkpoint.published event of process job. Errors: -EPIPE (the file
 * ended: phosfs is gone). */
int every_events_take(int fd, pid_t job, void (*published)(const char *image, void *arg), void *arg);

/* ---- send.c, receive.c: a checkpoint image over a byte stream ---- */

/* phos send PID [cow|recopy|stop] [--kill] [--name NAME] [--hold SECONDS]
 * [-- COMMAND…]: phos's exit status. */
int cmd_send(int argc, char **argv);

/* phos receive [--dir DIR] [--no-restore] [eager|lazy] [--device MOVES]:
 * phos's exit status. */
int cmd_receive(int argc, char **argv);

/* ---- cli-json.c: --json ---- */

/* phos status --json PID: prints /phos/PID/status.json. phos's exit status. */
int cli_status_json(const char *pid);

/* phos ls --json: a JSON array of every process's status.json. phos's
 * exit status. */
int cli_ls_json(void);

#endif
