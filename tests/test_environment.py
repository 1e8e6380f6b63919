"""The installed stack and the documented commands."""

import importlib.metadata as md
import re
import subprocess
import sys
import textwrap
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
    # a fresh interpreter in which the optional packages cannot be imported
    code = textwrap.dedent("""
        import sys
        BLOCKED = ("dgl", "torch_geometric", "pandas", "yaml", "psutil")
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"blocked {name}")
        sys.meta_path.insert(0, Block())
        import numpy as np
        import speed
        for name in speed.__all__:
            assert hasattr(speed, name), name
        ev = speed.Events.from_arrays(np.arange(40) % 7, (np.arange(40) + 1) % 7, np.arange(40))
        speed.partition(ev, 2, topk=0.2)
        for call in (lambda: speed.to_dgl(ev), lambda: speed.to_pyg(ev)):
            try:
                call()
            except speed.MissingDependencyError as exc:
                assert "pip install 'speed-tig[" in str(exc), exc
            else:
                raise AssertionError("an optional package was importable")
        assert not any(m.split(".")[0] in BLOCKED for m in sys.modules)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    assert len(blocks) >= 2, "the README's first two commands are bash blocks"
    test_cmd = blocks[1].strip()
    assert "pytest" in test_cmd
    assert test_cmd in (ROOT / ".ci" / "run").read_text()
