"""The package's layers: no import circle, and no layer imports one above it.

Imports are read from the source (AST), lazy ones inside functions included; a package's
``__init__`` re-exports are not edges (they gather names, they do not depend).
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "speed"

# lowest first: a module may import its own layer and the layers before it
LAYERS = [
    ("speed.errors", "speed.optional", "speed._util", "speed._signals", "speed._threads", "speed._params"),
    ("speed.data",),
    ("speed.partition",),
    ("speed.train",),
    ("speed.interop",),
    ("speed.cli", "speed.__main__"),
]


def modules():
    mods = {}
    for p in ROOT.rglob("*.py"):
        name = ".".join(p.relative_to(ROOT.parent).with_suffix("").parts)
        mods[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return mods


def import_graph():
    mods = modules()
    graph = {}
    for mod, path in mods.items():
        if path.name == "__init__.py":
            continue
        pkg = mod.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                cands = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                cands = [a.name for a in node.names]
            else:
                continue
            deps |= {c for c in cands if c in mods and c != mod and mods[c].name != "__init__.py"}
        graph[mod] = deps
    return graph


def find_cycle(graph):
    """A cycle as a list of modules, or None (iterative depth-first search, colours)."""
    colour = dict.fromkeys(graph, 0)
    for start in sorted(graph):
        if colour[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            nxt = next(children, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(nxt, 2) == 1:
                return path[path.index(nxt):] + [nxt]
            elif colour.get(nxt) == 0:
                colour[nxt] = 1
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
    return None


def layer_of(mod, layers=None, what="a layer: add it to LAYERS"):
    """The position of ``mod`` in ``layers`` (lowest first; default :data:`LAYERS`)."""
    for k, prefixes in enumerate(LAYERS if layers is None else layers):
        if any(mod == p or mod.startswith(p + ".") for p in prefixes):
            return k
    raise AssertionError(f"{mod} belongs to no {what}")


def test_no_import_circle():
    assert find_cycle(import_graph()) is None, f"import circle: {' -> '.join(find_cycle(import_graph()))}"


def test_layers_point_downward():
    upward = [f"{m} -> {d}" for m, deps in import_graph().items() for d in deps if layer_of(d) > layer_of(m)]
    assert not upward, "imports of a higher layer: " + "; ".join(sorted(upward))


# the rooms of the training package, lowest first: a module imports its own room and those before
# it, so no import runs back up between folders (a folder's modules may form no loop with another's)
TRAIN_ROOMS = [
    ("speed.train.recipes", "speed.train.protocols", "speed.train.config", "speed.train.config_file",
     "speed.train.world"),
    ("speed.train.state",),
    ("speed.train.model",),
    ("speed.train.step",),
    ("speed.train.run",),
    ("speed.train.eval",),
    ("speed.train.loop",),
    ("speed.train.pac",),
    ("speed.train.online",),
    ("speed.train.api",),
]


def room_of(mod):
    return layer_of(mod, TRAIN_ROOMS, "a room of speed.train: add it to TRAIN_ROOMS")


def test_training_rooms_point_downward():
    """Within ``speed.train``, no module imports one of a room above its own: the room map is a
    layering of folders, not only of modules."""
    graph = import_graph()
    train = [m for m in graph if m.startswith("speed.train.")]
    upward = [f"{m} -> {d}" for m in train for d in graph[m] if d.startswith("speed.train.")
              and room_of(d) > room_of(m)]
    assert not upward, "imports of a higher room: " + "; ".join(sorted(upward))


def test_the_rooms_check_reads_the_room_of_a_module():
    assert room_of("speed.train.step.engine") < room_of("speed.train.eval.evaluator") < \
        room_of("speed.train.loop.trainer") < room_of("speed.train.online.update")


@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"a2"}, "a2": set(), "b": {"a"}}, False),
])
def test_cycle_finder_finds_cycles(graph, cycle):
    assert (find_cycle(graph) is not None) == cycle


# ---------------------------------------------------------------- node state has one owner
STATE_PACKAGE = "speed.train.state"
# the parts of a node state (speed.train.state.nodes.NodeStates) and of the memories in it
STATE_PARTS = {"memory", "last_update", "store", "sampler", "event_values", "left_memory", "edge_features",
               "components"}


def test_only_the_state_package_reaches_into_node_state():
    """Outside ``speed.train.state`` node state is used through the verbs of ``NodeStates``:
    no module reads or assigns a memory, the pending store, the sampler, event values, edge
    features or components by attribute."""
    found = []
    for mod, path in modules().items():
        if mod == STATE_PACKAGE or mod.startswith(STATE_PACKAGE + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in STATE_PARTS:
                found.append(f"{mod}:{node.lineno} .{node.attr}")
    assert not found, "node state reached from outside its owner: " + "; ".join(found)


def test_the_state_package_stands_below_the_models():
    """Node state needs nothing of the training package above it (models, engine, evaluation)."""
    graph = import_graph()
    registries = TRAIN_ROOMS[0]  # the recipe table and the config (no torch) stand lower still
    above = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith(STATE_PACKAGE + ".")
             for d in deps if d.startswith("speed.train.") and not d.startswith(STATE_PACKAGE + ".")
             and d not in registries]
    assert not above, "; ".join(sorted(above))


# ------------------------------------------------------------ private members stay private
# Third-party private attributes speed has to use (not speed's own): torch's state-dict
# ``_metadata`` (kept when a state dict is rebuilt) and a sparse gradient's ``_values()``.
THIRD_PARTY_PRIVATE = {("speed.train.run.checkpoint", "_metadata"), ("speed.train.model.static", "_values")}


def private_names():
    """Every ``_name`` (not dunder) that speed defines: functions, classes, methods, module
    globals and attributes assigned on an object."""
    names = set()
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_reach_ins(tree, mod, names):
    """``x._name`` on anything but ``self``, ``cls`` or ``super()``, and ``from m import _name``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names and (mod, node.attr) not in THIRD_PARTY_PRIVATE:
            v = node.value
            if isinstance(v, ast.Name) and v.id in ("self", "cls"):
                continue
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
                continue
            found.append(f"{mod}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{mod}:{node.lineno} import {a.name}" for a in node.names if a.name in names]
    return found


def test_no_module_uses_another_ones_private_members():
    """A module's ``_private`` functions, classes and attributes are its own: another module
    (or an object's user) goes through a public name, so an owner can change its insides."""
    names = private_names()
    found = [f for mod, path in modules().items() for f in private_reach_ins(ast.parse(path.read_text()), mod, names)]
    assert not found, "private members used from outside: " + "; ".join(found)


def test_the_private_member_check_finds_reach_ins():
    names = {"_rows", "_helper"}
    src = ("def f(pred):\n    pred._rows(1)\n    self._rows(2)\n    super()._rows(3)\n"
           "from .x import _helper\n")
    assert sorted(private_reach_ins(ast.parse(src), "m", names)) == ["m:2 ._rows", "m:5 import _helper"]


# the serialised layout of node state (NodeStates.structures / backup): its keys are read inside
# speed.train.state only; a user of a snapshot goes through the state's verbs
STATE_LAYOUT_KEYS = {"sampler", "store", "values", "nbr", "nbr_t", "nbr_e", "hold", "head"}


def layout_reach_ins(tree, mod):
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant):
            key = node.args[0].value
        if key in STATE_LAYOUT_KEYS:
            found.append(f"{mod}:{node.lineno} [{key!r}]")
    return found


def test_only_the_state_package_reads_the_state_layout():
    found = [f for mod, path in modules().items()
             if not (mod == STATE_PACKAGE or mod.startswith(STATE_PACKAGE + "."))
             for f in layout_reach_ins(ast.parse(path.read_text()), mod)]
    assert not found, "node state's serialised layout read from outside: " + "; ".join(found)


def test_the_layout_check_finds_reach_ins():
    src = "a = payload['end']['sampler']\nb = s.get('store')\nc = d['other']\n"
    assert layout_reach_ins(ast.parse(src), "m") == ["m:1 ['sampler']", "m:2 ['store']"]


# ------------------------------------------------------------------- the documented module map
DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def doc_sections(text):
    """The code blocks' lines grouped under each ``speed/...`` line that starts at column 0."""
    sections, current, in_code = {}, None, False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code, current = not in_code, None
            continue
        if not in_code:
            continue
        if line.startswith("speed/"):
            current = line.split()[0].rstrip(",")
            sections.setdefault(current, "")
        elif line and not line[0].isspace():  # another top-level entry (tests/, benchmarks/)
            current = None
        if current is not None:
            sections[current] += line + "\n"
    return sections


def test_the_documented_module_map_names_every_module():
    """``docs/architecture.md`` names every module under its package's heading, and names no
    module that is not there."""
    text = DOC.read_text()
    sections = doc_sections(text)
    missing = []
    for mod, path in sorted(modules().items()):
        if path.name == "__init__.py" or path.parent == ROOT:
            continue
        top = f"speed/{path.relative_to(ROOT).parts[0]}/"
        if path.name not in sections.get(top, ""):
            missing.append(str(path.relative_to(ROOT.parent)))
    assert not missing, f"modules docs/architecture.md does not name under their package: {', '.join(missing)}"
    top_level = sorted(p.name for p in ROOT.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert all(f"speed/{name}" in text for name in top_level), top_level
    named = set(re.findall(r"\b(\w+\.py)\b", "".join(sections.values())))
    existing = {p.name for p in ROOT.rglob("*.py")}
    assert named <= existing, f"named but absent: {sorted(named - existing)}"


# ------------------------------------------------------------- what the document cites exists
REPO = ROOT.parent
# names the document cites that are not speed's (PyG's, Python's, torch's)
EXTERNAL = {"TGNMemory", "LastNeighborLoader", "DeprecationWarning", "nn.Module"}


def defined_at_top(path: Path, name: str) -> bool:
    """``name`` is a function, class or assigned name at the top level of the file."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def resolve_path(text: str):
    """A path as the document writes it: from the repository's root, or from ``speed/`` or
    ``speed/train/`` (``pac/sharded.py``), or a file name unique in the package."""
    for base in (REPO, ROOT, ROOT / "train"):
        if (base / text).exists():
            return base / text
    named = [p for p in ROOT.rglob(text)] if "/" not in text else []
    return named[0] if named else None


def top_level_names():
    """Every class, function and assigned name at a module's top level, with its module."""
    out = {}
    for mod, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
                [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
            for n in names:
                out.setdefault(n, []).append(mod)
    return out


def resolve_dotted(text: str, names) -> bool:
    """``Class.member``, ``module.name`` (a module under ``speed``/``speed.train``, as the
    document shortens them) or ``speed.name``: the object exists."""
    import importlib

    parts = text.split(".")
    if parts[0] == "speed":
        obj, rest = importlib.import_module("speed"), parts[1:]
    else:
        obj, rest = None, parts
        for prefix in ("speed.", "speed.train.", "speed.train.run.", "speed.train.pac.", "speed.data."):
            for cut in range(len(parts) - 1, 0, -1):
                try:
                    obj, rest = importlib.import_module(prefix + ".".join(parts[:cut])), parts[cut:]
                    break
                except ImportError:
                    continue
            if obj is not None:
                break
        if obj is None:
            owners = names.get(parts[0], [])
            if len(owners) != 1:
                return False
            obj, rest = getattr(importlib.import_module(owners[0]), parts[0]), parts[1:]
    for part in rest:
        if not hasattr(obj, part) and part not in getattr(obj, "__dataclass_fields__", {}):
            return False
        obj = getattr(obj, part, None)
    return True


def doc_citations(text: str):
    """``(kind, cited)`` for what the document names in backticks: ``file.py:name``, a path
    (``.py`` or a folder ending in ``/``), a dotted name, or a class or constant name."""
    out = []
    for cited in re.findall(r"`([^`\s]+)`", text):
        cited = cited.rstrip(",;").removesuffix("()")
        if cited in EXTERNAL or cited.startswith(("-", "[", "@", "speed-tig")):
            continue
        if re.fullmatch(r"[\w/]+\.py:\w+", cited):
            out.append(("file:name", cited))
        elif re.fullmatch(r"[\w/]+(\.py|/)", cited):
            out.append(("path", cited))
        elif re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", cited) and not re.search(r"\.(json|png|npz|toml|csv)$",
                                                                                       cited):
            out.append(("dotted", cited))
        elif re.fullmatch(r"[A-Z]\w*", cited):
            out.append(("name", cited))
    return out


def broken_citations(text: str):
    names = top_level_names()
    broken = []
    for kind, cited in doc_citations(text):
        if kind == "file:name":
            file, name = cited.split(":")
            path = resolve_path(file)
            ok = path is not None and defined_at_top(path, name)
        elif kind == "path":
            ok = resolve_path(cited.rstrip("/")) is not None
        elif kind == "dotted":
            ok = resolve_dotted(cited, names)
        else:
            ok = cited in names
        if not ok:
            broken.append(cited)
    return broken


def test_every_name_the_architecture_document_cites_exists():
    """Every ``file.py:name``, path, ``Class.member``, ``module.name`` and class or constant
    name in docs/architecture.md points at code that exists."""
    text = DOC.read_text()
    assert len(doc_citations(text)) > 60  # the check reads the document's citations
    broken = broken_citations(text)
    assert not broken, f"docs/architecture.md cites what is not there: {', '.join(broken)}"


def test_the_citation_check_finds_stale_names():
    text = ("`models.py:build_model` `speed/train/model/network.py:build_model` `speed/train/eval/negatives.py:"
            "NegativeSampler` `RowExchange.recent_interactions` `NodeStates.no_such_verb` `pac/sharded.py` "
            "`pac/gone.py` `RunFolder` `EpochLoop` `config.SYNC_RULES` `config.model`")
    assert broken_citations(text) == ["models.py:build_model", "speed/train/eval/negatives.py:NegativeSampler",
                                      "NodeStates.no_such_verb", "pac/gone.py", "EpochLoop", "config.model"]


# --------------------------------------------------- docstrings' and help texts' references
ROLE = re.compile(r":(mod|func|class|meth|attr|data|obj|exc):`~?([\w.]+)`")


def _own_members(cls_node):
    """What a class defines: its methods, nested classes, class attributes and ``self.x``."""
    names = set()
    for n in ast.walk(cls_node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            names.add(n.attr)
        elif isinstance(n, (ast.AnnAssign, ast.Assign)):
            names |= {t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    return names


class _Package:
    """The package's modules, classes (with what they and their bases define) and top-level names."""

    def __init__(self):
        self.mods = modules()
        self.trees = {mod: ast.parse(path.read_text()) for mod, path in self.mods.items()}
        self.class_nodes = {}
        for tree in self.trees.values():
            for n in tree.body:
                if isinstance(n, ast.ClassDef):
                    self.class_nodes.setdefault(n.name, []).append(n)
        self.top = top_level_names()

    def members(self, name, depth=0):
        out = set()
        for node in self.class_nodes.get(name, []):
            out |= _own_members(node)
            if depth < 8:
                for b in node.bases:
                    out |= self.members(b.id if isinstance(b, ast.Name) else getattr(b, "attr", ""), depth + 1)
        return out

    def walk(self, obj, rest):
        import inspect

        for i, part in enumerate(rest):
            if hasattr(obj, part) or part in getattr(obj, "__dataclass_fields__", {}):
                obj = getattr(obj, part, None)
                continue
            # an attribute set on ``self`` (not on the class object): a last part only
            return i == len(rest) - 1 and inspect.isclass(obj) and part in self.members(obj.__name__)
        return True

    def importable(self, dotted):
        import importlib

        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            return self.walk(obj, parts[cut:])
        return False

    def resolves(self, mod, target, scopes):
        """Whether a reference ``target`` in module ``mod`` (inside classes defining ``scopes``)
        names something: relative to the package (a leading dot), absolute, in the module's
        namespace, in an enclosing class, or a class's member where the class is named once."""
        import builtins
        import importlib

        pkg = mod if self.mods[mod].name == "__init__.py" else mod.rsplit(".", 1)[0]
        if target.startswith("."):
            lead = len(target) - len(target.lstrip("."))
            base = pkg.split(".")[: len(pkg.split(".")) - (lead - 1)]
            return self.importable(".".join(base + [target.lstrip(".")]))
        if any(self.importable(p + target) for p in ("", pkg + ".", mod + ".")):
            return True
        head, *rest = target.split(".")
        module = importlib.import_module(mod)
        if hasattr(module, head):
            return self.walk(getattr(module, head), rest)
        if not rest:
            return hasattr(builtins, head) or head in self.top or any(head in s for s in scopes)
        if len(rest) == 1 and head in self.class_nodes:
            return rest[0] in self.members(head)
        return False

    def broken(self, mod, tree):
        out = []

        def visit(node, scopes):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                if isinstance(node, ast.ClassDef):
                    scopes = scopes + [self.members(node.name) | _own_members(node)]
                for _, target in ROLE.findall(ast.get_docstring(node, clean=False) or ""):
                    if not self.resolves(mod, target, scopes):
                        out.append(f"{mod}:{getattr(node, 'lineno', 1)} {target}")
            for child in ast.iter_child_nodes(node):
                visit(child, scopes)

        visit(tree, [])
        return out


def test_every_reference_in_a_docstring_names_what_exists():
    """Every ``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:attr:`` and ``:data:`` of every
    module's, class's and function's docstring points at code that exists."""
    package = _Package()
    cited = sum(len(ROLE.findall(ast.get_docstring(n, clean=False) or "")) for t in package.trees.values()
                for n in ast.walk(t) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)))
    assert cited > 300  # the check reads the docstrings' references
    broken = [b for mod, tree in package.trees.items() for b in package.broken(mod, tree)]
    assert not broken, "docstrings cite what is not there: " + "; ".join(broken)


def test_the_docstring_check_finds_stale_references():
    package = _Package()
    tree = ast.parse('"""See :func:`~.sync.combine_shared`, :func:`~.gather.assemble`, :class:`World`,\n'
                     ':meth:`Snapshots.backup`, :meth:`NodeStates.no_such_verb`, :mod:`.nowhere`."""')
    assert package.broken("speed.train.pac.rank", tree) == ["speed.train.pac.rank:1 .gather.assemble",
                                                              "speed.train.pac.rank:1 NodeStates.no_such_verb",
                                                              "speed.train.pac.rank:1 .nowhere"]


def test_help_texts_cite_only_files_that_exist():
    """A file a help text names (training's options, every command's) is in the repository; a
    help text carries no figures' history (no ``benchmarks/results`` file)."""
    from dataclasses import fields

    from speed.cli.parser import build_parser
    from speed.train.config import TrainConfig

    texts = [f.metadata.get("help") or "" for f in fields(TrainConfig)]
    parser = build_parser()
    stack = [parser]
    while stack:
        p = stack.pop()
        texts += [a.help or "" for a in p._actions]
        for a in p._actions:
            stack += list(getattr(a, "choices", None).values()) if isinstance(getattr(a, "choices", None), dict) else []
    assert len(texts) > 100
    repo = ROOT.parent
    for text in texts:
        assert "benchmarks/results" not in text, text
        for cited in re.findall(r"[\w./-]+/[\w.-]+\.(?:py|md|json|csv)\b", text):
            assert (repo / cited).exists(), f"help text cites {cited}, which is not there: {text}"


# --------------------------------------------------- no class calls what only a subclass defines
def class_table():
    """Every class of the package: ``name -> (module, bases' names, names it defines)``; a
    class defines its methods, its class attributes and what its methods assign on ``self``."""
    table = {}
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                table.setdefault(node.name, []).append((mod, node))
    return table


def self_calls(cls: ast.ClassDef):
    """``(line, name)`` of every ``self.name(...)`` call in the class's own methods."""
    out = []
    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(item):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                    out.append((node.lineno, node.func.attr))
    return out


def is_stub(fn) -> bool:
    """A method whose body (past its docstring) only raises NotImplementedError: a hook left for
    a subclass to fill, not a definition."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.dump(body[0])


def own_names(cls: ast.ClassDef):
    names = set()
    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not is_stub(item):
                names.add(item.name)
            for node in ast.walk(item):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                        and isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
        elif isinstance(item, ast.Assign):
            names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    return names


def calls_into_subclasses(table):
    """``"module:line Class.name"`` where a class calls ``self.name()`` that neither it nor any
    class it derives from defines (in the package, or an outside base by its attributes), but a
    class deriving from it does."""
    import importlib

    def bases(node):
        return [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]

    def ancestors(name, seen=None):
        seen = set() if seen is None else seen
        for mod, node in table.get(name, []):
            for b in bases(node):
                if b and b not in seen:
                    seen.add(b)
                    ancestors(b, seen)
        return seen

    found = []
    for name, entries in table.items():
        for mod, node in entries:
            calls = self_calls(node)
            if not calls:
                continue
            defined = own_names(node)
            outside = False
            for a in ancestors(name):
                if a in table:
                    defined |= set().union(*(own_names(n) for _, n in table[a]))
                else:
                    outside = True
            subclasses = [n for other, es in table.items() if name in ancestors(other) for _, n in es]
            below = set().union(*(own_names(n) for n in subclasses)) if subclasses else set()
            for line, called in calls:
                if called in defined or called not in below:
                    continue
                if outside:  # an outside base (nn.Module, ...) may define it
                    try:
                        if hasattr(getattr(importlib.import_module(mod), name), called):
                            continue
                    except Exception:
                        pass
                found.append(f"{mod}:{line} {name}.{called}")
    return found


def test_no_class_calls_a_method_only_its_subclass_defines():
    """Behaviour is composed, not filled in: a class never calls up into a subclass (a template
    whose hooks only a subclass defines)."""
    found = calls_into_subclasses(class_table())
    assert not found, "calls into a subclass: " + "; ".join(found)


def test_the_subclass_check_finds_template_hooks():
    src = ("class Loop:\n    def fit(self):\n        self.train_epoch()\n        self.announce()\n"
           "    def announce(self):\n        pass\n    def train_epoch(self):\n        raise NotImplementedError\n"
           "class Rank(Loop):\n    def train_epoch(self):\n        self.announce()\n")
    table = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ClassDef):
            table.setdefault(node.name, []).append(("m", node))
    assert calls_into_subclasses(table) == ["m:3 Loop.train_epoch"]


# ---------------------------------------------------------------------- one meaning per name
def definitions():
    """``name -> [module, ...]`` of every top-level class and every private top-level function."""
    out = {}
    for mod, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) or (isinstance(node, ast.FunctionDef) and node.name.startswith("_")
                                                  and not node.name.startswith("__")):
                out.setdefault(node.name, []).append(mod)
    return out


def test_no_two_modules_define_a_class_or_private_function_of_one_name():
    """A class name means one class (there were two ``Spill``), and a module's private helper is
    not copied into another (there were two ``_rank_main``, two ``_pack``)."""
    twice = {name: mods for name, mods in definitions().items() if len(mods) > 1}
    assert not twice, f"defined in more than one module: {twice}"


def test_torch_distributed_is_set_up_in_the_world_module_alone():
    users = sorted(mod for mod, path in modules().items()
                   if re.search(r"\b(init_process_group|DistributedDataParallel)\b", path.read_text()))
    assert users == ["speed.train.world"], users
