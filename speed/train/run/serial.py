"""A run's saved values without pickle: arrays in a safetensors file, everything else in JSON.

:func:`save_tree` writes a nested value -- dicts, lists, tuples, numbers, strings, numpy arrays
and torch tensors, as checkpoints hold them -- as two files beside each other:

* ``NAME.ID.safetensors``: every numeric array and tensor, in the safetensors format (a JSON
  header of names, dtypes, shapes and byte ranges, then the raw little-endian bytes), named by
  its place in the value (``/model/memory.memory``); ``ID`` is the write's;
* ``NAME.json``: the rest of the value, each array replaced by a reference to its name.

Opening either file runs no code: JSON is data, and a safetensors file is a header and bytes.
:func:`load_tree` maps the arrays from the file (``numpy.memmap``, copy-on-write) instead of
reading them: a reader pays for the rows it touches, and writing to a loaded array changes
the process's copy, never the file.

The writer streams each array's bytes to the file (``safetensors.numpy.save_file`` first copies
every array into one ``bytes`` object, which would double a large run's peak at the moment it
saves); the files it writes are ordinary safetensors files (the tests read them back with the
``safetensors`` package).  A PAC run's node rows are :class:`~speed.train.state.sharded.Deferred`
arrays: the file is written with room for them, and each rank writes the rows it owns into
that room itself, so no process gathers them.  The JSON file is written last and names the tensor file's size and
a random id also stored in its header, so a JSON file is never read with another write's
tensors.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np
import torch

from ..._util import atomic_file
from ..state.sharded import Deferred
from ..state.spill import Streamed
from ...errors import InputError

SERIAL_FORMAT = 1
# safetensors dtype names (the format's), numpy's for them
_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
           "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}
_ALIGN = 8  # the header is padded so every array starts 8-byte aligned (as safetensors' own writer does)


def _encode(x, key: str, arrays: Dict[str, np.ndarray]):
    """``x`` as JSON-able data, its arrays moved into ``arrays`` under their place ``key``."""
    if key in arrays:
        raise TypeError(f"{key}: two values would be saved under one name")
    if isinstance(x, (Deferred, Streamed)):
        arrays[key] = x
        return {"__tensor__": key, "torch": True} if x.torch else {"__tensor__": key}
    if isinstance(x, torch.Tensor):
        arrays[key] = x.detach().cpu().contiguous().numpy()
        return {"__tensor__": key, "torch": True}
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "USO":  # node ids given as strings
            return {"__strings__": [str(v) for v in x.tolist()], "dtype": x.dtype.str if x.dtype.kind != "O" else "O"}
        if x.dtype not in _NAMES:
            raise TypeError(f"{key}: arrays of dtype {x.dtype} are not saved")
        arrays[key] = np.ascontiguousarray(x)
        return {"__tensor__": key}
    if isinstance(x, np.generic):
        return {"__scalar__": x.dtype.str, "value": x.item()}
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v, f"{key}/{i}", arrays) for i, v in enumerate(x)]}
    if isinstance(x, list):
        return [_encode(v, f"{key}/{i}", arrays) for i, v in enumerate(x)]
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in x):
            return {k: _encode(v, f"{key}/{k}", arrays) for k, v in x.items()}
        return {"__items__": [[_encode(k, f"{key}/k{i}", arrays), _encode(v, f"{key}/{i}", arrays)]
                              for i, (k, v) in enumerate(x.items())]}
    raise TypeError(f"{key}: a {type(x).__name__} is not saved (only numbers, strings, arrays and containers)")


def _decode(x, arrays):
    if isinstance(x, list):
        return [_decode(v, arrays) for v in x]
    if not isinstance(x, dict):
        return x
    if "__tensor__" in x:
        a = arrays[x["__tensor__"]]
        return torch.from_numpy(a) if x.get("torch") else a
    if "__strings__" in x:
        return np.array(x["__strings__"], dtype=object if x["dtype"] == "O" else x["dtype"])
    if "__scalar__" in x:
        return np.dtype(x["__scalar__"]).type(x["value"])
    if "__tuple__" in x:
        return tuple(_decode(v, arrays) for v in x["__tuple__"])
    if "__items__" in x:
        return {_freeze(_decode(k, arrays)): _decode(v, arrays) for k, v in x["__items__"]}
    return {k: _decode(v, arrays) for k, v in x.items()}


def _freeze(k):
    return tuple(k) if isinstance(k, list) else k


def _write_safetensors(path: Path, arrays: Dict[str, np.ndarray], metadata: Dict[str, str]) -> int:
    """Write ``arrays`` as a safetensors file, streaming each array's bytes; returns its size.

    A :class:`Deferred` array's bytes are left to the ranks that hold its rows: the file is
    given its full size, then its writer places them (:meth:`ShardWriter.place`) before the
    file is synced."""
    header: Dict[str, Any] = {"__metadata__": metadata}
    at = 0
    for name, a in arrays.items():
        n = a.nbytes
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % _ALIGN)
    start = 8 + len(text)
    places: Dict[Any, Dict[int, int]] = {}  # writer -> {its array's index: byte offset}
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, a in arrays.items():
            if isinstance(a, Deferred):
                places.setdefault(a.writer, {})[a.index] = start + header[name]["data_offsets"][0]
                f.seek(a.nbytes, os.SEEK_CUR)
            elif isinstance(a, Streamed):
                for chunk in a.chunks():
                    f.write(memoryview(chunk))
            elif a.nbytes:
                f.write(memoryview(a.reshape(-1).view(np.uint8)))
        f.truncate(start + at)
        f.flush()
        for writer, offsets in places.items():
            writer.place(path, offsets)
        os.fsync(f.fileno())  # (the rows the other ranks wrote too: they are this file's pages)
    return start + at


def read_header(path: Path) -> Tuple[Dict[str, Any], int]:
    """The JSON header of a safetensors file and where its data starts (no array is read)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise InputError("not a safetensors file (too short)", path)
        (n,) = struct.unpack("<Q", raw)
        if n > 100_000_000:
            raise InputError("not a safetensors file (header size)", path)
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise InputError("not a safetensors file (header)", path) from None
    return header, 8 + n


def map_arrays(path: Path) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """Every array of a safetensors file, memory-mapped copy-on-write, and its metadata."""
    header, start = read_header(path)
    size = path.stat().st_size
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(_DTYPES[spec["dtype"]])
            shape = tuple(int(s) for s in spec["shape"])
            a, b = (int(v) for v in spec["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"not a readable safetensors entry {name!r}", path) from None
        if b - a != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize or start + b > size:
            raise InputError(f"safetensors entry {name!r} does not fit the file", path)
        if b == a:
            out[name] = np.empty(shape, dtype=dtype)
        else:
            out[name] = np.memmap(path, dtype=dtype, mode="c", offset=start + a, shape=shape)
    return out, header.get("__metadata__") or {}


def save_tree(value, path) -> Path:
    """Write ``value`` as ``path`` (JSON) and a tensor file beside it, ``STEM.ID.safetensors``.

    The tensor file of each write has a name of its own and the JSON file, replaced last, names
    it: killed at any moment, the folder holds the previous pair or the new one, whole.  The
    tensor files of earlier writes are removed once the JSON names the new one.
    """
    path = Path(path)
    arrays: Dict[str, np.ndarray] = {}
    try:
        return _save(path, _encode(value, "", arrays), arrays)
    except BaseException:
        for writer in {a.writer for a in arrays.values() if isinstance(a, Deferred)}:
            writer.abort()  # the ranks waiting to write their rows learn that there is no file
        raise


def _save(path: Path, data, arrays: Dict[str, np.ndarray]) -> Path:
    write_id = uuid.uuid4().hex
    tensors = path.with_name(f"{path.stem}.{write_id[:16]}.safetensors")
    with atomic_file(tensors) as tmp:
        size = _write_safetensors(tmp, arrays, {"format": "speed", "write_id": write_id})
    doc = {"format": SERIAL_FORMAT, "tensors": tensors.name, "tensors_bytes": size, "write_id": write_id,
           "value": data}
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(doc, allow_nan=True) + "\n")
    for old in path.parent.glob(f"{path.stem}.*.safetensors"):
        if old.name != tensors.name and not old.is_symlink():
            old.unlink(missing_ok=True)
    return path


def load_tree(path):
    """Read what :func:`save_tree` wrote (arrays memory-mapped); a missing, foreign or damaged
    pair of files is an :class:`InputError`."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError("not found", path) from None
    except (ValueError, UnicodeDecodeError):
        raise InputError("not a readable JSON file", path) from None
    if not isinstance(doc, dict) or doc.get("format") != SERIAL_FORMAT or "value" not in doc:
        raise InputError(f"unknown saved format {doc.get('format') if isinstance(doc, dict) else None!r} "
                         f"(this version reads format {SERIAL_FORMAT})", path)
    name = str(doc.get("tensors", ""))
    tensors = path.parent / name
    if "/" in name or not (name.startswith(path.stem + ".") and name.endswith(".safetensors")) \
            or not tensors.is_file():
        raise InputError(f"its tensor file {doc.get('tensors')!r} is missing", path)
    if tensors.stat().st_size != doc.get("tensors_bytes"):
        raise InputError(f"{tensors.name} is not the file written with it (size)", path)
    arrays, meta = map_arrays(tensors)
    if meta.get("write_id") != doc.get("write_id"):
        raise InputError(f"{tensors.name} is not the file written with it", path)
    return _decode(doc["value"], arrays)
