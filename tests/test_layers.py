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
    allowed = re.compile(r"^(__future__|dataclasses|enum|typing|pydantic|messages(\..+)?|providers\.base)$")
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


def test_no_list_of_cloud_ids_outside_the_registry() -> None:
    """Cloud ids appear in non-test code only as an adapter's own `id`, its facade's name, and the registry."""
    ids = registry.known()
    literal = re.compile(r"""["'](%s)["']""" % "|".join(map(re.escape, ids)))
    offenders = []
    for package in ("api", "activities", "workflows", "messages", "store", "cli", "fakeclouds", "providers"):
        for path in modules_in(package):
            if path.name == "registry.py":
                continue
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                stripped = line.strip()
                if stripped.startswith("#") or not literal.search(stripped):
                    continue
                if re.match(r"^(id|name)\s*(:\s*ClassVar\[str\])?\s*=", stripped) or "Facade(" in stripped:
                    continue  # the adapter's own id, the facade's own name
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {stripped}")
    for path in (ROOT / "worker.py", ROOT / "settings.py"):
        offenders += [f"{path.name}: {x}" for x in literal.findall(path.read_text())]
    assert offenders == []


def test_no_simulator_only_field_in_providers() -> None:
    for path in modules_in("providers"):
        text = path.read_text()
        assert "x_sim" not in text and "fakeclouds" not in text.replace("fakeclouds.facade", ""), path
