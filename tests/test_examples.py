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


def test_readme_use_a_trained_model_runs(tmp_path):
    import re

    text = (ROOT / "README.md").read_text()
    code = re.search(r"<!-- readme-use-a-trained-model -->\n```python\n(.*?)```", text, re.S).group(1)
    code = code.replace('"runs/', f'"{tmp_path}/runs/')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Predictor(tgn, 1963 nodes" in proc.stdout and "(2, 100)" in proc.stdout
