# SPDX-License-Identifier: LGPL-2.1-or-later
"""The phosfs mount: where it is, its files, and errors a person can act on."""

import errno as _errno
import os
import time

DEFAULT_MOUNT = "/phos"


class PhosError(Exception):
    """A phos operation failed.

    ``str(e)`` says why, in words a person can act on: phosfs is not
    mounted, there is no such process, permission is denied, or phosfs's
    own error text (``bad name 'latest' (...)``, ``checkpoint cow name=1
    failed: ...``). ``e.errno`` is the errno behind it where there is one
    (else None); ``e.path`` is the file of the mount it concerns, or None.
    """

    def __init__(self, message, errno=None, path=None):
        super().__init__(message)
        self.errno = errno
        self.path = path


class PhosTimeout(PhosError, TimeoutError):
    """A wait ran past its deadline; what it waited for may still go on."""


def mount_path(mount=None):
    """The phosfs mount: mount, else $PHOS_MOUNT, else /phos."""
    if mount:
        return os.fspath(mount)
    return os.environ.get("PHOS_MOUNT") or DEFAULT_MOUNT


def _in_job():
    """Whether this process runs in a job of phos run in a pid namespace
    of its own: its pid 1 is phos's init."""
    try:
        with open("/proc/1/comm") as f:
            return f.read().strip() == "phos-init"
    except OSError:
        return False


def not_mounted(mnt):
    """A PhosError when phosfs is not (or no longer) served at mnt, else None."""
    version = os.path.join(mnt, "version")
    try:
        os.stat(version)
        return None
    except FileNotFoundError:
        if _in_job():
            return PhosError("phosfs is not mounted at %s as this process sees it: it runs in a job of phos run "
                             "in a pid namespace of its own, which does not see phosfs's mount; drive phos from "
                             "outside the job (inside it, phos.hint() works)" % mnt, _errno.ENOENT, version)
        return PhosError("phosfs is not mounted at %s (set PHOS_MOUNT, or pass mount=)" % mnt,
                         _errno.ENOENT, version)
    except PermissionError:
        return PhosError("%s: permission denied: this user may not use the phosfs mount there" % mnt,
                         _errno.EACCES, mnt)
    except OSError as e:
        if e.errno == _errno.ENOTCONN:
            return PhosError("phosfs at %s is not running: its mount is dead (start phosfs again there: "
                             "it takes the mount over)" % mnt, e.errno, mnt)
        return PhosError("%s: %s" % (version, os.strerror(e.errno)), e.errno, version)


def open_error(path, e, mnt, missing, who):
    """The PhosError for an OSError e that opening path (a file of mnt)
    raised: missing says what ENOENT means there, who who may open it."""
    down = not_mounted(mnt)
    if down:
        return down
    if e.errno == _errno.ENOENT:
        return PhosError(missing, e.errno, path)
    if e.errno in (_errno.EACCES, _errno.EPERM):
        return PhosError("permission denied: %s (%s)" % (who, path), e.errno, path)
    return PhosError("%s: %s" % (path, os.strerror(e.errno)), e.errno, path)


def read_file(path):
    """The whole of a file of the mount, as text. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            parts.append(b)
    finally:
        os.close(fd)
    return b"".join(parts).decode("utf-8", "replace")


def ctl(path, command, mnt, missing, who):
    """Writes one command to the ctl file at path and returns phosfs's
    answer ("ok", "restore 3"). Raises PhosError with phosfs's own error
    text when it refuses the command; missing and who as for open_error."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise open_error(path, e, mnt, missing, who) from None
    try:
        err = None
        try:
            os.write(fd, command.encode())
        except OSError as e:
            err = e
        try:
            answer = os.read(fd, 4096).decode("utf-8", "replace")
        except OSError:
            answer = ""
    finally:
        os.close(fd)
    answer = answer.split("\n", 1)[0]
    if err is None:
        return answer
    if answer.startswith("error: "):
        raise PhosError(answer[len("error: "):], err.errno, path)
    raise PhosError("%s: %s" % (path, os.strerror(err.errno)), err.errno, path)


def store_path(mnt):
    """The store phosfs at mnt keeps its images in (its version file's
    "store" line), or None."""
    try:
        for line in read_file(os.path.join(mnt, "version")).splitlines():
            if line.startswith("store "):
                return line[len("store "):]
    except OSError:
        pass
    return None


def check_pid(pid):
    """pid as an int; ValueError unless it is a positive integer (or a
    string of one)."""
    if isinstance(pid, str) and pid.isascii() and pid.isdigit():
        pid = int(pid)
    if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
        return pid
    raise ValueError("pid must be a positive integer, not %r" % (pid,))


def check_word(what, value):
    """value as a str for one word of a ctl command; ValueError if it is
    empty or holds a blank or a control character, which would make it
    more than one word."""
    s = str(value)
    if not s or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in s):
        raise ValueError("%s must be one word without blanks or control characters, not %r" % (what, value))
    return s


def check_deadline(what, seconds):
    """seconds as a positive float; ValueError otherwise."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        raise ValueError("%s must be a number of seconds, not %r" % (what, seconds)) from None
    if not s > 0:
        raise ValueError("%s must be more than 0 seconds, not %r" % (what, seconds))
    return s


class Deadline:
    """A moment seconds from now, for a wait to end at."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self):
        """The seconds left, 0 once past."""
        return max(0.0, self.end - time.monotonic())

    def sleep(self, seconds):
        """Sleeps seconds, or what is left if less; False once past."""
        left = self.left()
        if left <= 0:
            return False
        time.sleep(min(seconds, left))
        return True
