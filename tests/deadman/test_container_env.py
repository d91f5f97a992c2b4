"""`container_env`: the shell word a machine's lease timer reads a cloud-given credential with
(RunPod, Vast.ai): the login's variable when set, else the container's first process's — a value
with spaces and quotes intact, and nothing run from it."""

from __future__ import annotations

import os
import subprocess

from providers.base import container_env


def _sh(script: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_TEST_CRED")}
    return subprocess.run(["sh", "-c", script], env={**clean, **env}, capture_output=True, text=True,
                          check=True, timeout=10).stdout


def test_the_logins_variable_wins_and_is_one_word() -> None:
    odd = "a b'c\"$(echo no)`x`"
    out = _sh(f"printf '%s|' {container_env('GPUPROV_TEST_CRED')}", GPUPROV_TEST_CRED=odd)
    assert out == f"{odd}|"


def test_without_it_the_first_process_is_asked_and_nothing_else_runs() -> None:
    # PID 1 here (the test host's init) has no such variable: the word is empty, one argument.
    out = _sh(f"printf '[%s]' {container_env('GPUPROV_TEST_CRED_ABSENT')}")
    assert out == "[]"
