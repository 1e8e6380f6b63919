"""The whole log as every PAC rank reads it: one time-ordered copy on disk, mapped by all.

Every rank streams the full-graph evaluation, so every rank needs the whole log in time order.
Rank 0 writes it once from the shards (:func:`speed.partition.ordered.write_ordered_log`, a
window at a time) into a hidden folder of the run folder (``.speed-log.tmp-HOST-PID-*``), every
rank maps it read-only, and rank 0 removes the folder as soon as all have mapped it: the files
live on while mapped.  A run killed while rank 0 writes the folder leaves it; the next run in
that folder removes it.  A rank that cannot see the folder (another
host, without the run folder shared) gathers its own copy from the shards instead.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ..run.folder import RunFolder
from ...data.events import Events
from ...partition.ordered import map_ordered_log, write_ordered_log
from ...partition.shards import Shards


def shared_log(shards: Shards, out: Optional[Path], world) -> Events:
    """The events of ``shards``' split in time order, mapped from one file that rank 0 writes
    (collective over ``world``'s host group)."""
    folder = [None]
    if world.is_main:
        try:
            folder[0] = str(write_ordered_log(shards, RunFolder(out if out is not None else tempfile.gettempdir())
                                              .scratch("speed-log")))
        finally:  # the others learn where it is, or that there is none (rank 0 then raises)
            world.broadcast_objects(folder)
    else:
        world.broadcast_objects(folder)
    if folder[0] is None:
        raise RuntimeError("rank 0 could not write the time-ordered log: see its error")
    try:
        events = map_ordered_log(shards, folder[0]) if Path(folder[0]).is_dir() else shards.events("split")
    finally:
        world.barrier()  # every rank has mapped the files (or given up)
        if world.is_main and folder[0] is not None:
            shutil.rmtree(folder[0], ignore_errors=True)
    return events
