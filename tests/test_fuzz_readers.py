"""Property test of the readers: whatever the bytes, the outcome is events or one InputError,
and a valid log is read.

Random bytes, and mutations of a valid log (truncated lines, stray quotes, NULs, huge fields,
mixed delimiters, a damaged or random gzip stream).  Any other exception, a hang or an
abort fails the test.  Valid variants of the log (any subset of its rows, CRLF or LF, with or
without a last newline, gzipped or not, Parquet intact) must be read, event for event: a reader
that refused everything would fail them.
"""

from __future__ import annotations

import gzip
import zlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speed.data.events import Events
from speed.data.readers import RESTART, BlockStream, read_events
from speed.errors import InputError

_VALID = "src,dst,t,f0\n" + "".join(f"{i % 7},{10 + i % 5},{i * 1.5},{i % 3}.25\n" for i in range(40))

_INSERTS = [b'"', b"\x00", b",", b"\t", b";", b" ", b"\n", b"\r\n", b"#", b"nan", b"-", b"1e999", b"x" * 5000,
            b"\xff\xfe", b"1" * 400, b",,,,", b'"a\nb"']


@st.composite
def mutated_log(draw):
    data = bytearray(_VALID.encode())
    for _ in range(draw(st.integers(1, 6))):
        how = draw(st.sampled_from(["insert", "delete", "truncate", "replace_line"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if how == "insert":
            data[at:at] = draw(st.sampled_from(_INSERTS))
        elif how == "delete":
            del data[at:at + draw(st.integers(1, 20))]
        elif how == "truncate":
            del data[at:]
        else:
            line = draw(st.binary(max_size=60))
            end = data.find(b"\n", at)
            data[at:end if end >= 0 else len(data)] = line
    return bytes(data)


def _read(tmp_path, data: bytes, name: str, must_read: bool = False):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        ev = read_events(path, progress=False)
    except InputError as exc:
        assert not must_read, f"a valid log was refused: {exc}"
        assert "\n" not in str(exc), str(exc)  # one line
        return None
    assert isinstance(ev, Events)
    assert len(ev.src) == len(ev.dst) == len(ev.t)
    assert np.all(np.diff(ev.t_float()) >= 0)
    return ev


_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                      HealthCheck.too_slow])


_ROWS = _VALID.splitlines()[1:]


@st.composite
def valid_log(draw):
    """A valid variant of the log and its rows: a subset of the rows in order, LF or CRLF, with or
    without the last line's newline."""
    keep = sorted(draw(st.sets(st.integers(0, len(_ROWS) - 1), min_size=1)))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join(["src,dst,t,f0"] + [_ROWS[i] for i in keep]) + (eol if draw(st.booleans()) else "")
    return text.encode(), keep


@settings(max_examples=60, **_SETTINGS)
@given(log=valid_log(), zipped=st.booleans())
def test_valid_variants_are_read(tmp_path, log, zipped):
    data, keep = log
    ev = _read(tmp_path, gzip.compress(data) if zipped else data, "valid.csv.gz" if zipped else "valid.csv",
               must_read=True)
    rows = np.array([[float(x) for x in _ROWS[i].split(",")] for i in keep])
    assert len(ev) == len(keep)
    np.testing.assert_array_equal(ev.t_float(), rows[:, 2])
    np.testing.assert_array_equal(ev.node_ids[ev.src], rows[:, 0].astype(np.int64))
    np.testing.assert_array_equal(ev.node_ids[ev.dst], rows[:, 1].astype(np.int64))
    path = tmp_path / "valid_streamed.csv"
    path.write_bytes(data)
    blocks = [b for b in BlockStream(path).blocks() if b is not RESTART]
    assert sum(len(b["src"]) for b in blocks) == len(keep)


def test_the_unmutated_inputs_are_read(tmp_path):
    assert len(_read(tmp_path, _VALID.encode(), "valid.csv", must_read=True)) == 40
    assert len(_read(tmp_path, gzip.compress(_VALID.encode()), "valid.csv.gz", must_read=True)) == 40
    assert len(_read(tmp_path, _PARQUET, "valid.parquet", must_read=True)) == 30


@settings(max_examples=60, **_SETTINGS)
@given(data=st.binary(max_size=400))
def test_random_bytes(tmp_path, data):
    _read(tmp_path, data, "random.csv")


@settings(max_examples=120, **_SETTINGS)
@given(data=mutated_log())
def test_mutated_logs(tmp_path, data):
    _read(tmp_path, data, "mutated.csv")


@settings(max_examples=60, **_SETTINGS)
@given(data=mutated_log())
def test_mutated_logs_streamed(tmp_path, data):
    """The out-of-core reader (``--max-memory``) on the same inputs."""
    path = tmp_path / "streamed.csv"
    path.write_bytes(data)
    try:
        for block in BlockStream(path).blocks():
            if block is not RESTART:
                assert len(block["src"]) == len(block["dst"]) == len(block["t"])
    except InputError as exc:
        assert "\n" not in str(exc), str(exc)


@settings(max_examples=40, **_SETTINGS)
@given(data=mutated_log(), cut=st.floats(0.0, 1.0), flip=st.integers(0, 10_000))
def test_damaged_gzip(tmp_path, data, cut, flip):
    raw = bytearray(gzip.compress(data))
    if flip < len(raw) and flip > 20:
        raw[flip] ^= 0x5A
    raw = raw[: max(1, int(len(raw) * cut))] if cut < 0.97 else raw
    _read(tmp_path, bytes(raw), "log.csv.gz")


def _parquet_bytes() -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"src": np.arange(30) % 4, "dst": 10 + np.arange(30) % 3,
                             "t": np.arange(30, dtype=np.float64)}), buf)
    return buf.getvalue()


_PARQUET = _parquet_bytes()


@settings(max_examples=60, **_SETTINGS)
@given(cut=st.integers(0, len(_PARQUET)), flips=st.lists(st.integers(0, len(_PARQUET) - 1), max_size=4),
       junk=st.binary(max_size=40))
def test_damaged_parquet(tmp_path, cut, flips, junk):
    raw = bytearray(_PARQUET)
    for at in flips:
        raw[at] ^= 0xA5
    data = bytes(raw[:cut]) if cut < len(raw) else bytes(raw)
    ev = _read(tmp_path, b"PAR1" + junk + data[4:] if junk else data, "log.parquet",
               must_read=not flips and not junk and cut >= len(raw))
    if ev is not None and not flips and not junk and cut >= len(raw):
        assert len(ev) == 30


@settings(max_examples=20, **_SETTINGS)
@given(data=st.binary(min_size=1, max_size=300))
def test_random_gzip_payload(tmp_path, data):
    _read(tmp_path, zlib.compress(data)[2:-4] if len(data) % 2 else gzip.compress(data), "random.csv.gz")
