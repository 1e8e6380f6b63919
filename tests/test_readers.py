"""Readers: every format, column selection, id remapping, and every bad input."""

import gzip
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import speed


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_jodie_with_features_and_short_header(tmp_path):
    # The JODIE header names 5 columns but rows carry 4 + d values.
    p = write(tmp_path, "w.csv", "user_id,item_id,timestamp,state_label,comma_separated_list_of_features\n"
                                 "u1,i9,0.0,0,0.5,1.5\nu2,i9,1.0,1,0.25,2.0\nu1,i3,2.0,0,0.0,0.0\n")
    ev = speed.read_events(p)
    assert ev.meta.format == "jodie" and ev.bipartite
    assert ev.num_nodes == 4  # users u1, u2 -> 0, 1; items i3, i9 -> 2, 3
    assert list(ev.src) == [0, 1, 0] and list(ev.dst) == [3, 3, 2]
    assert list(ev.node_ids) == ["u1", "u2", "i3", "i9"]
    assert list(ev.label) == [0, 1, 0]
    assert ev.msg.dtype == np.float32 and ev.msg.shape == (3, 2)
    np.testing.assert_allclose(ev.msg[1], [0.25, 2.0])


def test_jodie_items_after_users_even_when_ids_overlap(tmp_path):
    p = write(tmp_path, "j.csv", "u,i,ts,label\n0,0,1,0\n1,0,2,0\n0,1,3,1\n")
    ev = speed.read_events(p)
    assert ev.num_nodes == 4 and list(ev.src) == [0, 1, 0] and list(ev.dst) == [2, 2, 3]


def test_snap_whitespace_with_comments(tmp_path):
    p = write(tmp_path, "c.txt", "# SNAP graph\n# comment\n10 20 5\n20 30 7\n10 30 9\n")
    ev = speed.read_events(p)
    assert ev.meta.format == "snap" and not ev.bipartite
    assert list(ev.node_ids) == [10, 20, 30]
    assert list(ev.src) == [0, 1, 0] and list(ev.dst) == [1, 2, 2]
    assert list(ev.t) == [5.0, 7.0, 9.0]


def test_tgl_edges_csv(tmp_path):
    p = write(tmp_path, "edges.csv", ",src,dst,time,ext_roll\n0,3,4,1.5,0\n1,4,5,2.5,0\n2,3,5,3.5,1\n")
    ev = speed.read_events(p)
    assert ev.meta.format == "tgl"
    assert list(ev.node_ids[ev.src]) == [3, 4, 3] and list(ev.node_ids[ev.dst]) == [4, 5, 5]
    assert list(ev.t) == [1.5, 2.5, 3.5]


def test_generic_with_header_and_named_columns(tmp_path):
    p = write(tmp_path, "g.csv", "when,amount,from,to,fraud\n3,1.0,a,b,0\n1,2.0,b,c,1\n2,3.0,c,a,0\n")
    ev = speed.read_events(p, src_col="from", dst_col="to", time_col="when", label_col="fraud")
    assert ev.meta.sorted_input is False  # times 3, 1, 2 were stable-sorted
    assert list(ev.t) == [1.0, 2.0, 3.0]
    assert list(ev.node_ids[ev.src]) == ["b", "c", "a"] and list(ev.label) == [1, 0, 0]


def test_generic_by_index_without_header(tmp_path):
    p = write(tmp_path, "g.tsv", "5\t7\t100\tx\n7\t9\t200\ty\n")
    ev = speed.read_events(p, src_col=2, dst_col=0, time_col=1)
    assert ev.meta.format in ("snap", "csv")
    assert list(ev.t) == [7.0, 9.0]
    assert list(ev.node_ids[ev.src]) == [100, 200] and list(ev.node_ids[ev.dst]) == [5, 7]


def test_default_columns_and_header_detection(tmp_path):
    p = write(tmp_path, "h.csv", "s,d,t\n1,2,0\n2,3,1\n")
    assert len(speed.read_events(p)) == 2
    p = write(tmp_path, "n.csv", "1,2,0\n2,3,1\n")
    assert len(speed.read_events(p)) == 2


def test_gzip(tmp_path):
    p = tmp_path / "e.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write("src,dst,t\n1,2,0\n2,3,1\n3,1,2\n")
    ev = speed.read_events(p)
    assert len(ev) == 3 and list(ev.node_ids) == [1, 2, 3]


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "e.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3], "b": [2, 3, 1], "time": [0.5, 0.25, 1.0]}), p)
    ev = speed.read_events(p, time_col="time")
    assert ev.meta.format == "parquet" and list(ev.t) == [0.25, 0.5, 1.0]
    with pytest.raises(speed.InputError, match="unknown time column 'nope'"):
        speed.read_events(p, time_col="nope")


def test_mixed_int_and_string_ids_fall_back_to_strings(tmp_path):
    rows = "".join(f"{i},{i + 1},{i}\n" for i in range(5000)) + "x,y,6000\n"
    p = write(tmp_path, "m.csv", rows)
    ev = speed.read_events(p, block_size=4096)
    assert len(ev) == 5001 and "x" in set(ev.node_ids.tolist())


def test_shared_wikipedia_and_collegemsg(shared_data):
    wiki = speed.read_events(shared_data / "wikipedia.csv")
    assert (len(wiki), wiki.num_nodes, wiki.bipartite) == (157_474, 9_227, True)
    assert int(wiki.label.sum()) == 217 and wiki.meta.sorted_input
    cm = speed.read_events(shared_data / "CollegeMsg.txt")
    assert (len(cm), cm.num_nodes, cm.bipartite) == (59_835, 1_899, False)


# --------------------------------------------------------------------------- bad input
BAD = [
    ("empty.csv", "", "empty.csv:1: file is empty"),
    ("blank.csv", "\n\n", "blank.csv:1: file is empty (no records)"),
    ("hdr.csv", "src,dst,t\n", "hdr.csv:2: no events after the header"),
    ("ragged.csv", "src,dst,t\n1,2,3\n1,2,3,4\n", "ragged.csv:3: expected 3 fields, found 4 (ragged row)"),
    ("short.csv", "1,2,3\n4,5,6\n\n7,8\n", "short.csv:4: expected 3 fields, found 2 (ragged row)"),
    ("nonnum.csv", "src,dst,t\n1,2,3\n2,3,abc\n", "nonnum.csv:3: time 'abc' is not a number"),
    ("nan.csv", "src,dst,t\n1,2,3\n\n2,3,nan\n", "nan.csv:4: time is nan, not finite"),
    ("inf.csv", "src,dst,t\n1,2,inf\n", "inf.csv:2: time is inf, not finite"),
    ("noid.csv", "src,dst,t\n1,2,3\n,3,4\n", "noid.csv:3: missing src id"),
    ("noid2.csv", "src,dst,t\na,b,3\nb,,4\n", "noid2.csv:3: missing dst id"),
]


@pytest.mark.parametrize("name, text, expected", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_file_and_line(tmp_path, name, text, expected):
    p = write(tmp_path, name, text)
    with pytest.raises(speed.InputError) as info:
        speed.read_events(p)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == f"{tmp_path}/{expected}"


def test_missing_file(tmp_path):
    with pytest.raises(speed.InputError, match="nope.csv: file not found"):
        speed.read_events(tmp_path / "nope.csv")


def test_unknown_column_and_index_out_of_range(tmp_path):
    p = write(tmp_path, "c.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(speed.InputError, match=r"c.csv:1: unknown src column 'x' \(columns: a, b, c\)"):
        speed.read_events(p, src_col="x")
    with pytest.raises(speed.InputError, match=r"c.csv:2: time column index 7 out of range \(the file has 3 columns\)"):
        speed.read_events(p, time_col=7)


def test_refuse_unsorted(tmp_path):
    p = write(tmp_path, "u.csv", "1,2,5\n2,3,4\n")
    with pytest.raises(speed.InputError, match="earlier than the previous"):
        speed.read_events(p, sort=False)


def test_from_arrays_validation():
    with pytest.raises(speed.InputError, match="same length"):
        speed.Events.from_arrays([0, 1], [1], [0, 1])
    with pytest.raises(speed.InputError, match="not finite|time is"):
        speed.Events.from_arrays([0, 1], [1, 2], [0.0, np.nan])
    with pytest.raises(speed.InputError, match="no events"):
        speed.Events.from_arrays([], [], [])
    ev = speed.Events.from_arrays(["a", "b", "a"], ["b", "c", "c"], [2, 1, 1])
    assert ev.num_nodes == 3 and ev.meta.sorted_input is False
    assert list(ev.node_ids[ev.src]) == ["b", "a", "a"]


def test_duplicates_and_self_loops_are_kept_and_counted():
    ev = speed.Events.from_arrays([0, 0, 1, 2, 0], [1, 1, 1, 0, 1], [1, 1, 2, 3, 3])
    assert len(ev) == 5 and ev.meta.self_loops == 1 and ev.meta.duplicate_events == 1


def test_same_column_twice_is_refused(tmp_path):
    p = write(tmp_path, "d.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(speed.InputError, match="src and dst are the same column"):
        speed.read_events(p, src_col="a", dst_col=0)


def test_dyglib_processed_format_with_edge_features(tmp_path):
    rng = np.random.default_rng(0)
    e = 50
    u = rng.integers(1, 10, e)
    i = rng.integers(10, 20, e)
    ts = np.sort(rng.integers(0, 1000, e)).astype(float)
    label = rng.integers(0, 2, e)
    idx = np.arange(1, e + 1)
    rows = "".join(f"{k},{a},{b},{c},{d},{x}\n" for k, (a, b, c, d, x) in enumerate(zip(u, i, ts, label, idx)))
    (tmp_path / "ml_toy.csv").write_text(",u,i,ts,label,idx\n" + rows)
    feats = np.vstack([np.zeros((1, 3)), rng.random((e, 3))]).astype(np.float32)  # row 0: DyGLib's padding
    np.save(tmp_path / "ml_toy.npy", feats)
    ev = speed.read_events(tmp_path / "ml_toy.csv", progress=False)
    assert ev.meta.format == "dyglib" and len(ev) == e
    np.testing.assert_array_equal(ev.msg, feats[idx])
    np.testing.assert_array_equal(ev.label, label)
    assert np.array_equal(ev.node_ids[ev.src], u) and np.array_equal(ev.node_ids[ev.dst], i)
    # without the .npy the log still reads, without features
    (tmp_path / "ml_toy.npy").unlink()
    assert speed.read_events(tmp_path / "ml_toy.csv", progress=False).msg is None
    # node features: all-zero ones (DyGLib's public logs) pass quietly, real ones are not dropped silently
    import warnings

    np.save(tmp_path / "ml_toy_node.npy", np.zeros((21, 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        speed.read_events(tmp_path / "ml_toy.csv", progress=False)
    np.save(tmp_path / "ml_toy_node.npy", rng.random((21, 4)))
    with pytest.warns(UserWarning, match="ml_toy_node.npy: node features are not used"):
        speed.read_events(tmp_path / "ml_toy.csv", progress=False)
    # an idx beyond the features is named
    np.save(tmp_path / "ml_toy.npy", feats[:10])
    with pytest.raises(speed.InputError, match="ml_toy.npy.*idx goes up to 50"):
        speed.read_events(tmp_path / "ml_toy.csv", progress=False)


def test_tgl_ext_roll_is_the_split_and_edge_features_load(tmp_path):
    import json

    import torch

    from speed.cli import main

    rng = np.random.default_rng(0)
    e = 300
    t = np.arange(e) * 10.0
    roll = np.repeat([0, 1, 2], [200, 40, 60])  # not the 70/15/15 quantiles
    rows = "".join(f"{k},{rng.integers(0, 30)},{rng.integers(0, 30)},{x:g},0,{r}\n"
                   for k, (x, r) in enumerate(zip(t, roll)))
    (tmp_path / "edges.csv").write_text(",src,dst,time,int_roll,ext_roll\n" + rows)
    feats = torch.rand(e, 4)
    torch.save(feats, tmp_path / "edge_features.pt")
    ev = speed.read_events(tmp_path / "edges.csv", progress=False)
    assert ev.meta.format == "tgl" and ev.meta.split_times == (1990.0, 2390.0)
    np.testing.assert_array_equal(ev.msg, feats.numpy())
    out = tmp_path / "shards"
    assert main(["partition", str(tmp_path / "edges.csv"), "-o", str(out), "--no-progress"]) == 0
    sp = json.loads((out / "manifest.json").read_text())["split"]
    assert (sp["num_train_events"], sp["num_val_events"], sp["num_test_events"]) == (200, 40, 60)
    # periods that overlap in time cannot be a chronological split: one line
    roll[150] = 2
    rows = "".join(f"{k},1,2,{x:g},0,{r}\n" for k, (x, r) in enumerate(zip(t, roll)))
    (tmp_path / "edges.csv").write_text(",src,dst,time,int_roll,ext_roll\n" + rows)
    with pytest.raises(speed.InputError, match="overlap in time"):
        speed.read_events(tmp_path / "edges.csv", progress=False)
    # features of the wrong length are named
    torch.save(torch.rand(7, 4), tmp_path / "edge_features.pt")
    (tmp_path / "edges.csv").write_text(",src,dst,time\n0,1,2,3\n1,2,3,4\n")
    with pytest.raises(speed.InputError, match="edge_features.pt.*2 rows"):
        speed.read_events(tmp_path / "edges.csv", progress=False)


def test_split_column_is_the_split(tmp_path):
    import json

    from speed.cli import main

    rng = np.random.default_rng(1)
    t = np.arange(300) * 10
    period = np.repeat(["train", "val", "test"], [180, 50, 70])  # not the 70/15/15 quantiles
    rows = "".join(f"{u},{i},{x},{p},0.5\n" for u, i, x, p in zip(rng.integers(0, 30, 300), rng.integers(0, 30, 300),
                                                                t, period))
    log = write(tmp_path, "log.csv", "user_id,item_id,timestamp,period,f1\n" + rows)  # JODIE-style, one feature
    ev = speed.read_events(log, split_col="period", progress=False)
    assert ev.meta.split_times == (1790.0, 2290.0) and ev.msg.shape == (300, 1)  # the column is no feature
    assert speed.read_events(log, split_col=3, progress=False).meta.split_times == (1790.0, 2290.0)
    out = tmp_path / "shards"
    assert main(["partition", str(log), "-o", str(out), "--split-col", "period", "--no-progress"]) == 0
    sp = json.loads((out / "manifest.json").read_text())["split"]
    assert (sp["num_train_events"], sp["num_val_events"], sp["num_test_events"]) == (180, 50, 70)
    m = speed.train(ev, model="jodie", epochs=1, memory_dim=4, time_dim=4, embedding_dim=4, progress=False)
    assert (m["data"]["num_val_events"], m["data"]["num_test_events"]) == (50, 70)
    # numbers 0/1/2, and refusals that name the line
    nums = "".join(f"1,2,{x},{k}\n" for x, k in zip(t, np.repeat([0, 1, 2], [180, 50, 70])))
    assert speed.read_events(write(tmp_path, "n.csv", "src,dst,t,roll\n" + nums),
                             split_col="roll").meta.split_times == (1790.0, 2290.0)
    bad = nums.replace("1,2,100,0\n", "1,2,100,tain\n")
    with pytest.raises(speed.InputError, match=r"b\.csv:12: split column: 'tain'"):
        speed.read_events(write(tmp_path, "b.csv", "src,dst,t,roll\n" + bad), split_col="roll")
    late = nums.replace("1,2,2000,1\n", "1,2,2000,0\n")  # a train event after val began
    with pytest.raises(speed.InputError, match=r"o\.csv:202: split column: this train event"):
        speed.read_events(write(tmp_path, "o.csv", "src,dst,t,roll\n" + late), split_col="roll")
    with pytest.raises(speed.InputError, match="no test events"):
        speed.read_events(write(tmp_path, "e.csv", "src,dst,t,roll\n" + nums.replace(",2\n", ",1\n")),
                          split_col="roll")
    assert main(["partition", str(log), "-o", str(tmp_path / "x"), "--split-col", "period", "--max-memory", "1G",
                 "--no-progress"]) == 2
    assert not (tmp_path / "x").exists()


def test_a_src_dst_time_header_is_one_id_space(tmp_path):
    # Only a user/item header makes a log bipartite: src/dst names say nothing of two node sets,
    # and a unipartite log read as bipartite would silently give one id two nodes.
    p = write(tmp_path, "m.csv", "src,dst,time\n1,2,1.0\n2,1,2.0\n1,3,3.0\n")
    ev = speed.read_events(p)
    assert ev.meta.format == "csv" and not ev.bipartite
    assert ev.num_nodes == 3 and list(ev.node_ids) == [1, 2, 3]
    assert list(ev.src) == [0, 1, 0] and list(ev.dst) == [1, 0, 2]
    j = write(tmp_path, "j.csv", "user_id,item_id,timestamp\n1,2,1.0\n2,1,2.0\n")
    assert speed.read_events(j).bipartite  # the JODIE convention: items after users


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.sampled_from([",", "\t", ";", " "]), st.booleans(), st.booleans(), st.booleans(),
       st.integers(0, 10_000))
def test_the_block_parser_and_pyarrow_read_the_same_arrays(n, sep, header, crlf, label, seed):
    """Every plain numeric file goes through both parsers: the numba block parser (taken, as
    counted) and pyarrow's reader (the fast path disabled) give the same arrays."""
    import speed.data.readers.text as text
    from speed.data.readers import blocks

    rng = np.random.default_rng(seed)
    src = rng.integers(-50, 10**12, n)
    dst = rng.integers(0, 10**6, n)
    t = np.sort(rng.integers(0, 10**9, n)) + rng.integers(0, 1000, n) / 1000.0
    lab = rng.integers(0, 2, n)
    cols = [src, dst, t] + ([lab] if label else [])
    fmt = [lambda v: f"{int(v):0{rng.integers(1, 4)}d}" if v >= 0 else str(int(v)), str, lambda v: f"{v:.3f}", str]
    end = "\r\n" if crlf else "\n"
    lines = ([sep.join(["a", "b", "c", "d"][:len(cols)])] if header else []) + \
        [sep.join(f(c[i]) for f, c in zip(fmt, cols)) for i in range(n)]
    path = Path(tempfile.mkdtemp()) / "log.txt"
    path.write_text(end.join(lines) + end)
    kw = dict(fmt="csv", sep=sep, header=header, label_col=3 if label else None, progress=False)
    taken = []
    real = blocks.read_numeric
    with mock.patch.object(blocks, "read_numeric", lambda *a, **k: taken.append(1) or real(*a, **k)):
        fast = speed.read_events(path, **kw)
    assert taken, "the block parser was not used"
    with mock.patch.object(text.blocks, "numeric_layout", lambda *a, **k: None):
        slow = speed.read_events(path, **kw)
    for name in ("src", "dst", "t", "label", "node_ids"):
        a, b = getattr(fast, name), getattr(slow, name)
        assert (a is None and b is None) or np.array_equal(a, b), name


def test_events_meta_is_typed(tmp_path):
    """What a reader learns of a log is a dataclass: a misspelt field is an error, not a new key."""
    from speed.data.meta import EventsMeta

    path = tmp_path / "log.csv"
    path.write_text("src,dst,t\n1,2,3\n2,1,2\n")
    ev = speed.read_events(path, progress=False)
    assert isinstance(ev.meta, EventsMeta)
    assert ev.meta.format == "csv" and ev.meta.sorted_input is False and ev.meta.first_data_line == 2
    with pytest.raises(TypeError, match="no field splt_times"):
        ev.meta.update(splt_times=(1.0, 2.0))
    with pytest.warns(DeprecationWarning, match="meta.format"):
        assert ev.meta["format"] == "csv"
    assert ev.select(slice(0, 1)).meta is not ev.meta and ev.select(slice(0, 1)).meta.source == str(path)
