"""``speed train --config``: settings from TOML or YAML files, flags override, resolved file written."""

import json

import numpy as np
import pytest

from conftest import random_stream
from speed.cli import main
from speed.train.config_file import dump_toml, load_config_file


@pytest.fixture
def log(tmp_path):
    src, dst, t = random_stream(np.random.default_rng(0), 40, 900)
    p = tmp_path / "log.csv"
    p.write_text("src,dst,t\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(src, dst, t)))
    return p


SMALL = "memory_dim = 8\ntime-dim = 8\nembedding_dim = 8\nneighbors = 3\n"


def test_file_settings_apply_and_flags_override(tmp_path, log, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(SMALL + 'model = "jodie"\nepochs = 2\nbatch_size = 150\nval = 0.2\neval_negatives = "historical"\nprotocol = "dyglib"\n')
    out = tmp_path / "run"
    assert main(["train", str(log), "--out", str(out), "--config", str(cfg), "--epochs", "1", "--no-progress"]) == 0
    m = json.loads((out / "metrics.json").read_text())["config"]
    assert m["model"] == "jodie" and m["batch_size"] == 150 and m["memory_dim"] == 8 and m["time_dim"] == 8
    assert m["epochs"] == 1  # the flag wins over the file
    assert m["val"] == 0.2 and m["eval_negatives"] == "historical"  # a setting without a flag
    # the resolved settings are written back, and read again as a config file
    again = load_config_file(out / "config.toml")
    assert again["epochs"] == 1 and again["batch_size"] == 150 and again["model"] == "jodie"
    capsys.readouterr()


def test_yaml_config(tmp_path, log, capsys):
    pytest.importorskip("yaml")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("memory_dim: 8\ntime_dim: 8\nembedding_dim: 8\nneighbors: 3\nepochs: 1\nmodel: dyrep\n")
    out = tmp_path / "run"
    assert main(["train", str(log), "--out", str(out), "--config", str(cfg), "--no-progress"]) == 0
    assert json.loads((out / "metrics.json").read_text())["config"]["model"] == "dyrep"
    capsys.readouterr()


@pytest.mark.parametrize("text, name, expect", [
    ("epochz = 3\n", "bad.toml", "unknown setting 'epochz'"),
    ("epochs = \n", "bad.toml", "not valid TOML"),
    ("epochs = 'ten'\n", "bad.toml", "epochs must be"),
    ("- 1\n- 2\n", "bad.yaml", "a table of settings"),
    ("epochs = 1\n", "bad.ini", "config files are .toml"),
])
def test_bad_config_files_are_one_line_errors(tmp_path, log, capsys, text, name, expect):
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    cfg = tmp_path / name
    cfg.write_text(text)
    code = main(["train", str(log), "--out", str(tmp_path / "run"), "--config", str(cfg), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and expect in err, err
    assert name in err or "epochs must be" in err


def test_dump_toml_round_trip(tmp_path):
    cfg = {"model": "tgn", "lr": 0.0001, "epochs": 3, "deterministic": False, "nproc": None, "device": 'say "hi"'}
    p = tmp_path / "c.toml"
    p.write_text(dump_toml(cfg))
    back = load_config_file(p)
    assert back == {k: v for k, v in cfg.items() if v is not None}


def test_split_times_in_partition_train_and_config(tmp_path, log, capsys):
    import speed

    ev = speed.read_events(log, progress=False)
    t = ev.t_float()
    tv, tt = float(t[500]), float(t[700])
    sp = speed.chronological_split(ev, times=(tv, tt))
    assert sp.num_train == int((t <= tv).sum()) and sp.num_val == int(((t > tv) & (t <= tt)).sum())
    assert sp.val_time == tv and sp.test_time == tt
    # partition, in memory and out of core, records the same split
    for extra in ([], ["--max-memory", "1G"]):
        out = tmp_path / f"shards{len(extra)}"
        assert main(["partition", str(log), "-o", str(out), "--no-progress", "--split-times", str(tv), str(tt),
                     *extra]) == 0
        m = json.loads((out / "manifest.json").read_text())["split"]
        assert (m["num_train_events"], m["num_val_events"]) == (sp.num_train, sp.num_val)
    # train from the log with the flag, then again from its resolved config.toml
    run = tmp_path / "run"
    assert main(["train", str(log), "--out", str(run), "--epochs", "1", "--memory-dim", "8", "--time-dim", "8",
                 "--embedding-dim", "8", "--neighbors", "3", "--no-progress", "--split-times", str(tv), str(tt)]) == 0
    m = json.loads((run / "metrics.json").read_text())
    assert m["data"]["num_val_events"] == sp.num_val and m["config"]["split_times"] == [tv, tt]
    assert load_config_file(run / "config.toml")["split_times"] == [tv, tt]
    capsys.readouterr()


@pytest.mark.parametrize("times", [["5", "1"], ["1", "nan"], ["x", "2"]])
def test_bad_split_times(tmp_path, log, capsys, times):
    try:
        code = main(["partition", str(log), "-o", str(tmp_path / "o"), "--no-progress", "--split-times", *times])
    except SystemExit as exc:  # argparse refuses a value that is not a time
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and ("split times" in err or "date-time" in err), err
    assert not (tmp_path / "o").exists()


def test_split_times_accept_date_times(tmp_path, capsys):
    rows = "".join(f"{i % 7},{(i * 3) % 11},2024-01-{1 + i // 40:02d}T{i % 24:02d}:00:00\n" for i in range(600))
    rows = "src,dst,t\n" + "\n".join(sorted(rows.strip().split("\n"), key=lambda r: r.split(",")[2])) + "\n"
    (tmp_path / "dt.csv").write_text(rows)
    out = tmp_path / "s"
    assert main(["partition", str(tmp_path / "dt.csv"), "-o", str(out), "--no-progress",
                 "--split-times", "2024-01-08", "2024-01-12T00:00:00Z"]) == 0
    m = json.loads((out / "manifest.json").read_text())["split"]
    assert m["val_time"] == 1704672000.0 and m["test_time"] == 1705017600.0
    capsys.readouterr()
