"""The shipped examples and the documentation: examples run, the README's Python runs, links resolve,
and the CLI reference names every option."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def test_partition_and_merge_example(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "partition_and_merge.py"),
                           str(ROOT / "data" / "sample.csv"), str(tmp_path / "shards")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "edge cut" in proc.stdout and "recovered by merging" in proc.stdout
    assert (tmp_path / "shards" / "manifest.json").exists()


def test_readme_python_runs_as_a_saved_script(tmp_path):
    """As people run it: saved to a file and run with python (spawned ranks import that file)."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "the README shows Python"
    for k, code in enumerate(blocks):
        script = tmp_path / f"readme_{k}.py"
        script.write_text(code.replace('"runs/', f'"{tmp_path}/runs/'))
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Predictor(tgn, 1963 nodes" in proc.stdout and "(2, 100)" in proc.stdout


def test_a_script_without_the_main_guard_is_told_what_to_do(tmp_path):
    shards = tmp_path / "s"
    import speed

    ev = speed.read_events(ROOT / "data" / "sample.csv", progress=False)
    split = speed.chronological_split(ev)
    speed.partition(split.train(ev), num_parts=2).save(shards, events=ev, split=split)
    script = tmp_path / "unguarded.py"
    script.write_text(f"import speed\nspeed.train({str(shards)!r}, epochs=1, nproc=2, out={str(tmp_path / 'run')!r}, "
                      "progress=False)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode != 0
    assert "put the code that calls it under `if __name__ == \"__main__\":`" in proc.stderr
    assert "bootstrapping phase" not in proc.stderr


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_relative_links_resolve(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.name}: broken links {broken}"


def test_slug_is_githubs():
    assert slug("Logs larger than memory: `--max-memory`") == "logs-larger-than-memory---max-memory"
    assert slug("speed embed and speed score") == "speed-embed-and-speed-score"


def test_cli_reference_names_every_option():
    from speed.cli import build_parser

    doc = (ROOT / "docs" / "cli.md").read_text()
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [f"{name} {flag}" for name, parser in sub.choices.items() for action in parser._actions
               for flag in action.option_strings if flag.startswith("--") and flag != "--help" and flag not in doc]
    assert not missing, f"docs/cli.md does not mention {missing}"
