"""The installed stack and the documented commands."""

import importlib.metadata as md
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _installed(dist: str) -> bool:
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        return False
    return True


def test_dgl_extra_loads_when_installed():
    # The `dgl` extra pins the only stack DGL 2.1.0 loads with; if it is installed it must work.
    if not _installed("dgl"):
        pytest.skip("the dgl extra is not installed")
    import dgl
    import numpy as np
    import torch

    assert dgl.__version__.startswith("2.1")
    assert np.__version__.startswith("1.")
    g = dgl.graph((torch.tensor([0, 1]), torch.tensor([1, 2])))
    g.edata["t"] = torch.tensor([0.5, 1.5])
    assert g.num_edges() == 2 and g.num_nodes() == 3


def test_core_imports_without_optional_packages():
    import speed

    for name in speed.__all__:
        assert hasattr(speed, name), name


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    assert len(blocks) >= 2, "the README's first two commands are bash blocks"
    test_cmd = blocks[1].strip()
    assert "pytest" in test_cmd
    assert test_cmd in (ROOT / ".ci" / "run").read_text()
