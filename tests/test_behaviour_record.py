"""The golden record: every training path's deterministic figures equal the stored ones.

``benchmarks/behaviour.py`` runs the 14 deterministic runs (4 recipes single-process and with 2
ranks, updates single and parallel) and compares each figure, exactly, with
``benchmarks/results/behaviour.json``.  The record is updated on purpose, by a commit that says why
the figures moved.  Slow (about a minute on 2 cores) and tied to one machine's torch build and
thread count, so it runs with ``pytest -m slow``."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "behaviour.json"


@pytest.mark.slow
def test_deterministic_figures_equal_the_stored_record(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "behaviour.py"), "--out",
                           str(tmp_path / "now.json"), "--compare", str(RECORD)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"identical to {RECORD}" in done.stdout
