"""Training configs in files: ``speed train --config run.toml`` (or ``.yaml``).

Keys are the fields of :class:`~speed.train.config.TrainConfig`, written as in Python
(``batch_size``) or as on the command line (``batch-size``).  Command-line flags override the
file.  The resolved config of a run is written back as ``RUN/config.toml``, which
``--config`` reads again.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any, Dict

from ..errors import InputError
from .config import TrainConfig


def config_keys() -> Dict[str, str]:
    """Accepted key -> field name: every field, by its name and its dashed name."""
    keys = {}
    for f in fields(TrainConfig):
        if f.name == "progress":
            continue
        keys[f.name] = f.name
        keys[f.name.replace("_", "-")] = f.name
    return keys


def load_config_file(path) -> Dict[str, Any]:
    """The training settings in a TOML or YAML file, as ``TrainConfig`` field names.

    Raises
    ------
    InputError
        The file is missing, does not parse, is not a table of settings, or has a key that
        is not a setting (the error names it).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("config file not found", path)
    text = path.read_text()
    suffix = path.suffix.lower()
    if suffix == ".toml":
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"not valid TOML: {exc}", path) from None
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise InputError("reading YAML needs PyYAML (pip install pyyaml), or write the config as TOML",
                             path) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            raise InputError(f"not valid YAML: {str(exc).splitlines()[0]}", path,
                             None if line is None else line + 1) from None
        data = {} if data is None else data
    else:
        raise InputError(f"config files are .toml, .yaml or .yml, got '{path.suffix}'", path)
    if not isinstance(data, dict):
        raise InputError("a config file is a table of settings (key = value)", path)
    keys = config_keys()
    out = {}
    for key, value in data.items():
        if key not in keys:
            raise InputError(f"unknown setting '{key}' (settings: {', '.join(sorted(k for k in keys if '-' not in k))})",
                             path)
        out[keys[key]] = value
    return out


def dump_toml(config: Dict[str, Any]) -> str:
    """``config`` as TOML ``key = value`` lines (None values are left out: they mean the default)."""
    lines = ["# the resolved settings of this run; `speed train --config` reads this file"]
    for key, value in config.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            text = "[" + ", ".join(repr(float(v)) if isinstance(v, float) else json.dumps(v) for v in value) + "]"
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            if isinstance(value, float) and not math.isfinite(value):
                continue
            text = repr(value)
        else:
            text = json.dumps(str(value))  # a TOML basic string
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"
