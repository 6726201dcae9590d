# SPDX-License-Identifier: LGPL-2.1-or-later
"""phos from Python: checkpoint and restore GPU processes through phosfs.

    import phos

    for step in range(steps):
        train_step()
        phos.hint()                       # between steps: a good moment to checkpoint

    ck = phos.checkpoint(1234)            # from another process: cow, waits until published
    ck["name"], ck["dir"], ck["stall_ms"]
    pid = phos.restore(ck["dir"])         # the restored pid
    phos.status(pid)["state"]
    for ev in phos.events(names="checkpoint", timeout=60):
        print(ev["event"], ev.get("pid"))

Everything but hint() works over the files of a phosfs mount
($PHOS_MOUNT, else /phos; each call also takes mount=), as the phos
command line does: phos(1), phosfs(8).
"""

from ._ctl import cancel, checkpoint, restore, wait_checkpoint, wait_restore
from ._events import EVENTS, Events, events
from ._fs import PhosError, PhosTimeout
from ._sdk import hint
from ._status import parse_status, status

__version__ = "0.1"

__all__ = [
    "EVENTS", "Events", "PhosError", "PhosTimeout", "cancel", "checkpoint", "events", "hint",
    "parse_status", "restore", "status", "wait_checkpoint", "wait_restore",
]
