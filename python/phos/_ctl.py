# SPDX-License-Identifier: LGPL-2.1-or-later
"""Checkpoint and restore: the ctl commands of phosfs(8), as phos(1) writes them."""

import os
import re

from . import _fs
from ._status import read_status

PROTOCOLS = ("cow", "recopy", "stop")
MODES = ("lazy", "eager")
# How long a wait may take by default: phosfs gives each step of a job a
# deadline of its own (CRIU's dump and each step of a restore 600 s), so
# a job ends well within it.
WAIT_TIMEOUT = 1800.0
_POLL = 0.02
_RESTORE_POLL = 0.005


def _proc_paths(pid, mount):
    mnt = _fs.mount_path(mount)
    return mnt, os.path.join(mnt, str(pid))


def _no_process(pid):
    return "no such process: %d is not running, and phosfs knows no checkpoint of it" % pid


def checkpoint(pid, protocol="cow", wait=True, name=None, kill=False, timeout=None,
               wait_timeout=WAIT_TIMEOUT, mount=None):
    """Checkpoints process pid and its tree (its whole job, for a process
    of ``phos run``), as ``phos checkpoint`` does.

    Writes ``checkpoint PROTOCOL [name=NAME] [kill] [timeout=SECONDS]`` to
    ``MOUNT/PID/ctl``. protocol is ``"cow"`` (the process runs on while
    its device memory is copied; needs a process under the tracer),
    ``"recopy"`` (the state at the end, for migration), ``"stop"``, or
    None for phosfs's choice (cow where the tree has a traced process,
    else stop). name names the image (phosfs numbers it otherwise); kill
    ends the process once it is saved; timeout is how long, in seconds,
    each process may take to quiesce (phosfs's ``--checkpoint-timeout``
    otherwise).

    With wait (the default), waits until the job has ended (``job:
    none``), for up to wait_timeout seconds, and returns a dict: ``pid``,
    ``name`` (the image's), ``dir`` (the image in phosfs's store, as the
    events say it; ``MOUNT/PID/checkpoints/NAME`` shows it too),
    ``protocol``, ``stall_ms`` (how long the process was stopped), and
    ``status``, the process's status then. Without wait, returns None
    once phosfs has taken the command; ``wait_checkpoint`` waits later.

    Raises ValueError for a bad argument, PhosError when phosfs is not
    mounted, there is no such process, permission is denied, phosfs
    refuses the command or the checkpoint fails (with phosfs's error
    text), and PhosTimeout when the job runs past wait_timeout (it goes
    on; ``cancel`` stops it).
    """
    pid = _fs.check_pid(pid)
    words = ["checkpoint"]
    if protocol is not None:
        if protocol not in PROTOCOLS:
            raise ValueError("protocol must be one of %s (or None for phosfs's choice), not %r"
                             % (", ".join(PROTOCOLS), protocol))
        words.append(protocol)
    if name is not None:
        words.append("name=" + _fs.check_word("name", name))
    if kill:
        words.append("kill")
    if timeout is not None:
        words.append("timeout=%r" % _fs.check_deadline("timeout", timeout))
    if wait:
        wait_timeout = _fs.check_deadline("wait_timeout", wait_timeout)
    mnt, base = _proc_paths(pid, mount)
    _fs.ctl(os.path.join(base, "ctl"), " ".join(words) + "\n", mnt, _no_process(pid),
            "only root and the owner of process %d may checkpoint it" % pid)
    if not wait:
        return None
    return wait_checkpoint(pid, wait_timeout, mount)


def _job_of(st):
    """The job a status names: its running one, else its last one."""
    job = st.get("job")
    if job is not None:
        return str(job)
    last = st.get("last_job")
    if isinstance(last, list):
        last = last[-1]
    return str(last or "")


def wait_checkpoint(pid, wait_timeout=WAIT_TIMEOUT, mount=None):
    """Waits until the checkpoint job of process pid has ended, for up to
    wait_timeout seconds, and returns what ``checkpoint`` with wait
    returns; raises as it does."""
    pid = _fs.check_pid(pid)
    dl = _fs.Deadline(_fs.check_deadline("wait_timeout", wait_timeout))
    mnt, base = _proc_paths(pid, mount)
    who = "only root and the owner of process %d may see its status" % pid
    while True:
        st = read_status(base, mnt, _no_process(pid), who)
        if st.get("job") is None:
            break
        if not dl.sleep(_POLL):
            raise _fs.PhosTimeout(
                "the checkpoint of process %d is still running after %g s (job: %s; step: %s); it goes on "
                "(phos.cancel(%d) stops it)" % (pid, dl.seconds, st.get("job"), st.get("step"), pid),
                None, os.path.join(base, "status"))
    last = _job_of(st)
    if not last.startswith("checkpoint"):
        raise _fs.PhosError("process %d has no checkpoint to wait for (last job: %s)" % (pid, last or "none"),
                            None, os.path.join(base, "status"))
    if last.endswith(": failed"):
        err = st.get("error")
        raise _fs.PhosError(str(err) if err else last, None, os.path.join(base, "status"))
    m = re.search(r"\bname=([A-Za-z0-9._-]+)", last)
    name = m.group(1) if m else st.get("last_checkpoint")
    name = None if name is None else str(name)
    m = re.match(r"checkpoint (\w+)", last)
    protocol = m.group(1) if m else st.get("protocol")
    owner = st.get("job_pid") if isinstance(st.get("job_pid"), int) else pid
    store = _fs.store_path(mnt)
    if name is None:
        where = None
    elif store:
        where = os.path.join(store, str(owner), name)
    else:
        where = os.path.join(mnt, str(owner), "checkpoints", name)
    stall = st.get("stall_ms")
    return {"pid": pid, "name": name, "dir": where, "protocol": protocol,
            "stall_ms": float(stall) if isinstance(stall, (int, float)) else None, "status": st}


def cancel(pid, mount=None):
    """Asks the running checkpoint of process pid to stop early (``cancel``
    to ``MOUNT/PID/ctl``): the process runs on and nothing is published.
    Raises PhosError as ``checkpoint`` does (phosfs's text when no job
    runs)."""
    pid = _fs.check_pid(pid)
    mnt, base = _proc_paths(pid, mount)
    _fs.ctl(os.path.join(base, "ctl"), "cancel\n", mnt, _no_process(pid),
            "only root and the owner of process %d may cancel its checkpoint" % pid)


def _devices(devices):
    """device=OLD=NEW,... from a str, a dict or pairs."""
    if isinstance(devices, str):
        text = devices
    else:
        items = devices.items() if isinstance(devices, dict) else devices
        text = ",".join("%s=%s" % (old, new) for old, new in items)
    return _fs.check_word("devices", text)


def restore(dir, mode="lazy", wait=True, devices=None, lazy_pages=False, full=False,
            wait_timeout=WAIT_TIMEOUT, mount=None):
    """Restores the image at dir (a checkpoint's folder: in the store, a
    copy of it, or ``MOUNT/PID/checkpoints/NAME``), as ``phos restore``
    does; root only.

    Writes ``restore ABSDIR [lazy|eager] [lazy-pages] [device=OLD=NEW,...]``
    to ``MOUNT/ctl``. mode ``"lazy"`` (the default) lets the process run
    as soon as it is restored, its device memory coming back while it
    runs; ``"eager"`` brings all of it back first. lazy_pages brings the
    CPU pages back while it runs too. devices moves the image's GPUs onto
    others of this machine: ``"0=1,1=0"``, ``{0: 1, 1: 0}`` or pairs
    (ordinals or ``GPU-`` UUIDs).

    With wait (the default), follows ``MOUNT/restores/ID`` until the
    restored tree runs (with full: until all its device memory is back,
    as ``phos restore --wait``), for up to wait_timeout seconds, and
    returns the restored process's pid: for a job of ``phos run
    --pid-ns``, a new one. Without wait, returns the restore's id at once;
    ``wait_restore`` follows it later.

    Raises ValueError for a bad argument, PhosError when phosfs is not
    mounted, dir is not a directory, permission is denied, or phosfs
    refuses or fails the restore (with its error text), and PhosTimeout
    when it runs past wait_timeout (it goes on).
    """
    if mode not in MODES:
        raise ValueError("mode must be one of %s, not %r" % (", ".join(MODES), mode))
    path = os.fspath(dir)
    if not os.path.isdir(path):
        why = "no such directory" if not os.path.exists(path) else "not a directory"
        raise _fs.PhosError("%s: %s (a restore takes a checkpoint's folder)" % (path, why), None, path)
    absdir = _fs.check_word("the restore's directory (phosfs takes no blanks in it)",
                            os.path.realpath(path))
    words = ["restore", absdir, mode]
    if lazy_pages:
        words.append("lazy-pages")
    if devices is not None:
        words.append("device=" + _devices(devices))
    if wait:
        wait_timeout = _fs.check_deadline("wait_timeout", wait_timeout)
    mnt = _fs.mount_path(mount)
    ctl = os.path.join(mnt, "ctl")
    answer = _fs.ctl(ctl, " ".join(words) + "\n", mnt, "%s is missing" % ctl, "only root may restore")
    m = re.match(r"restore ([0-9]+)$", answer)
    if not m:
        raise _fs.PhosError("%s: unexpected answer %r" % (ctl, answer), None, ctl)
    rid = int(m.group(1))
    if not wait:
        return rid
    return wait_restore(rid, full, wait_timeout, mount)


def wait_restore(restore_id, full=False, wait_timeout=WAIT_TIMEOUT, mount=None):
    """Follows restore restore_id (``MOUNT/restores/ID``) until its tree
    runs, or with full until all its device memory is back, for up to
    wait_timeout seconds; returns the restored pid. Raises PhosError with
    phosfs's error text when the restore failed, PhosTimeout when it runs
    past wait_timeout."""
    if isinstance(restore_id, bool) or not isinstance(restore_id, int) or restore_id <= 0:
        raise ValueError("restore_id must be a positive integer, not %r" % (restore_id,))
    dl = _fs.Deadline(_fs.check_deadline("wait_timeout", wait_timeout))
    mnt = _fs.mount_path(mount)
    path = os.path.join(mnt, "restores", str(restore_id))
    gone = ("restore %d: phosfs does not show it (it keeps the last 64 restores that ended, "
            "until it is started again)" % restore_id)
    while True:
        st = read_status(path, mnt, gone, "only root may follow restores")
        state = st.get("state")
        if state == "failed":
            no = st.get("errno")
            raise _fs.PhosError(str(st.get("error") or "restore %d failed" % restore_id),
                                no if isinstance(no, int) else None, path)
        if state == "done" or (state == "resumed" and not full):
            pid = st.get("restored_pid")
            if not isinstance(pid, int):
                raise _fs.PhosError("restore %d: %s names no restored pid" % (restore_id, path), None, path)
            return pid
        if not dl.sleep(_RESTORE_POLL):
            raise _fs.PhosTimeout("restore %d is still %s after %g s (step: %s); it goes on"
                                  % (restore_id, state, dl.seconds, st.get("step")), None, path)
