"""The shape of the code, checked: layers that don't loop, activities addressed by reference,
a sandbox that passes through only pure modules, one list of clouds."""

from __future__ import annotations

import ast
import inspect
import re
import typing
from pathlib import Path

import pytest

import worker
from activities.deps import ActivityDeps
from messages import activities as acts
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


def modules_in(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules_in("activities"), ids=lambda p: p.name)
def test_no_activity_module_imports_workflows(path: Path) -> None:
    assert not {m for m in imports_of(path) if m == "workflows" or m.startswith("workflows.")}


@pytest.mark.parametrize("path", modules_in("workflows"), ids=lambda p: p.name)
def test_workflows_import_no_activity_implementation_and_no_io(path: Path) -> None:
    bad = re.compile(r"^(activities|store|api|fakeclouds|httpx|asyncssh|sqlalchemy|sqlmodel|settings)(\.|$)")
    assert not {m for m in imports_of(path) if bad.match(m)}


@pytest.mark.parametrize("path", modules_in("messages"), ids=lambda p: p.name)
def test_messages_import_only_pure_modules(path: Path) -> None:
    # datetime: pure arithmetic on times (messages/policy_eval.py compares the workflow's clock).
    # collections.abc: the abstract types only (Iterable, Sequence).
    allowed = re.compile(r"^(__future__|collections\.abc|dataclasses|datetime|enum|re|typing|pydantic"
                         r"|messages(\..+)?|providers\.base)$")
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
            if any(isinstance(t, ast.Name) and t.id in ("id", "NAME") for t in targets) and node.value:
                allowed.add(id(node.value))
        elif isinstance(node, ast.keyword) and node.arg == "display_name":
            allowed.add(id(node.value))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            allowed.add(id(node.value))  # a docstring or a bare string statement
    return [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in ids and id(n) not in allowed]


def test_no_list_of_cloud_ids_outside_the_registry() -> None:
    ids = set(registry.known())
    paths = [p for pkg in ("api", "activities", "workflows", "messages", "store", "cli", "fakeclouds",
                           "providers") for p in modules_in(pkg) if p.name != "registry.py"]
    paths += [ROOT / "worker.py", ROOT / "settings.py"]
    assert [hit for p in paths for hit in cloud_id_literals(p, ids)] == []


def test_adapters_know_nothing_of_their_simulation() -> None:
    """No simulator-only field, no import of fakeclouds: an adapter runs the real cloud's code path."""
    for entry in registry.entries():
        path = ROOT / (entry.adapter.partition(":")[0].replace(".", "/") + ".py")
        assert "x_sim" not in path.read_text(), path
        assert not {m for m in imports_of(path) if m.startswith("fakeclouds")}, path
