# SPDX-License-Identifier: LGPL-2.1-or-later
"""Status files of phosfs: status.json, or the key: value text it is made from."""

import json
import os
import re

from . import _fs

# As phosfs's status.json reads the text (phosfs/status-json.c), so that
# parse_status gives the same dict as status.json does.

_INT = re.compile(r"-?[0-9]+\Z")
_FLOAT = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\Z")
_BYTES = re.compile(r"([0-9]+)/([0-9]+) bytes\Z")
_MEMBER = re.compile(r"\s*([-+]?[0-9]+)\s*(.*) gpu=([^ ]*)")
_RESTORE_ID = re.compile(r"\s*([-+]?[0-9]+)")
_STATE = re.compile(r"\s*(\S{1,31})\s*")
_TOKENS_MAX = 64


def _number(s):
    """s as an int (no point) or a float, or None when it is not one."""
    if not s or s[0] not in "0123456789-":
        return None
    if not any(c in s for c in ".eE"):
        if _INT.match(s):
            v = int(s)
            return v if -(1 << 63) <= v < (1 << 63) else None
        return None
    return float(s) if _FLOAT.match(s) else None


def _key(s):
    """A key of the dict: lower case, blanks and dashes as '_'."""
    return "".join("_" if c in " -" else c.lower() if "A" <= c <= "Z" else c for c in s[:127])


def _pairs(s, into):
    """Pairs of words and a number ("park 2.0 driver-restore 3") or of a
    number and a word ("12 written, 4 shared") into into; False, with
    into as it was, where s has neither shape."""
    tok = [t for t in re.split("[ ,]", s) if t]
    n = len(tok)
    if n < 2 or n > _TOKENS_MAX:
        return False
    obj = {}
    num_first = _number(tok[0]) is not None
    i = 0
    while i < n:
        if num_first:
            v = _number(tok[i]) if i + 1 < n else None
            if v is None:
                return False
            key = _key(tok[i + 1])
            i += 2
        else:
            w, v = i, None
            while w < n:
                v = _number(tok[w])
                if v is not None:
                    break
                w += 1
            if w == i or v is None:
                return False
            key = _key("_".join(tok[i:w]))
            i = w + 1
        obj[key] = v
    into.update(obj)
    return True


def _value(v):
    """The value of a status line's text v."""
    if v == "none":
        return None
    num = _number(v)
    if num is not None:
        return num
    m = _BYTES.match(v)
    if m:
        return {"done": int(m.group(1)), "total": int(m.group(2))}
    main, note = v, None
    open_ = v.find("(")
    if open_ > 0 and v.endswith(")"):
        main = v[:open_ - 1] if v[open_ - 1] == " " else v[:open_]
        note = v[open_ + 1:-1]
    obj = {}
    num = _number(main)
    if num is not None:
        # "2 (512 bytes)": a count and its amount; else the number.
        if note is None or not _pairs(note, obj) or not obj:
            return num
        obj["count"] = num
        return obj
    if _pairs(main, obj):
        if note is not None and not _pairs(note, obj):
            obj["note"] = note
        return obj
    return v


def _special(obj, key, v):
    """Member lines into "members" and /status's "restore ID" lines into
    "pending"; True when the line was one of them."""
    if key == "members":
        # Their number: the list's length.
        obj.setdefault("members", [])
        return True
    if key == "member":
        # "PID COMM gpu=G", the comm's blanks and all.
        m = _MEMBER.fullmatch(v)
        if m:
            a = obj.setdefault("members", [])
            a.append({"pid": int(m.group(1)), "comm": m.group(2)[:63], "gpu": m.group(3)[:31]})
            return True
    if len(key) > 8 and key.startswith("restore "):
        mid = _RESTORE_ID.match(key[8:])
        ms = _STATE.match(v)
        if mid and ms:
            a = obj.setdefault("pending", [])
            a.append({"id": int(mid.group(1)), "state": ms.group(1), "job": v[ms.end():]})
            return True
    return False


# Keys whose values are words, whatever their shape: a name, a message
# (phosfs/status-json.c's is_text).
_TEXT = frozenset(("error", "job", "last_job", "last_checkpoint", "log", "nccl_cut", "moved_gpus",
                   "checkpoint_interval_why", "stop_only", "traced", "state", "protocol", "step",
                   "cpu_pages", "restore"))


def parse_status(text):
    """The dict that status.json holds, from a status file's text.

    Each ``key words: value`` line becomes ``"key_words": value``, where
    the value is None for ``none``, a number, ``{"done", "total"}`` for
    ``3/7 bytes``, a dict for pairs of words and numbers (``park 2.0
    unpark 1.0``, ``12 written, 4 shared``, ``2 (512 bytes)`` as
    ``{"bytes": 512, "count": 2}``), else the text; names and messages
    (``error``, ``job``, ``last checkpoint``, ...) stay text. A key given more than
    once becomes a list; ``member`` lines become ``members``, a list of
    ``{"pid", "comm", "gpu"}``, and /status's ``restore ID`` lines
    ``pending``, a list of ``{"id", "state", "job"}``.
    """
    obj = {}
    for line in text.split("\n"):
        colon = line.find(": ")
        if colon < 0:
            continue
        raw = line[:colon]
        v = line[colon + 2:]
        if _special(obj, raw, v):
            continue
        key = _key(raw)
        val = (None if v == "none" else v) if key in _TEXT else _value(v)
        if key not in obj:
            obj[key] = val
        elif isinstance(obj[key], list):
            obj[key].append(val)
        else:
            obj[key] = [obj[key], val]
    return obj


def read_status(base, mnt, missing, who):
    """The status under base (a process's folder, the mount, or a
    restore's file when base ends in restores/ID): its status.json, or
    its text parsed where phosfs has no status.json. missing and who: as
    for _fs.open_error."""
    is_restore = os.path.basename(os.path.dirname(base)) == "restores"
    paths = [base] if is_restore else [os.path.join(base, "status.json"), os.path.join(base, "status")]
    for path in paths:
        try:
            text = _fs.read_file(path)
        except FileNotFoundError as e:
            if path != paths[-1] and not _fs.not_mounted(mnt):
                continue  # a phosfs without status.json
            raise _fs.open_error(path, e, mnt, missing, who) from None
        except OSError as e:
            raise _fs.open_error(path, e, mnt, missing, who) from None
        if not path.endswith(".json"):
            return parse_status(text)
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise _fs.PhosError("%s: not JSON: %s" % (path, e), None, path) from None
        if not isinstance(obj, dict):
            raise _fs.PhosError("%s: not a JSON object" % path, None, path)
        return obj
    raise AssertionError("unreachable")


def status(pid=None, mount=None):
    """The status of a process, or of phosfs's restores, as a dict.

    With pid: ``MOUNT/PID/status.json`` (root and the owner of the
    process only); without: ``MOUNT/status.json`` (root only: the
    restores). Its keys are those of the ``status`` file with blanks as
    ``_`` (``state``, ``traced``, ``job``, ``last_job``, ``stall_ms``,
    ``error``, ...; phosfs(8) says what each means). Where phosfs has no
    status.json, the ``key: value`` text of ``status`` is read into the
    same shape (``parse_status``). Raises PhosError: not mounted, no such
    process, permission denied.
    """
    mnt = _fs.mount_path(mount)
    if pid is None:
        return read_status(mnt, mnt, "%s/status is missing" % mnt, "only root may read phosfs's status")
    pid = _fs.check_pid(pid)
    return read_status(os.path.join(mnt, str(pid)), mnt,
                       "no such process: %d is not running, and phosfs knows no checkpoint of it" % pid,
                       "only root and the owner of process %d may see its status" % pid)
