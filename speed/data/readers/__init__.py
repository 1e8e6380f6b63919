"""Readers for event logs: one module per format family, the detection table, and the shared
text machinery.

* :mod:`.read` -- :func:`read_events`, the one way in;
* :mod:`.formats` -- :data:`FORMAT_SPECS`, one row per format (detection, header, default
  columns, what it reads beside its columns); the families: :mod:`.jodie`, :mod:`.snap`,
  :mod:`.tgl`, :mod:`.dyglib` (generic delimited text and Parquet need no module of their own);
* :mod:`.sniff` -- separator, format, header and first record of a text file;
* :mod:`.blocks` -- the numba block parser of plain numeric records (the fast path);
* :mod:`.text` -- pyarrow's streaming CSV reader for everything else, and the error path
  that names the first bad line;
* :mod:`.columns`, :mod:`.times`, :mod:`.ids` -- checked columns, date-times, id compaction;
* :mod:`.parquet`, :mod:`.split_column`, :mod:`.stream` (block by block, for out-of-core).

To add a format: a module with its ``detect`` and one row in :data:`FORMAT_SPECS`.
"""

from .formats import FORMAT_SPECS, FORMATS, FormatSpec
from .read import event_line, read_events
from .stream import RESTART, BlockStream

__all__ = ["BlockStream", "FORMATS", "FORMAT_SPECS", "FormatSpec", "RESTART", "event_line", "read_events"]
