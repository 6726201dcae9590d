/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * proc_status_field (common/procstatus.h) reads one field of
 * /proc/PID/status by its whole name:
 *   1. this process's PPid, TracerPid and NSpid, by pid and as itself
 *      (proc_self_status_field);
 *   2. a child's Uid (the real id first), as the checkpoint records it;
 *   3. a name that is only the start of another ("Cpus_allowed" against
 *      "Cpus_allowed_list") gets its own line;
 *   4. a field that does not exist is -ENOENT; a process that is gone,
 *      and pid 0 (a peer in a pid namespace not seen from here), -ESRCH;
 *   5. a value longer than the buffer is cut, not overrun.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/procstatus.h"
#include "tap.h"

int main(void)
{
	plan(8);
	char v[256], w[256];
	int e = proc_status_field(getpid(), "PPid", v, sizeof(v));
	ok(e == 0 && atoi(v) == (int)getppid(), "PPid of this process is its parent's pid (%s)", e ? strerror(-e) : v);
	e = proc_self_status_field("PPid", w, sizeof(w));
	ok(e == 0 && !strcmp(v, w), "proc_self_status_field reads this process's own status (%s)", w);
	e = proc_status_field(getpid(), "NSpid", v, sizeof(v));
	ok(e == 0 && atoi(v) == (int)getpid() && v[strlen(v) - 1] != '\t',
	   "NSpid starts with the pid this namespace gives, without the blanks around it (%s)", v);
	e = proc_self_status_field("TracerPid", v, sizeof(v));
	ok(e == 0 && !strcmp(v, "0"), "TracerPid is 0: nothing traces this test (%s)", v);

	pid_t c = fork();
	if (c == 0) {
		pause();
		_exit(0);
	}
	e = proc_status_field(c, "Uid", v, sizeof(v));
	ok(e == 0 && strtoul(v, NULL, 10) == getuid() && strchr(v, '\t'),
	   "a child's Uid line gives the real id first, then the others (%s)", v);
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);

	e = proc_self_status_field("Cpus_allowed", v, sizeof(v));
	int e2 = proc_self_status_field("Cpus_allowed_list", w, sizeof(w));
	ok(e == 0 && e2 == 0 && strcmp(v, w) && !strchr(v, ':'),
	   "a name that starts another's reads its own line (Cpus_allowed %s, _list %s)", v, w);

	int missing = proc_self_status_field("NoSuchField", v, sizeof(v));
	int gone = proc_status_field(c, "PPid", v, sizeof(v));
	int unseen = proc_status_field(0, "PPid", v, sizeof(v));
	ok(missing == -ENOENT && gone == -ESRCH && unseen == -ESRCH,
	   "a field not there is -ENOENT (%d), a process gone -ESRCH (%d), pid 0 too (%d)", missing, gone, unseen);

	char small[4] = "xyz";
	e = proc_self_status_field("Name", small, sizeof(small));
	ok(e == 0 && strlen(small) == 3, "a value longer than the buffer is cut to fit (%s)", small);
	return done();
}
