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
    ("speed.errors", "speed.optional", "speed._util", "speed._signals", "speed._threads"),
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
