"""The shape of the code, checked: layers that don't loop, activities addressed by reference,
a sandbox that passes through only pure modules, one list of clouds, and the simulation in its own
wing (its own distribution, which no product module imports)."""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import tomllib
import typing
from pathlib import Path

import pytest

import worker
from activities.deps import ActivityDeps
from messages import activities as acts
from messages import workflows as wf
from providers import registry

ROOT = Path(__file__).resolve().parent.parent


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


NOT_SOURCE = {"__pycache__", "build", "dist", "node_modules"}


@functools.cache
def source_files() -> tuple[Path, ...]:
    """Every Python file of the checkout: hidden folders (the venv), build output and caches are not
    source, and are never walked into (the venv alone holds tens of thousands of files)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not (d.startswith(".") or d in NOT_SOURCE or d.endswith(".egg-info"))]
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return tuple(sorted(found))


def modules_in(package: str) -> list[Path]:
    return [p for p in source_files() if p.is_relative_to(ROOT / package)]


# What activities may import of workflows/: the client-side calls (starting, updating, signalling
# a workflow by reference), which import no workflow definition (checked below).
CLIENT_CALLS = "workflows.client_calls"


@pytest.mark.parametrize("path", modules_in("activities"), ids=lambda p: p.name)
def test_no_activity_module_imports_workflows(path: Path) -> None:
    assert not {m for m in imports_of(path) if (m == "workflows" or m.startswith("workflows."))
                and m != CLIENT_CALLS and not (m == "workflows" and _imports_only_client_calls(path))}


def _imports_only_client_calls(path: Path) -> bool:
    """`from workflows import client_calls` (and nothing else from the package)."""
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "workflows"
             for a in n.names}
    return names == {"client_calls"}


def test_the_client_side_calls_import_no_workflow_definition() -> None:
    imported = imports_of(ROOT / "workflows" / "client_calls.py")
    assert {m for m in imported if not re.match(r"^(__future__|datetime|typing|pydantic|temporalio(\..+)?"
                                                r"|messages\.workflows)$", m)} == set()


# --------------------------------------------------------------------------- workflows by reference


def _workflow_literals(path: Path) -> list[str]:
    """String literals that name a workflow type, or name an update, signal or query where one is
    sent or declared (`.signal("…")`, `.execute_update("…")`, `@workflow.update(name="…")`)."""
    types = {ref.name for ref in wf.ALL}
    handlers = {h.name for ref in wf.ALL for h in wf.handlers(ref)}
    senders = {"signal", "execute_update", "start_update", "query", "update"}
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and node.value in types:
            hits.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in senders):
            args = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "name")]
            hits += [f"{path.relative_to(ROOT)}:{a.lineno}: {a.value}" for a in args
                     if isinstance(a, ast.Constant) and a.value in handlers]
    return hits


def test_no_workflow_type_update_or_signal_name_is_written_outside_its_reference() -> None:
    """messages/workflows.py names each workflow type, update, signal and query once; everything
    else — the product, bench, and tests — goes through the reference."""
    paths = [p for p in product_modules() + modules_in("bench") + modules_in("tests")
             if p != ROOT / "messages" / "workflows.py"]
    assert [hit for p in paths for hit in _workflow_literals(p)] == []


def test_every_registered_workflow_has_a_reference_and_every_reference_a_workflow() -> None:
    from temporalio import workflow

    registered = {workflow._Definition.must_from_class(cls).name: cls for cls in worker.WORKFLOWS}
    assert set(registered) == {ref.name for ref in wf.ALL}
    for ref in wf.ALL:
        defn = workflow._Definition.must_from_class(registered[ref.name])
        declared = set(defn.updates) | set(defn.signals) | set(defn.queries)
        assert declared == {h.name for h in wf.handlers(ref)}, ref.name


@pytest.mark.parametrize("path", modules_in("workflows"), ids=lambda p: p.name)
def test_workflows_import_no_activity_implementation_and_no_io(path: Path) -> None:
    bad = re.compile(r"^(activities|store|api|fakeclouds|httpx|asyncssh|sqlalchemy|sqlmodel|settings)(\.|$)")
    assert not {m for m in imports_of(path) if bad.match(m)}


@pytest.mark.parametrize("path", modules_in("messages"), ids=lambda p: p.name)
def test_messages_import_only_pure_modules(path: Path) -> None:
    # datetime: pure arithmetic on times (messages/policy_eval.py compares the workflow's clock).
    # collections.abc: the abstract types only (Iterable, Sequence). functools, types: a cache of what
    # a model class declares, and the `X | None` union's type (messages/json_numbers.py). operator: the
    # queue order's sort keys (messages/workloads.py).
    allowed = re.compile(r"^(__future__|collections\.abc|dataclasses|datetime|enum|functools|operator|re"
                         r"|types|typing|pydantic|messages(\..+)?|providers\.base)$")
    assert {m for m in imports_of(path) if not allowed.match(m)} == set()


def test_sandbox_passes_through_only_messages_the_contract_models_and_pydantic() -> None:
    for module in worker.PASSTHROUGH_MODULES:
        assert module in ("messages", "pydantic", "pydantic_core") or module in (
            "providers.base", "providers.credentials", "providers.gpus"), module
    for module in ("providers.base", "providers.credentials", "providers.gpus"):
        io = {m for m in imports_of(ROOT / (module.replace(".", "/") + ".py"))
              if re.match(r"^(httpx|asyncssh|sqlalchemy|sqlmodel|store|activities|ssl|socket)", m)}
        assert io == set(), (module, io)


def test_every_activity_reference_has_an_implementation_taking_its_input() -> None:
    implementations = {}
    for fn in worker.activities_for(ActivityDeps.__new__(ActivityDeps)):
        defn = getattr(fn, "__temporal_activity_definition")
        implementations[defn.name] = fn
    assert set(implementations) == {ref.name for ref in acts.ALL}
    for ref in acts.ALL:
        fn = implementations[ref.name]
        hints = typing.get_type_hints(fn)
        params = [p for p in inspect.signature(fn).parameters.values()]
        assert len(params) == 1 and hints[params[0].name] is ref.input, ref.name


def cloud_id_literals(path: Path, ids: set[str]) -> list[str]:
    """String literals naming a cloud, except where a module names its own cloud: an adapter's
    `id = ...`, a facade module's `NAME = ...`, a `display_name=` text. Docstrings don't count."""
    tree = ast.parse(path.read_text())
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            # REGION: a region that shares a cloud's name (docker's one region is `local`) is no list.
            own = ("id", "NAME", "REGION")
            if any(isinstance(t, ast.Name) and t.id in own for t in targets) and node.value:
                allowed.add(id(node.value))
        elif isinstance(node, ast.keyword) and node.arg == "display_name":
            allowed.add(id(node.value))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            allowed.add(id(node.value))  # a docstring or a bare string statement
    return [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in ids and id(n) not in allowed]


def test_no_list_of_cloud_ids_outside_the_registry() -> None:
    """The product's one list (providers/registry.py) and the simulation's (fakeclouds/clouds.py)."""
    ids = set(registry.known())
    lists = {ROOT / "providers" / "registry.py", ROOT / "fakeclouds" / "clouds.py"}
    paths = [p for pkg in ("api", "activities", "workflows", "messages", "store", "cli", "fakeclouds",
                           "providers") for p in modules_in(pkg) if p not in lists]
    paths += [ROOT / "worker.py", ROOT / "settings.py"]
    # Migrations are frozen history: 0011's fleet column `docker` predates the cloud of that name.
    paths = [p for p in paths if "migrations" not in p.parts]
    assert [hit for p in paths for hit in cloud_id_literals(p, ids)] == []


def test_adapters_know_nothing_of_their_simulation() -> None:
    """No simulator-only field, no import of fakeclouds: an adapter runs the real cloud's code path."""
    for entry in registry.entries():
        path = ROOT / (entry.adapter.partition(":")[0].replace(".", "/") + ".py")
        assert "x_sim" not in path.read_text(), path
        assert not {m for m in imports_of(path) if m.startswith("fakeclouds")}, path


# --------------------------------------------------------------------------- the simulation's wing

SIMULATION = "fakeclouds"
# Where the simulation may be imported or named: itself, `gpuprov dev` (it runs the simulation for
# `make run`), the benchmarks and the tests. Everything else is the product.
SIMULATION_SIDE = ("fakeclouds", "bench", "tests", "cli/dev.py")
# A module name, whole or the start of one being built ("fakeclouds.", "fakeclouds.x:FACADE"); not a
# path (fakeclouds/...), another name (gpuprov-fakeclouds) or prose ("(fakeclouds)").
NAMES_A_MODULE = re.compile(rf"(?<![\w/.-]){SIMULATION}(?:\.[A-Za-z_]\w*)*(?=$|[.:])")


def simulation_references(path: Path) -> list[str]:
    """Where `path` imports the simulation, or names one of its modules in a string (what
    importlib.import_module or an entry point would load). A path in a comment or docstring
    (fakeclouds/ratelimit.py) is no reference: the AST drops comments, and a path has a slash."""
    tree = ast.parse(path.read_text())
    hits = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [m.group(0) for m in NAMES_A_MODULE.finditer(node.value.strip())]
        hits += [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:"
                 f"{getattr(node, 'lineno', '?')}: {n}" for n in names
                 if n == SIMULATION or n.startswith(SIMULATION + ".")]
    return hits


def product_modules() -> list[Path]:
    """Every Python file of the checkout outside the simulation's side."""
    found = []
    for path in source_files():
        rel = path.relative_to(ROOT)
        if not any(rel.as_posix() == s or rel.as_posix().startswith(s + "/") for s in SIMULATION_SIDE):
            found.append(path)
    return found


def test_the_reference_finder_finds_what_would_load_the_simulation(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('''"""Reads fakeclouds/ratelimit.py and fakeclouds/README.md (gpuprov-fakeclouds)."""
import importlib
import fakeclouds
import fakeclouds.server as s
from fakeclouds.clouds import facade
from fakeclouds import tls
# fakeclouds.local_api in a comment is no string
MODULE = "fakeclouds.local_api"
TARGET = f"fakeclouds.{s}:FACADE"
LOADED = importlib.import_module("fakeclouds")
PATH = "fakeclouds/ratelimit.py"
PROSE = "the simulated clouds (fakeclouds) are not installed"
''')
    hits = sorted(h.split(": ", 1)[1] for h in simulation_references(source))
    assert hits == ["fakeclouds"] * 4 + ["fakeclouds.clouds", "fakeclouds.local_api", "fakeclouds.server"]


def test_nothing_outside_the_simulation_side_imports_or_names_it() -> None:
    """No module of providers/ api/ activities/ workflows/ store/ messages/, worker.py, settings.py,
    logsafe.py, nor any cli/ module but cli/dev.py, nor any other product file imports fakeclouds or
    names one of its modules: the product runs (and `pip install .` ships) without the simulation."""
    paths = product_modules()
    covered = {p.relative_to(ROOT).parts[0] for p in paths}
    assert {"providers", "api", "activities", "workflows", "store", "messages", "cli", "worker.py",
            "settings.py", "logsafe.py"} <= covered, covered
    assert ROOT / "cli" / "dev.py" not in paths and ROOT / "cli" / "clouds.py" in paths
    assert [hit for p in paths for hit in simulation_references(p)] == []


def test_the_simulation_is_its_own_distribution() -> None:
    """The product's distribution and image carry no simulation; fakeclouds/ is a package of its own
    (`pip install ./fakeclouds`), and what only it needs (moto) is its dependency, not the product's."""
    product = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = product["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [p for p in include if SIMULATION.startswith(p.rstrip("*"))], include
    extras = product["project"].get("optional-dependencies", {}).values()
    requirements = [*product["project"]["dependencies"], *(r for extra in extras for r in extra)]
    assert not [r for r in requirements if r.startswith("moto")], requirements
    copies = [line.split()[1:] for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith(("COPY", "ADD"))]
    assert copies and not [c for c in copies if "." in c[:-1] or any(SIMULATION in s for s in c[:-1])], copies

    own = tomllib.loads((ROOT / SIMULATION / "pyproject.toml").read_text())
    assert own["project"]["name"] == "gpuprov-fakeclouds"
    needs = own["project"]["dependencies"]
    assert "gpuprov" in needs and any(r.startswith("moto") for r in needs), needs
    assert own["tool"]["setuptools"]["packages"] == [SIMULATION]
    assert own["tool"]["setuptools"]["package-dir"] == {SIMULATION: "."}


# --------------------------------------------------------------------------- module size

MAX_LINES = 600  # a module over this is split by what it holds (one that truly is one piece: 900,
ONE_PIECE_MAX = 900  # and its opening docstring says why, with the words "one piece")


def test_no_module_is_over_600_lines_outside_migrations() -> None:
    too_long = {}
    for path in source_files():
        rel = path.relative_to(ROOT)
        if "migrations" in rel.parts:
            continue
        text = path.read_text()
        lines = text.count("\n")
        if lines <= MAX_LINES:
            continue
        one_piece = "one piece" in (ast.get_docstring(ast.parse(text)) or "")
        if lines > (ONE_PIECE_MAX if one_piece else MAX_LINES):
            too_long[rel.as_posix()] = lines
    assert too_long == {}
