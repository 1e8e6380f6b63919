"""Training end to end: every model learns, runs are reproducible, the CLI writes its outputs."""

import json

import numpy as np
import pytest

import speed
from speed.cli import main
from speed.train import TrainConfig, Trainer
from speed.train.recipes import MODELS
from speed.train.run.checkpoint import load_checkpoint


def periodic_log(num_users=12, num_items=6, rounds=60, seed=0):
    """Each user keeps meeting its own item, users in a shuffled order each round: a pattern
    a memory model learns in a few hundred steps."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for _ in range(rounds):
        for u in rng.permutation(num_users):
            src.append(u)
            dst.append(num_users + u % num_items)
    labels = (np.arange(len(src)) % 17 == 0).astype(np.int64)
    return speed.Events.from_arrays(src, dst, np.arange(len(src)) * 10, label=labels)


SMALL = dict(memory_dim=16, time_dim=16, embedding_dim=16, neighbors=5, batch_size=20, progress=False,
             num_threads=1, new_node_fraction=0.0)  # 18 nodes: holding any out would remove an item


@pytest.mark.parametrize("name", MODELS)
def test_each_model_learns_on_a_tiny_graph(name):
    # one item per user: a random negative is rarely the true item, so the loss falls well
    # clear of the noise (with 6 items shared by 12 users, 1 negative in 6 was a true pair and
    # the curve depended on the BLAS build)
    ev = periodic_log(num_items=12)
    split = speed.chronological_split(ev, seed=0, new_node_fraction=0.0)
    tr = Trainer.local(ev, split, TrainConfig(model=name, lr=5e-3, epochs=8, seed=0, **SMALL))
    losses = [tr.training.train_epoch(e).loss for e in range(1, 9)]
    # chance level is 2 ln 2 = 1.386; compare the best late epoch with the first
    assert min(losses[-3:]) < losses[0] - 0.3, losses
    tr.evaluator.prepare(tr.model)
    val, _ = tr.evaluator.evaluate(tr.model, "val")
    assert val["transductive"]["ap"] > 0.75


def test_same_seed_same_metrics(tmp_path):
    ev = periodic_log()
    kw = dict(model="tgn", epochs=2, lr=1e-3, seed=3, deterministic=True, **SMALL)
    a = speed.train(ev, **kw)
    b = speed.train(ev, **kw)
    # measurements (times, the process's peak memory) are not results
    strip = (lambda m: {k: v for k, v in m.items() if k not in ("seconds", "peak_rss_bytes", "rank_peak_rss_bytes",
                                                                "evaluation_work")} | {
        "epochs": [{k: v for k, v in e.items() if k not in ("train_seconds", "train_events_per_s", "seconds")}
                   for e in m["epochs"]]})
    same = (lambda x, y: json.dumps(strip(x), sort_keys=True) == json.dumps(strip(y), sort_keys=True))  # NaN-safe
    assert same(a, b)
    c = speed.train(ev, **(kw | {"seed": 4}))
    assert not same(a, c)


def test_cli_train_writes_metrics_curves_and_checkpoint(tmp_path, capsys):
    log = speed.write_generated(tmp_path / "log.csv", 60, 1500, seed=0)
    run = tmp_path / "run"
    code = main(["train", str(log), "--model", "tgn", "--epochs", "2", "--out", str(run), "--batch-size", "100",
                 "--memory-dim", "16", "--time-dim", "16", "--embedding-dim", "16", "--threads", "1",
                 "--mrr-negatives", "5"])
    out = capsys.readouterr().out
    assert code == 0 and "test AP" in out
    m = json.loads((run / "metrics.json").read_text())
    assert m["model"] == "tgn" and m["nproc"] == 1 and [e["epoch"] for e in m["epochs"]] == [1, 2]
    for e in m["epochs"]:
        assert {"epoch", "train_seconds", "train_events", "train_events_per_s", "loss", "val"} <= set(e)
        assert {"ap", "auc"} <= set(e["val"]["transductive"])
    assert {"ap", "auc", "mrr"} <= set(m["test"]["transductive"]) and {"ap", "auc"} <= set(m["test"]["inductive"])
    assert "negatives_true_edges" in m
    assert (run / "curves.png").stat().st_size > 1000
    ckpt = load_checkpoint(run / "best.json")
    assert ckpt.epoch >= 1 and ckpt.optimizer and ckpt.rng and ckpt.config
    assert "memory.memory" in ckpt.model


def test_node_classification_when_labels_exist():
    ev = periodic_log(rounds=60)
    m = speed.train(ev, model="jodie", epochs=1, lr=1e-3, seed=0, **SMALL)
    assert {"auroc", "val_auroc", "epoch"} <= set(m["node_classification"])
    again = speed.train(ev, model="jodie", epochs=1, lr=1e-3, seed=0, **SMALL)
    assert again["node_classification"] == m["node_classification"]  # seeded
    # a test period with one class cannot be scored: no figure rather than a meaningless one
    label = ev.label.copy()
    label[int(0.85 * len(label)):] = 0
    one_class = speed.Events.from_arrays(ev.src, ev.dst, ev.t, label=label)
    assert "node_classification" not in speed.train(one_class, model="jodie", epochs=1, seed=0, **SMALL)


def test_train_on_shards_uses_the_stored_split(tmp_path):
    ev = periodic_log()
    split = speed.chronological_split(ev, seed=0, new_node_fraction=0.0)
    res = speed.partition(split.train(ev), 2, topk=0.1)
    sh = speed.load_shards(res.save(tmp_path / "s", events=ev, split=split))
    m = speed.train(sh, model="tgn", epochs=1, seed=0, **SMALL)
    assert m["data"]["num_train_events"] == int(split.train_mask.sum())
    assert m["data"]["num_events"] == len(ev)


@pytest.mark.parametrize("args, expected", [
    (["--epochs", "0"], "epochs must be an integer >= 1"),
    (["--lr", "-1"], "lr must be a positive number"),
    (["--batch-size", "0"], "batch_size must be an integer >= 1"),
    (["--device", "tpu"], "device must be"),
])
def test_cli_train_bad_options(tmp_path, capsys, args, expected):
    log = speed.write_generated(tmp_path / "log.csv", 50, 500, seed=0)
    code = main(["train", str(log), "--out", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_cli_train_bad_inputs(tmp_path, capsys):
    assert main(["train", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "run")]) == 2
    assert "nope.csv: file not found" in capsys.readouterr().err
    (tmp_path / "bad.csv").write_text("1,2,3\n4,5,x\n")
    assert main(["train", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "run")]) == 2
    assert "bad.csv:2: time 'x' is not a number" in capsys.readouterr().err
    (tmp_path / "empty_dir").mkdir()
    assert main(["train", str(tmp_path / "empty_dir"), "--out", str(tmp_path / "run")]) == 2
    assert "not a shards directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["train", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "run"), "--model", "gcn"])
    assert info.value.code == 2
    assert not (tmp_path / "run").exists()


def test_single_process_resume_equals_an_uninterrupted_run(tmp_path):
    ev = periodic_log()
    kw = dict(model="tgn", lr=1e-3, seed=0, patience=10, **SMALL)
    full = speed.train(ev, epochs=3, out=tmp_path / "full", **kw)
    speed.train(ev, epochs=1, out=tmp_path / "part", **kw)
    resumed = speed.train(ev, epochs=3, resume=True, out=tmp_path / "part", **kw)

    def core(m):
        return json.dumps({"epochs": [(e["loss"], e["val"]) for e in m["epochs"]], "test": m["test"],
                           "best": m["best_epoch"]}, sort_keys=True)

    assert core(full) == core(resumed)
    with pytest.raises(speed.InputError, match="no checkpoint here"):
        speed.train(ev, epochs=2, resume=True, out=tmp_path / "never", **kw)


def test_best_and_last_share_one_checkpoint_schema(tmp_path):
    from speed.train.run.checkpoint import load_checkpoint

    ev = periodic_log()
    speed.train(ev, model="tige", epochs=2, lr=1e-3, seed=0, out=tmp_path, **SMALL)
    best, last = load_checkpoint(tmp_path / "best.json"), load_checkpoint(tmp_path / "last.json")
    assert (best.kind, last.kind) == ("best", "last") and last.epoch == 2
    # best: weights and the whole node state of both TIGE memories, with the values the pending
    # events' messages carry; last: weights only
    assert best.model["memory.memory"].shape[0] == ev.num_nodes
    assert best.model["left_memory.memory"].shape[0] == ev.num_nodes
    assert not any(k.startswith(("memory.", "left_memory.")) for k in last.model)
    assert best.pending is not None and len(best.pending) == 4
    kept = best.extra["predictor"]["end"]["values"]
    assert set(kept["eid"].tolist()) == set(best.pending[3].tolist())  # one per pending event
    assert kept["values"].shape == (kept["eid"].numel(), 2, 16)
    model = speed.build_model("tige", ev.num_nodes, memory_dim=16, time_dim=16, embedding_dim=16, neighbors=5)
    model.load_weights_and_memories(best.model)  # a full-graph model loads the best checkpoint as it is
    (tmp_path / "broken.json").write_bytes(b"not a checkpoint")
    with pytest.raises(speed.InputError, match="broken.json: not a readable JSON file"):
        load_checkpoint(tmp_path / "broken.json")


def test_cli_defaults_come_from_the_config():
    from dataclasses import fields

    from speed.cli import build_parser
    from speed.train import TrainConfig

    args = build_parser().parse_args(["train", "x.csv", "--out", "r"])
    for f in fields(TrainConfig):
        if f.metadata["cli"]:
            assert getattr(args, f.name) == f.default, f.name


def test_cli_names_the_flag_of_a_bad_parameter(tmp_path, capsys):
    log = speed.write_generated(tmp_path / "log.csv", 50, 500, seed=0)
    assert main(["train", str(log), "--out", str(tmp_path / "run"), "--batch-size", "0"]) == 2
    assert "batch_size must be an integer >= 1, got 0 (--batch-size)" in capsys.readouterr().err
    with pytest.raises(speed.InputError, match="^epochs must be an integer >= 1"):
        speed.train(speed.read_events(log), epochs=0)  # the library speaks in parameter names


def test_message_and_aggregator_options_build_those_modules(tmp_path):
    from speed.train.model.modules import MeanAggregator, MLPMessage

    ev = periodic_log(rounds=20)
    m = speed.train(ev, model="tgn", epochs=1, seed=0, message="mlp", aggregator="mean", out=tmp_path, **SMALL)
    assert m["config"]["message"] == "mlp" and m["config"]["aggregator"] == "mean"
    model = speed.load_run(tmp_path).net  # rebuilt from the checkpoint's spec
    assert isinstance(model.message, MLPMessage) and isinstance(model.aggregator, MeanAggregator)
    with pytest.raises(speed.InputError, match="aggregator must be one of last, mean"):
        speed.train(ev, model="tgn", aggregator="max", **SMALL)


@pytest.mark.parametrize("model", ["tgn", "tige"])
def test_the_pipeline_changes_nothing_and_staleness_does(model):
    ev = periodic_log()
    kw = dict(model=model, epochs=2, lr=1e-3, seed=0, deterministic=True, **SMALL)

    def outcome(m):
        return [e["loss"] for e in m["epochs"]], m["test"]["transductive"]["ap"]

    plain = outcome(speed.train(ev, **kw))
    assert outcome(speed.train(ev, pipeline=True, **kw)) == plain
    assert outcome(speed.train(ev, pipeline=True, plan_threads=3, **kw)) == plain  # a plan's stages in 3 threads
    assert outcome(speed.train(ev, pipeline=True, staleness=2, **kw)) != plain
    with pytest.raises(speed.InputError, match="staleness needs the pipeline"):
        speed.train(ev, staleness=1, **kw)


def test_eval_max_steps_scores_the_first_batches_of_a_full_pass_and_evaluates_a_cut_epoch(tmp_path):
    """The bounded evaluation (a measuring aid) streams a pass's first N batches, scored exactly
    as the full pass scores them; with --max-steps the cut epoch is then validated, tested and
    saved, and the summary says the figures are not the periods'."""
    from speed.train.eval.evaluator import Evaluator

    ev = periodic_log()
    split = speed.chronological_split(ev, seed=0, new_node_fraction=0.0)
    tr = Trainer.local(ev, split, TrainConfig(model="tgn", epochs=1, seed=0, deterministic=True, **SMALL))
    tr.training.train_epoch(1)
    model = tr.model
    tr.evaluator.prepare(model)
    start = model.state.snapshots.backup()
    idx = tr.evaluator.period("val")
    full = Evaluator(ev, split, 20, 0)
    bounded = Evaluator(ev, split, 20, 0, max_steps=2)
    assert idx.size > 40
    whole = full.stream(model, idx, full.negatives("val"))
    model.state.snapshots.restore(start)
    first = bounded.stream(model, idx, bounded.negatives("val"))
    assert first.pos.size == 40 and whole.pos.size == idx.size
    assert np.array_equal(first.pos, whole.pos[:40]) and np.array_equal(first.neg, whole.neg[:40])

    m = speed.train(ev, epochs=1, seed=0, max_steps=3, eval_max_steps=2, out=tmp_path, **SMALL)
    assert m["epochs"][0]["cut"] and m["best_epoch"] == 1
    assert m["val"]["transductive"]["count"] == 40 and m["test"]["transductive"]["count"] == 40
    assert (tmp_path / "best.json").exists()
    from speed.cli.summaries import format_train_summary

    text = format_train_summary(m, tmp_path)
    assert "evaluation bounded to 2 batches a pass" in text and "40 val and 40 test events" in text
    with pytest.raises(speed.InputError, match="eval_max_steps"):
        speed.train(ev, epochs=1, eval_max_steps=0, **SMALL)


def test_max_steps_cuts_each_epoch_and_never_makes_it_the_best(tmp_path, capsys):
    ev = periodic_log()
    plain = speed.train(ev, epochs=1, seed=0, deterministic=True, **SMALL)
    wide = speed.train(ev, epochs=1, seed=0, deterministic=True, max_steps=10_000, **SMALL)
    assert [e["loss"] for e in wide["epochs"]] == [e["loss"] for e in plain["epochs"]]  # not cut: the same run
    assert not wide["epochs"][0]["cut"]
    m = speed.train(ev, epochs=2, seed=0, max_steps=3, out=tmp_path, **SMALL)
    assert all(e["cut"] and e["train_events"] == 3 * SMALL["batch_size"] and not e["val"] for e in m["epochs"])
    assert m["best_epoch"] is None and "test" not in m
    assert (tmp_path / "last.json").exists() and not (tmp_path / "best.json").exists()
    from speed.cli.summaries import format_train_summary

    text = format_train_summary(m, tmp_path)
    assert "cut after 60 events" in text and "no epoch was validated or tested" in text
