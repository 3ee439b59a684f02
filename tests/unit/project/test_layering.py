"""The import graph that runs is the one you read: arrows point down, no cycles, no hidden imports.

Read from the source with `ast` (nothing is imported): every `import marin_lab...` at module level
is an arrow between packages, and must go from a higher layer to a lower one (or stay inside a
package); module-level imports form no cycle; a marin_lab import inside a function (which hides a
real dependency from a reader, and usually a cycle) fails unless it is listed below with its reason.
The lists are a ratchet: they only shrink. Optional third-party dependencies may be imported
inside functions; that is not checked here.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

PACKAGE = pathlib.Path(__file__).resolve().parents[3] / "marin_lab"

# Lower numbers sit lower. A package may import its own modules and any package of a lower layer.
LAYERS: dict[str, int] = {
    "errors": 0,
    "versioning": 0,
    "flags": 0,
    "host_env": 0,
    "jax_platform": 0,  # run by `import marin_lab`: standard library only
    "ray_niceness": 0,
    "humanize": 0,
    "io": 1,
    "store": 2,
    "environments": 2,  # per-step locked environments: the executor runs steps in them
    "execution": 3,
    "reproduce": 4,
    "gc": 4,
    "explain": 4,  # tools over the executor's records
    "models": 5,  # the decoder: arrays in, arrays out
    "quant": 6,
    "processing": 6,
    "peft": 7,
    "precision": 7,
    "training": 8,
    "evaluation": 9,
    "cluster": 9,
    "main": 10,  # step functions over training and evaluation (Levanter's levanter.main)
    "marin": 10,  # Marin's spellings over the core (never imported by it)
    "resources": 10,  # Marin's `marin.resources` path: re-exports marin/resources.py
    "browser": 11,
    "cli": 12,
    "testing": 13,  # doubles for tests and drills: nothing in the product imports them
}

# Upward arrows that exist today; the list only shrinks (it is empty: keep it so).
KNOWN_UPWARD: set[tuple[str, str]] = set()

# Function-local marin_lab imports that stay, each with its reason: (file, imported module). The
# list only shrinks.
KNOWN_LOCAL: set[tuple[str, str]] = {
    ("browser/__init__.py", "marin_lab.browser.server"),  # aiohttp, only when a server starts
    ("cli.py", "marin_lab.cluster.cli"),  # JAX and the TPU tools: ~4 s of imports
    # Ray (~0.8 s of imports), only when a step runs on slices: not when `marin-lab` or an executor
    # that runs no TPU step starts (tests/unit/tools/test_cli_help.py checks it).
    ("cluster/resources.py", "marin_lab.cluster.slice_runner"),
    ("cluster/alternatives.py", "marin_lab.cluster.slice_reserve"),
    # `marin-lab generate`'s model side (JAX, tokenizers), imported when it runs: ~1.3 s off
    # every other command's start (tests/unit/tools/test_cli_help.py checks it).
    ("evaluation/generate_cli.py", "marin_lab.evaluation.loading"),
    ("evaluation/generate_cli.py", "marin_lab.models.generate"),
    ("evaluation/generate_cli.py", "marin_lab.processing.instruction"),
    ("evaluation/generate_cli.py", "marin_lab.processing.tokenizers"),
    ("execution/record/code_provenance.py", "marin_lab"),  # the package's own version, read when recorded
    ("quant/nf4.py", "marin_lab.quant.matmul"),  # a real cycle: matmul takes NF4Tensor
}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "marin_lab"


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports():
    """(module, imported marin_lab module, inside a function?, file, line) for every import."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"

        def visit(
            node: ast.AST,
            in_function: bool,
            module: str = module,
            is_package: bool = is_package,
            path: pathlib.Path = path,
        ) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import):
                    targets = [alias.name for alias in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = _resolve(child, module, is_package)
                    # `from marin_lab.x import y` may name a submodule y: count the deeper one.
                    targets = [
                        f"{base}.{a.name}"
                        if (PACKAGE.parent / f"{base}.{a.name}".replace(".", "/")).exists()
                        or (PACKAGE.parent / (f"{base}.{a.name}".replace(".", "/") + ".py")).exists()
                        else base
                        for a in child.names
                    ]
                else:
                    targets = []
                for target in targets:
                    if target == "marin_lab" or target.startswith("marin_lab."):
                        found.append((module, target, in_function, path.relative_to(PACKAGE).as_posix(), child.lineno))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

        visit(tree, False)
    return found


IMPORTS = _imports()


def test_every_package_has_a_layer():
    packages = {_package(m) for m, *_ in IMPORTS} | {_package(t) for _, t, *_ in IMPORTS}
    packages.discard("marin_lab")
    missing = sorted(p for p in packages if p not in LAYERS)
    assert not missing, f"packages without a layer in tests/unit/project/test_layering.py: {missing}; give each one"


def test_arrows_point_down():
    upward = set()
    where: dict[tuple[str, str], str] = {}
    for module, target, in_function, file, line in IMPORTS:
        a, b = _package(module), _package(target)
        if in_function or a == b or "marin_lab" in (a, b):
            continue
        if LAYERS[b] > LAYERS[a]:
            upward.add((a, b))
            where.setdefault((a, b), f"{file}:{line}")
    new = sorted(upward - KNOWN_UPWARD)
    assert not new, "upward imports (a lower package importing a higher one): " + ", ".join(
        f"{a} -> {b} ({where[(a, b)]})" for a, b in new
    )
    gone = sorted(KNOWN_UPWARD - upward)
    assert not gone, f"KNOWN_UPWARD lists arrows that no longer exist, remove them: {gone}"


# Inside execution/, wings with their own order (lower sits lower): a wing imports its own modules
# and the wings below it. review/ reads and never runs (it sits below run/); the executor and
# executor_main (the top-level modules) schedule over all of them.
EXECUTION_WINGS: dict[str, int] = {
    "errors": 0,
    "plan": 1,  # steps, identity hashing, sources, the planner, resources
    "state": 2,  # the status writer and the lease
    "record": 3,  # step and experiment records, provenance, artifacts, usage
    "review": 4,  # decide, baseline, cost, prices, capacity, regions, the plan report
    "run": 5,  # the supervisor, backends, logs, watch, interrupts, the platform guard, run history
    "config": 6,
    "executor": 7,
    "main": 8,
}


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "execution" else None


def test_every_execution_module_sits_in_a_wing():
    loose = sorted({m for m, *_ in IMPORTS if _wing(m) is not None and _wing(m) not in EXECUTION_WINGS})
    assert not loose, f"execution/ modules outside the wings of tests/unit/project/test_layering.py: {loose}"


def test_execution_wings_import_only_downwards():
    upward = sorted(
        f"{file}:{line} ({_wing(module)} -> {_wing(target)})"
        for module, target, in_function, file, line in IMPORTS
        if not in_function
        and _wing(module) in EXECUTION_WINGS
        and _wing(target) in EXECUTION_WINGS
        and EXECUTION_WINGS[_wing(target)] > EXECUTION_WINGS[_wing(module)]  # type: ignore[index]
    )
    assert not upward, "a wing of execution/ imports a higher one: " + ", ".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []


def test_module_level_imports_form_no_cycle():
    modules = {m for m, *_ in IMPORTS}
    graph: dict[str, set[str]] = defaultdict(set)
    for module, target, in_function, *_ in IMPORTS:
        # A package's __init__ importing its own submodules is how a package exports its names.
        if not in_function and target in modules and target != module and not target.startswith(module + "."):
            graph[module].add(target)
    cycles = _cycles(graph)
    assert not cycles, f"module-level import cycles: {cycles}"


def test_no_hidden_imports_of_marin_lab_inside_functions():
    local = {(file, target): line for module, target, in_function, file, line in IMPORTS if in_function}
    new = sorted(set(local) - KNOWN_LOCAL)
    assert not new, (
        "marin_lab imported inside a function (import it at the top of the module, or break the "
        "cycle that made it local): " + ", ".join(f"{f}:{local[(f, t)]} {t}" for f, t in new)
    )
    gone = sorted(KNOWN_LOCAL - set(local))
    assert not gone, f"KNOWN_LOCAL lists imports that are gone, remove them: {gone}"


# The store owns the names of the files under a prefix and inside a step's output
# (marin_lab/store/layout.py): everything else imports them. A string that is one of these names,
# or an attempt log's name, fails outside store/ (docstrings and comments may still mention them).
STORE_NAMES = {
    ".executor_status",
    ".executor_info",
    ".executor_lease",
    ".artifact.json",
    "metrics.jsonl",
    "results.json",
    "launch.json",
    "launches",
    "experiments/",
    ".bad_shards.json",
    "task_items.json",
    "contamination.json",
}
# Files that may spell a name, each with its reason. The list only shrinks.
KNOWN_SPELLED: set[tuple[str, str]] = set()


def _spelled_names() -> set[tuple[str, str, int]]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("store/"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
                continue
            text = node.value
            if text in STORE_NAMES or text.startswith("attempt-") or "/attempt-" in text:
                found.add((rel, text, node.lineno))
    return found


def test_the_store_s_file_names_are_spelled_only_in_the_store():
    spelled = _spelled_names()
    new = sorted(f"{rel}:{line} {text!r}" for rel, text, line in spelled if (rel, text) not in KNOWN_SPELLED)
    assert not new, (
        "file names the store owns, spelled outside marin_lab/store/ (import the name from "
        "marin_lab.store.layout): " + ", ".join(new)
    )
    gone = sorted(KNOWN_SPELLED - {(rel, text) for rel, text, _ in spelled})
    assert not gone, f"KNOWN_SPELLED lists names no longer spelled there, remove them: {gone}"


def test_the_name_check_finds_a_name():
    tree_text = 'x = "metrics.jsonl"\ny = f"attempt-{n}.log"\n'
    constants = [n.value for n in ast.walk(ast.parse(tree_text)) if isinstance(n, ast.Constant)]
    assert "metrics.jsonl" in STORE_NAMES & set(constants) and any(c.startswith("attempt-") for c in constants)


# Each format's one parser lives in store/: a module elsewhere that reads all the keys that identify
# a format (string constants as subscripts or `.get` arguments) parses it a second time. The keys
# per format, and the files that may read them with their reasons (the list only shrinks):
FORMAT_KEYS: dict[str, tuple[str, ...]] = {
    "run record (store/run_record.py)": ("run", "counts"),
    ".artifact.json (store/artifact_record.py)": ("fingerprint", "result_type"),
    "results.json (store/eval_results.py)": ("marin_lab", "format"),
    ".executor_info (store/step_record.py)": ("status_history", "attempts"),
}
KNOWN_FORMAT_READERS: set[tuple[str, str]] = set()


def _keys_read(tree: ast.AST) -> set[str]:
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            arg = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            arg = node.args[0] if node.args else None
        else:
            continue
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            keys.add(arg.value)
    return keys


def _format_readers(package: pathlib.Path = PACKAGE) -> set[tuple[str, str]]:
    found = set()
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("store/"):
            continue
        keys = _keys_read(ast.parse(path.read_text(), str(path)))
        found |= {(rel, fmt) for fmt, need in FORMAT_KEYS.items() if set(need) <= keys}
    return found


def test_each_format_is_parsed_only_in_the_store():
    readers = _format_readers()
    new = sorted(f"{rel} reads the keys of {fmt}" for rel, fmt in readers - KNOWN_FORMAT_READERS)
    assert not new, "a second parser of a store format (call the store's parser instead): " + ", ".join(new)
    gone = sorted(KNOWN_FORMAT_READERS - readers)
    assert not gone, f"KNOWN_FORMAT_READERS lists files that no longer read a format, remove them: {gone}"


def test_the_format_check_finds_a_second_parser(tmp_path):
    (tmp_path / "reader.py").write_text('def n(r):\n    return r["counts"] if r.get("run") else None\n')
    (tmp_path / "writer.py").write_text('doc = {"run": 1, "counts": {}}\n')
    assert _format_readers(tmp_path) == {("reader.py", "run record (store/run_record.py)")}
