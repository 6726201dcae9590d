# SPDX-License-Identifier: LGPL-2.1-or-later
"""The events of phosfs (MOUNT/events): one JSON object a line."""

import errno
import json
import os
import select

from . import _fs

EVENTS = (
    "checkpoint.started", "checkpoint.stalled", "checkpoint.resumed", "checkpoint.off_gpu",
    "checkpoint.published", "checkpoint.failed",
    "restore.started", "restore.resumed", "restore.done", "restore.failed",
)


def _as_set(what, v, kind):
    if v is None:
        return None
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        v = [v]
    out = set()
    for x in v:
        if kind is int:
            out.add(_fs.check_pid(x))
        elif isinstance(x, str) and x:
            out.add(x)
        else:
            raise ValueError("%s must be event names (such as 'checkpoint.published' or 'restore'), not %r"
                             % (what, x))
    return out


class Events:
    """An iterator over the events of phosfs, from the moment it was made
    on: ``phos.events()`` makes one. Each is a dict such as ``{"seq": 12,
    "time": 1764250000.123, "event": "checkpoint.published", "pid": 1234,
    "name": "3", "protocol": "cow", "dir": "/var/lib/phos/1234/3",
    "stall_ms": 512.3, "error": null}``. Close it (or use it in a ``with``
    block) to let go of the file."""

    def __init__(self, names=None, pids=None, timeout=None, mount=None):
        self._fd = -1
        self._names = _as_set("names", names, str)
        self._pids = _as_set("pids", pids, int)
        self._timeout = None if timeout is None else _fs.check_deadline("timeout", timeout)
        self._buf = b""
        mnt = _fs.mount_path(mount)
        self.path = os.path.join(mnt, "events")
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise _fs.open_error(self.path, e, mnt,
                                 "%s is missing: this phosfs has no events (it is older than this package)"
                                 % self.path, "phosfs's events are not this user's to read") from None
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)

    def _matches(self, ev):
        if ev.get("event") == "lost":
            return True  # whatever the filter: events were missed
        if self._names is not None:
            name = str(ev.get("event", ""))
            if not any(name == n or name.startswith(n.rstrip(".") + ".") for n in self._names):
                return False
        return self._pids is None or ev.get("pid") in self._pids

    def _line(self, dl):
        """The next line, or None when the deadline passed or the file
        ended."""
        while b"\n" not in self._buf:
            if self._fd < 0:
                return None
            wait_ms = -1 if dl is None else int(dl.left() * 1000 + 0.999)
            if dl is not None and wait_ms <= 0:
                return None
            try:
                ready = self._poll.poll(wait_ms)
            except InterruptedError:
                continue
            if not ready:
                continue
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                continue  # phosfs lets only so many reads wait at once: poll again
            except OSError as e:
                if e.errno in (errno.ENOTCONN, errno.ENODEV):
                    self.close()
                    raise _fs.PhosError("%s: phosfs went away (it was stopped, or its mount taken away) while its "
                                        "events were read" % self.path, e.errno, self.path) from None
                raise _fs.PhosError("%s: %s" % (self.path, os.strerror(e.errno)), e.errno, self.path) from None
            if not data:
                self.close()  # phosfs ended the file: it was unmounted
                return None
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def __iter__(self):
        return self

    def __next__(self):
        dl = None if self._timeout is None else _fs.Deadline(self._timeout)
        while True:
            line = self._line(dl)
            if line is None:
                raise StopIteration
            if not line.strip():
                continue
            try:
                ev = json.loads(line.decode("utf-8", "replace"))
            except ValueError as e:
                raise _fs.PhosError("%s: a line that is not JSON (%s): %r" % (self.path, e, line[:200]),
                                    None, self.path) from None
            if isinstance(ev, dict) and self._matches(ev):
                return ev

    def close(self):
        """Closes the events file; the iteration ends."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            self._poll.unregister(fd)
            try:
                os.close(fd)
            except OSError:
                pass  # a mount that went away: the fd is closed all the same

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


def events(names=None, pids=None, timeout=None, mount=None):
    """An iterator over phosfs's events (``MOUNT/events``), from now on:
    each a dict, in the order phosfs saw them.

    names keeps only these events: full names (``"checkpoint.published"``)
    or their first part (``"restore"`` for every ``restore.*``); pids only
    the events of these processes (a pid or a list of them; ``pid`` is the
    one ``phos run`` printed, and a restore's events carry the restored
    pid once it is known). The file is opened here, so an event that
    happens after this call is seen, even if the iteration starts later.

    With timeout (seconds), the iteration ends (StopIteration: a ``for``
    loop just stops) when no event that passes the filter came for that
    long; without, each step waits as long as it takes. A reader that
    fell too far behind gets ``{"event": "lost", "count": N}`` (whatever
    the filter) for the N events it missed. Raises PhosError when phosfs
    is not mounted, has no events file, or this user may not read it, and
    when phosfs goes away while the iteration waits.
    """
    return Events(names, pids, timeout, mount)
