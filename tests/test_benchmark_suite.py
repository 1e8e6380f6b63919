"""The benchmark suite's entry point (python -m benchmarks): its refusals, and the stamped table it
writes from a result (no section is run here: they are measurements, minutes each)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import suite  # noqa: E402
from _stamp import machine_name, stamp  # noqa: E402


def test_an_unknown_section_or_tree_is_a_one_line_error(tmp_path):
    for args, said in ((["cpu", "--sections", "nope"], "no section nope"),
                       (["cpu", "--tree", str(tmp_path)], "not a checkout of speed")):
        done = subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_result_is_stamped_and_tabled(tmp_path):
    st = stamp(ROOT)
    assert st["commit"] and st["cores"] >= 1 and st["torch"] and st["date"]
    assert machine_name() and "/" not in machine_name()
    sections = {"eval_pass": {"widths": [{"width": 100, "train_events_per_s": 1000.0,
                                          "passes": {"val": 1.8}}], "seconds": 1.0},
                "step_ops": {"error": "step_cost.py: boom", "seconds": 0.1}}
    result = {"suite": "cpu-quick", "stamps": {str(ROOT): st}, "sections": sections,
              "ratios": {"/other": suite.ratios(sections, {"eval_pass": {
                  "widths": [{"width": 100, "passes": {"val": 0.9}}]}})}}
    text = suite.table(result, tmp_path / "cpu-quick.json")
    assert "| width 100: val pass / training | 1.800 |" in text and "failed: step_cost.py: boom" in text
    assert "python -m benchmarks cpu --quick" in text and "| eval_pass | width 100: val pass / training | 2.000 |" in text
    json.dumps(result)  # what the suite writes is JSON
