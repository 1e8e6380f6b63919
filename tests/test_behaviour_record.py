"""The golden record: every training path's deterministic figures equal the stored ones.

``benchmarks/behaviour.py`` runs the 14 deterministic runs (4 recipes single-process and with 2
ranks, updates single and parallel) and compares each figure, exactly, with this machine's
record, ``benchmarks/results/<machine>/behaviour.json``.  A record is updated on purpose, by a
commit that says why the figures moved.  Slow (about a minute on 2 cores) and tied to one
machine's CPU, torch build and thread count (the same code gives other bits on another CPU), so
it runs with ``pytest -m slow``, and is skipped, saying so, on a machine that has no record."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _trees import machine_name  # noqa: E402


@pytest.mark.slow
def test_deterministic_figures_equal_the_stored_record(tmp_path):
    record = ROOT / "benchmarks" / "results" / machine_name() / "behaviour.json"
    if not record.exists():
        pytest.skip(f"no golden record for this machine ({machine_name()}): run a commit whose figures equal "
                    f"another machine's record with benchmarks/behaviour.py --out {record.relative_to(ROOT)}")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "behaviour.py"), "--out",
                           str(tmp_path / "now.json"), "--compare", str(record)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"identical to {record}" in done.stdout
