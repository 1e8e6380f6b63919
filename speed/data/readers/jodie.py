"""JODIE's CSV (``user_id,item_id,timestamp,state_label,features...``): a bipartite log.

Detected by a header whose first three names are a user, an item and a time
(``user_id,item_id,timestamp`` or ``u,i,ts``, as JODIE's and TGN's files name them).  Items are
numbered after users; columns from the fifth on are edge features.  A header that names a
*source* and a *destination* (``src,dst,time``) is not taken for JODIE: nothing says the two
sides are different node sets, and a unipartite log read as bipartite would silently get two
id spaces (it is read as generic delimited text instead).
"""

from __future__ import annotations

from typing import List

from .textio import lower_fields

_NAMES = (
    {"user_id", "user", "u"},
    {"item_id", "item", "i"},
    {"timestamp", "ts", "time", "t"},
)


def detect(fields: List[str], sep: str) -> bool:
    low = lower_fields(fields)
    return len(low) >= 3 and all(low[k] in names for k, names in enumerate(_NAMES))


def columns(ncols: int):
    """user, item, time, and the state label when there is a fourth column."""
    return 0, 1, 2, (3 if ncols > 3 else None)
