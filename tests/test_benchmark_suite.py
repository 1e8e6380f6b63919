"""The benchmark suite's entry point (python -m benchmarks): its refusals, and the stamped table it
writes from a result (no section is run here: they are measurements, minutes each)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import suite  # noqa: E402
from _trees import machine_name, stamp  # noqa: E402


def test_an_unknown_section_or_tree_is_a_one_line_error(tmp_path):
    for args, said in ((["cpu", "--sections", "nope"], "no section nope"),
                       (["cpu", "--tree", str(tmp_path)], "not a checkout of speed"),
                       (["cpu", "--quick", "--log", str(tmp_path / "nope.csv")], "nope.csv: no such file")):
        done = subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_result_is_stamped_and_tabled(tmp_path):
    st = stamp(ROOT)
    assert st["commit"] and st["cores"] >= 1 and st["torch"] and st["date"]
    assert machine_name() and "/" not in machine_name()
    sections = {"eval_pass": {"widths": [{"width": 100, "train_events_per_s": 1000.0,
                                          "passes": {"val": 1.8}, "passes_per_key": {"val": 3.1}}],
                              "seconds": 1.0},
                "step_ops": {"error": "step_cost.py: boom", "seconds": 0.1}}
    result = {"suite": "cpu-quick", "stamps": {str(ROOT): st}, "sections": sections,
              "ratios": {"/other": suite.ratios(sections, {"eval_pass": {
                  "widths": [{"width": 100, "passes": {"val": 0.9}}]}})}}
    text = suite.table(result, tmp_path / "cpu-quick.json")
    assert "| width 100: val pass / training | 1.800 |" in text and "failed: step_cost.py: boom" in text
    assert "| width 100: val pass / training, per memory key | 3.100 |" in text
    assert "python -m benchmarks cpu --quick" in text and "| eval_pass | width 100: val pass / training | 2.000 |" in text
    json.dumps(result)  # what the suite writes is JSON


def _pac_section(n2_validate: float) -> dict:
    def rank(n, threads, validate):
        return {"threads": threads, "train_seconds": 10.0 / n, "train_events_per_s": 1000.0 * n,
                "validate_seconds": validate, "run_seconds": 20.0,
                "phases": {"train": 10.0 / n, "validate": validate, "test": 2.0, "other": 3.0},
                "rank_peak_rss_bytes": [int(1e9)] * n, "planned_peak_bytes": [int(1.1e9)] * n}
    return {"shards": "x-p8", "training_steps": 600, "eval_batches": 150, "n1": rank(1, 2, 3.0),
            "n2": rank(2, 1, n2_validate), "ratios": {"train": 0.5, "validate": n2_validate / 3.0, "run": 1.0}}


def test_the_page_is_made_from_stored_results_with_their_commands_and_charts(tmp_path, monkeypatch):
    """docs/benchmarks.md and the README's block come from the result files alone: every table
    names its command and file, a second run of a suite gives the page its noise, a question with
    no result says which command answers it, and the charts are drawn."""
    import report

    st = stamp(ROOT)
    machine = tmp_path / "benchmarks" / "results" / "some-cpu-2c"
    machine.mkdir(parents=True)
    ran = {"commit": st["commit"], "dirty": False, "date": st["date"]}
    sections = {"partition": {"events": 10, "events_per_s": 5.0e6, "read_seconds": 1.0, "ran": ran},
                "pac": {**_pac_section(4.0), "ran": ran},
                "train_pyg": {"logs": [{"log": "unseen.csv", "speed_events_per_s": 900.0, "pyg_events_per_s": 600.0,
                                        "speedup": 1.5}],
                              "batches": [{"batch": b, "log": "unseen.csv", "speed_events_per_s": 900.0 * b / 200,
                                           "pyg_events_per_s": 600.0, "speedup": 1.5 * b / 200} for b in (200, 1000)],
                              "ran": ran}}
    result = {"suite": "cpu-quick", "stamps": {str(ROOT): st}, "sections": sections}
    (machine / "cpu-quick.json").write_text(json.dumps(result))
    before = json.loads(json.dumps(result))
    before["sections"]["partition"]["events_per_s"] = 4.0e6  # the run before: 25% apart
    (machine / "cpu-quick.previous.json").write_text(json.dumps(before))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{report.MARKS[0]}\nSTALE LINE\n{report.MARKS[1]}\n\nrest\n")
    monkeypatch.setattr(report, "RESULTS", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "DOC", tmp_path / "docs" / "benchmarks.md")
    monkeypatch.setattr(report, "README", readme)
    (tmp_path / "docs").mkdir()
    assert report.main() == 0
    page = report.DOC.read_text()
    assert len(page.splitlines()) <= 300
    assert "| SEP events/s | 5,000,000 |" in page and "differed by at most 25%" in page
    assert "`python -m benchmarks cpu --quick --sections pac`" in page
    assert "[`benchmarks/results/some-cpu-2c/cpu-quick.json`]" in page
    assert "| unseen.csv: speed / PyG | 1.500 |" in page and "| batch 1000: speed / PyG | 7.500 |" in page
    assert "`python -m benchmarks quality --quick` answers it" in page  # no quality result stored
    for png in ("throughput_batch.png", "pac_phases.png", "pac_memory.png"):
        assert (machine / png).stat().st_size > 1000 and f"some-cpu-2c/{png}" in page
    text = readme.read_text()
    assert "STALE LINE" not in text and text.endswith("rest\n") and "unseen.csv: 900 events/s, 1.50× PyG's TGN" in text
    assert "validation 1.33× the seconds" in text


def test_quality_summarises_the_seeds_and_draws_them(tmp_path):
    import quality

    runs = [{"log": g, "setting": s, "seed": k, "epochs_run": 20, "best_epoch": 19, "val_ap": [0.8] * 20,
             "test_ap": ap, "test_ap_inductive": ap - 0.05, "seconds": 40.0}
            for g in ("collegemsg", "generated") for s in ("single", "pac") for k, ap in enumerate((0.86, 0.88, 0.90))]
    rows = quality.summarise(runs)
    assert len(rows) == 4
    r = rows[0]
    assert (r["log"], r["setting"], r["seeds"]) == ("collegemsg", "single", 3)
    assert abs(r["test_ap_mean"] - 0.88) < 1e-12 and abs(r["test_ap_std"] - 0.02) < 1e-12
    assert r["published"] == quality.PUBLISHED["collegemsg"] and rows[2]["published"] is None
    result = {"suite": "quality-quick", "command": "python -m benchmarks quality --quick", "stamp": stamp(ROOT), "epochs": 20, "patience": 20, "lr": 1e-4, "parts": 4,
              "nproc": 2, "seeds": [0, 1, 2], "skipped": ["wikipedia"], "runs": runs, "summary": rows}
    text = quality.table(result, tmp_path / "quality-quick.json")
    assert "| collegemsg | single | 3 | 0.8800 ± 0.0200 |" in text and "Skipped (file missing): wikipedia." in text
    quality.chart(result, tmp_path / "q.png")
    assert (tmp_path / "q.png").stat().st_size > 1000


def test_quality_refuses_an_unknown_log():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "quality", "--logs", "nope"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "unknown log or setting: nope" in done.stderr


def test_the_scale_section_is_read_by_its_curve_and_its_10m_run():
    r = {"node_sweep": [{"distinct_nodes": 9876, "speed_events_per_s": 15000.0},
                        {"distinct_nodes": 654321, "speed_events_per_s": 14000.0}],
         "pac": [{"events": 10_000_000, "epoch_seconds": {"train": 400.0, "validate": 150.0},
                  "final_evaluation_seconds": 50.0, "train_events_per_s": 17000.0,
                  "ranks": [{"run_peak_rss_bytes": 2_000_000_000}, {"run_peak_rss_bytes": 2_100_000_000}]}]}
    h = suite.headline("scale", r)
    assert h["654,321 nodes: speed events/s"] == 14000.0
    assert h["PAC 10,000,000 events: validation and test / training seconds"] == 0.5
    assert h["PAC 10,000,000 events: largest rank peak, GB"] == 2.1


def test_every_script_is_named_on_the_page_and_there_are_at_most_15():
    """The page lists every file of benchmarks/ with what it is for (report.SCRIPTS), and the
    folder stays small: a one-off measurement lives in a commit, not beside the suite."""
    import report

    files = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert sorted(name for name, _ in report.SCRIPTS) == files
    assert len(files) <= 15
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert all(f"`benchmarks/{name}`" in page for name in files)


def test_device_busy_time_counts_overlapping_kernels_once():
    from step_cost import busy_us

    assert busy_us([]) == 0.0
    assert busy_us([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17.0  # 0-12 and 20-25
    assert busy_us([(30, 40), (0, 5)]) == 15.0  # in any order


def test_step_cost_splits_a_step_into_what_grows_with_the_batch_and_what_does_not():
    from step_cost import batch_fits

    def row(tree, batch, ms, dim=4):
        return {"tree": tree, "device": "cpu", "dim": dim, "pipeline": None, "cuda_graph": False,
                "compile": False, "threads": 2, "batch": batch, "step_ms": ms}

    # 3 ms whatever the batch, 20 us an event: at batch 200, 3 of 7 ms do not grow with it
    rows = [row("a", b, 3.0 + 0.02 * b) for b in (10, 50, 200)] + [row("b", 200, 5.0)]
    (fit,) = batch_fits(rows)  # tree b has one batch size: nothing to fit
    assert fit["tree"] == "a" and fit["batches"] == [10, 50, 200]
    assert fit["fixed_ms"] == pytest.approx(3.0) and fit["per_event_us"] == pytest.approx(20.0)
    assert fit["fixed_share"] == pytest.approx(3.0 / 7.0)
    # widths are fitted apart
    assert len(batch_fits([row("a", b, 1.0 + b, dim=d) for b in (1, 2) for d in (4, 100)])) == 2
