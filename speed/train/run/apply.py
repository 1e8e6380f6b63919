"""A trained run applied to files: what ``speed embed`` and ``speed score`` do.

Both load the run (:func:`~speed.train.run.predictor.load_run`), optionally continue its memory
with a file of new events, and write their result atomically (nothing is left behind on an
error).  Every problem with an input file names the file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import numpy as np

from ..._util import atomic_file, check_output_file, full_time
from ...data.readers import event_line, read_events
from ...errors import InputError
from .predictor import load_run


def _continued(run, events, device: str, progress: Optional[bool], reader: Optional[dict] = None):
    """The run's predictor after the whole log, continued with the events file if given,
    and the number of events it was continued with."""
    pred = load_run(run, device=device)
    if events is None:
        return pred, 0
    new = read_events(events, sort=False, progress=progress, **(reader or {}))
    pred.advance(new, progress=progress)
    return pred, len(new)


def embed_file(run, out, events=None, at: Optional[float] = None, device: str = "cpu",
               progress: Optional[bool] = None, overwrite: bool = False, reader: Optional[dict] = None) -> Dict:
    """Embed every node the run knows at time ``at`` and save the matrix as ``.npy``.

    Parameters
    ----------
    run : path-like
        Run directory.
    out : path-like
        ``.npy`` file: float32, shape (nodes, embedding_dim), rows in the order of
        ``OUT.nodes.csv`` (written beside it: the original id of each row, and its side
        when the run numbered sources and destinations apart).
    events : path-like, optional
        New events (time-sorted, none older than the run's last event) to continue with.
    at : float, optional
        Time of the embeddings (default: the latest event in the memory).

    overwrite : bool
        Replace an existing ``out`` (and its ids file); otherwise that is an error.
    reader : dict, optional
        Options of :func:`speed.read_events` for ``events`` (columns, separator, time format).

    Returns
    -------
    dict
        ``nodes``, ``dim``, ``t``, ``new_events``, ``out``, ``ids`` (the ids file).
    """
    out = Path(out)
    if out.suffix != ".npy":
        raise InputError("the embeddings file must end in .npy", out)
    check_output_file(out, overwrite)
    check_output_file(out.with_suffix(".nodes.csv"), overwrite)
    pred, new = _continued(run, events, device, progress, reader)
    t = pred.t_last if at is None else float(at)
    if t < pred.t_last:
        raise InputError(f"--at {full_time(t)} is before the memory's last update ({full_time(pred.t_last)}); the memory already "
                         "holds later events")
    emb = pred.embed_all(t)
    ids_path = out.with_suffix(".nodes.csv")
    with atomic_file(out) as tmp:  # the ids go into place only once the embeddings are written
        with open(tmp, "wb") as f:
            np.save(f, emb)
        _write_ids(ids_path, pred)
    return {"nodes": int(emb.shape[0]), "dim": int(emb.shape[1]), "t": t, "out": str(out), "ids": str(ids_path),
            "new_events": new}


def _write_ids(path: Path, pred) -> None:
    import pyarrow as pa

    cols = {"id": pa.array(pred.node_ids)}
    if pred.index.per_side:
        cols["side"] = pa.array(pred.index.sides)
    _write_csv(pa.table(cols), path)


def _write_csv(table, path) -> None:
    """A CSV with quotes only where a value needs them (pyarrow's "needed" quotes every string)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write((",".join(table.column_names) + "\n").encode())  # pyarrow quotes header names
            try:
                pcsv.write_csv(table, f, pcsv.WriteOptions(include_header=False, quoting_style="none"))
            except pa.ArrowInvalid:  # an id holds a separator or a quote
                f.seek(0)
                f.truncate()
                f.write((",".join(table.column_names) + "\n").encode())
                pcsv.write_csv(table, f, pcsv.WriteOptions(include_header=False, quoting_style="needed"))


def score_file(run, pairs, out, events=None, device: str = "cpu", progress: Optional[bool] = None,
               overwrite: bool = False, reader: Optional[dict] = None) -> Dict:
    """Score the pairs of a file and write ``src,dst,t,score,known`` per line, in the file's
    order: ``score`` a probability, ``known`` 1 when the run saw both nodes and 0 when it never
    saw one of them (its score then comes from the cold row all unseen nodes share).

    Parameters
    ----------
    run : path-like
    pairs : path-like
        ``src, dst, t`` records in any format :func:`speed.read_events` reads (any order;
        no time before the memory's last update).
    out : path-like
        CSV to write.
    events : path-like, optional
        New events to continue the memory with first.

    overwrite : bool
        Replace an existing ``out``; otherwise that is an error.
    reader : dict, optional
        Options of :func:`speed.read_events` for ``pairs`` and ``events`` (columns, separator, time format).

    Returns
    -------
    dict
        ``pairs``, ``unseen`` (pairs with a node the run never saw), ``new_events``, ``out``.
    """
    check_output_file(out, overwrite)
    import pyarrow as pa

    pred, new = _continued(run, events, device, progress, reader)
    timeless = _pairs_without_time(pairs, reader)
    if timeless is not None:  # `src,dst` pairs: scored "now", at the run's last time
        src, dst = timeless
        t = np.full(src.shape[0], pred.t_last)
        pos = np.arange(src.shape[0])
    else:
        ev = read_events(pairs, progress=progress, **(reader or {}))
        old = np.flatnonzero(ev.t_float() < pred.t_last)
        if old.size:
            k = int(old[0])
            raise InputError(f"time {full_time(ev.t[k])} is before the memory's last update ({full_time(pred.t_last)}); "
                             "the memory already holds later events", pairs, event_line(ev, k))
        ids = ev.node_ids
        src = ev.src if ids is None else ids[ev.src]
        dst = ev.dst if ids is None else ids[ev.dst]
        t = ev.t_float()
        order = ev.meta.input_order  # back to the file's order
        pos = np.arange(len(ev)) if order is None else np.argsort(order, kind="stable")
    known = (pred.index.lookup(src, "src") >= 0) & (pred.index.lookup(dst, "dst") >= 0)  # before scoring
    score = pred.score(src, dst, t)
    unseen = int(np.count_nonzero(~known))
    # known: 0 where a node of the pair was never seen by the run (its score comes from the cold
    # row every unseen node shares, not from anything the run learned about it)
    table = pa.table({"src": pa.array(src[pos]), "dst": pa.array(dst[pos]), "t": pa.array(t[pos]),
                      "score": pa.array(score[pos]), "known": pa.array(known[pos].astype(np.int8))})
    _write_csv(table, out)
    return {"pairs": int(src.shape[0]), "unseen": unseen, "out": str(out), "new_events": new,
            "at_last_time": None if timeless is None else float(pred.t_last)}


def _pairs_without_time(path, reader: Optional[dict]):
    """``(src, dst)`` original ids of a pairs file with two columns and no time (when no time
    column is named), else None: such pairs are scored at the run's last time."""
    from ...data.readers.sniff import sniff
    from ...data.readers.textio import is_gzip

    reader = reader or {}
    path = Path(path)
    if reader.get("time_col") is not None or not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        gz = is_gzip(path)
        lay = sniff(path, gz, None, reader.get("sep"), None, None)
    except InputError:
        return None
    if lay.ncols != 2:
        return None
    import pyarrow as pa
    import pyarrow.csv as pcsv

    skip = lay.first_data_line - 1
    try:
        table = pcsv.read_csv(path, read_options=pcsv.ReadOptions(skip_rows=skip, column_names=["src", "dst"]),
                              parse_options=pcsv.ParseOptions(delimiter=lay.sep, ignore_empty_lines=True))
    except pa.ArrowInvalid as exc:
        raise InputError(f"cannot read the pairs: {str(exc).splitlines()[0]}", path) from None
    if table.num_rows == 0:
        raise InputError("no pairs in the file", path)
    cols = []
    for name in ("src", "dst"):
        c = table.column(name)
        if c.null_count:
            raise InputError(f"a {name} id is missing", path)
        cols.append(np.asarray(c.to_numpy(zero_copy_only=False)))
    return cols[0], cols[1]
