"""The shipped examples run as documented."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_partition_and_merge_example(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "partition_and_merge.py"),
                           str(ROOT / "data" / "sample.csv"), str(tmp_path / "shards")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "edge cut" in proc.stdout and "recovered by merging" in proc.stdout
    assert (tmp_path / "shards" / "manifest.json").exists()
