# SPDX-License-Identifier: LGPL-2.1-or-later
"""The SDK of include/phos.h, from Python."""

import ctypes

_hint = None
_looked = False


def _lookup():
    """libphos.so's phos_checkpoint_hint when the tracer is in this
    process (preloaded by ``phos run``), else None; looked up once."""
    global _hint, _looked
    if not _looked:
        try:
            fn = ctypes.CDLL(None).phos_checkpoint_hint
            fn.restype = ctypes.c_int
            fn.argtypes = []
            _hint = fn
        except (AttributeError, OSError):
            _hint = None
        _looked = True
    return _hint


def hint():
    """Says that now is a good moment to checkpoint: the program is
    between steps and its GPU memory is in a consistent state (after an
    optimizer step, between requests). A checkpoint that is pending may be
    taken before it returns.

    Returns 0 under phos (the tracer ``libphos.so`` preloaded, as ``phos
    run`` does), and -1, doing nothing, when the process runs without it,
    so a program may call it unconditionally: phos_hint() of
    ``<phos.h>``.
    """
    fn = _lookup()
    return fn() if fn is not None else -1
