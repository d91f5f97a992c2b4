"""A new cloud is one adapter with its registry entry and one simulation facade with its line in
the simulation's list — nothing else.

tests/plugin_cloud/ is such a cloud, packaged as a separate distribution would be (its registry
entry is a `gpuprov.clouds` entry point, its facade a `gpuprov.simulations` one). With that folder
on PYTHONPATH and no other edit, it appears in the API's cloud enum, and the conformance suite runs
every check against it and passes. tests/e2e/test_make_run.py runs `make run` with it installed: it
is served, connected, listed by the CLI and offered.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from api.openapi import objects_in

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "tests" / "plugin_cloud"


def plugin_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")}
    paths = [str(PLUGIN), str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def run_python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=plugin_env(), cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_without_the_plugin_the_cloud_does_not_exist() -> None:
    from fakeclouds import clouds
    from providers import registry

    assert "democloud" not in registry.known()  # so everything below is the plugin's doing
    assert "democloud" not in clouds.simulated()


def test_the_plugin_adds_an_adapter_to_the_registry_and_a_facade_to_the_simulation() -> None:
    out = run_python(
        "from fakeclouds import clouds; from providers import registry;"
        "print(registry.adapter_class('democloud').__name__, clouds.facade('democloud').prefix,"
        " 'democloud' in registry.known(), clouds.simulated()[-1])")
    assert out.split() == ["DemoProvider", "/demo/v1", "True", "democloud"]


def test_the_api_enum_lists_the_new_cloud() -> None:
    schema = json.loads(run_python(
        "import json; from api.app import create_app; from api.deps import AppDeps;"
        "print(json.dumps(create_app(AppDeps(engine=None, box=None, api_token='t', installation_id='i',"
        " workflows=None)).openapi()))"))
    enums = [node["enum"] for node in objects_in(schema) if isinstance(node.get("enum"), list)]
    cloud_enums = [e for e in enums if "lambda" in e]
    assert cloud_enums and all("democloud" in e for e in cloud_enums), cloud_enums


def test_the_conformance_suite_runs_every_check_against_it(processes: None) -> None:
    # A pytest process of its own (the plugin must be on its path from the start), which serves the
    # simulated clouds in it: a process stack, so in the `processes` tier, not the inner loop's.
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/conformance/test_conformance.py", "-k", "democloud"],
                         env=plugin_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    from tests.conformance import checks

    summary = out.stdout.strip().splitlines()[-1]
    assert out.returncode == 0, out.stdout[-3000:]
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", summary)) else 0
    assert passed >= len(checks.ALL_CHECKS) and "skipped" not in summary, summary
