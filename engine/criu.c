/*
 * Running CRIU. Its log goes to a file; when it fails, the first error it
 * logged becomes the job's error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine.h"

/* The first "Error (…)" line of CRIU's log, without its timestamp. */
static void first_error(const char *log, char *out, size_t len)
{
	FILE *f = fopen(log, "re");
	*out = 0;
	if (!f)
		return;
	char line[1024];
	while (fgets(line, sizeof(line), f)) {
		char *at = strstr(line, "Error (");
		if (!at)
			continue;
		char *msg = strstr(at, "): ");
		msg = msg ? msg + 3 : at;
		msg[strcspn(msg, "\n")] = 0;
		snprintf(out, len, "%s", msg);
		break;
	}
	fclose(f);
}

static int run(const char *criu, char *const argv[], const char *log, const char *what, char *err, size_t errlen)
{
	int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (lfd < 0)
		return engine_fail(-errno, err, errlen, "cannot open CRIU's log %s: %s", log, strerror(errno));
	pid_t c = fork();
	if (c < 0) {
		int e = -errno;
		close(lfd);
		return engine_fail(e, err, errlen, "cannot start criu: %s", strerror(-e));
	}
	if (c == 0) {
		int nul = open("/dev/null", O_RDONLY);
		dup2(nul, 0);
		dup2(lfd, 1);
		dup2(lfd, 2);
		close_range(3, ~0u, 0);
		execvp(criu, argv);
		dprintf(2, "Error (phos): cannot run %s: %s\n", criu, strerror(errno));
		_exit(127);
	}
	close(lfd);
	int st;
	while (waitpid(c, &st, 0) < 0)
		if (errno != EINTR)
			return engine_fail(-errno, err, errlen, "waiting for criu: %s", strerror(errno));
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	char why[600];
	first_error(log, why, sizeof(why));
	return engine_fail(-EIO, err, errlen, "criu %s failed: %s (log: %s)", what,
			   *why ? why : "no error logged", log);
}

/* Whether pid leads its own session: CRIU needs --shell-job otherwise. */
static bool session_leader(pid_t pid)
{
	return getsid(pid) == pid;
}

int criu_dump(const char *criu, pid_t pid, const char *dir, bool kill, const char *log, char *err,
	      size_t errlen)
{
	char spid[16];
	snprintf(spid, sizeof(spid), "%d", (int)pid);
	char *argv[16];
	int n = 0;
	argv[n++] = (char *)criu;
	argv[n++] = "dump";
	argv[n++] = "-t";
	argv[n++] = spid;
	argv[n++] = "-D";
	argv[n++] = (char *)dir;
	argv[n++] = "-o";
	argv[n++] = (char *)log;
	argv[n++] = "-v2";
	if (!kill)
		argv[n++] = "--leave-running";
	if (!session_leader(pid))
		argv[n++] = "--shell-job";
	argv[n] = NULL;
	return run(criu, argv, log, "dump", err, errlen);
}

int criu_restore(const char *criu, const char *dir, const char *log, char *err, size_t errlen)
{
	char *argv[] = { (char *)criu, "restore", "-D", (char *)dir, "-o", (char *)log, "-v2", "-d", "--shell-job", NULL };
	return run(criu, argv, log, "restore", err, errlen);
}
