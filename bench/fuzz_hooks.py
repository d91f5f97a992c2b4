"""schemathesis hooks for `make fuzz` (bench/fuzz.py loads them), applied to every request sent.

- Fuzzed connections stay on this machine. A created connection makes the worker call its endpoint;
  a made-up endpoint — or none, which means the cloud's real API — would send the fuzzer's requests
  off this machine. So every POST /connections body is pointed at the simulation server `make run`
  started (a closed loopback port for a cloud it does not simulate).
- Allocations get past validation: random text is never an OpenSSH key, so a list of strings in
  `ssh_public_keys` becomes that many copies of one valid key. Other shapes stay as generated.
- Fleets get past validation and stay on this machine: a saved fleet's hosts are logged in to
  (FleetProbeWorkflow), so every host (and a bastion's) becomes a loopback address on the discard
  port, where a login is refused at once — a made-up name would be looked up in DNS and connected
  to. A private key given as text becomes a valid one (random text never is).
- Jobs run only commands of ours: a job's command runs under bash on its machine, and a simulated
  machine is a process of this host. Each fuzzed command becomes one of `JOB_COMMANDS` (picked by
  the generated text, so a job succeeds, fails with an exit code, writes a log, or runs long enough
  to be cancelled), and the image goes: `docker run` of a made-up image would pull it from a
  registry off this machine. Every other job is also made one the API accepts (`safe_job`), so
  jobs reach the queue and a machine.
- Policies get past the checks JSON Schema cannot say, half of them (picked by the generated text,
  the rest kept for the refusals): a cron expression that parses, one of `to`/`by` for a pool's
  scaling. A webhook's URL always goes to loopback's discard port, where the call fails at once
  (`WEBHOOK`; start `make run` with GPUPROV_WEBHOOK_ALLOWLIST set to it, or they are refused);
  its generated query stays, for the API's check of it. A saved policy runs on its Schedule.
- A fleet's trust names, half the time, hosts `safe_fleet` gives fleets. A pool keeps at most
  `POOL_SIZE_MAX` machines, and half the pools get past the checks JSON Schema cannot say (min <=
  size <= max, keys that parse).
- The connections that were there before (`make run`'s, named by bench/fuzz.py in
  GPUPROV_FUZZ_KEEP_CONNECTIONS) stay: the stateful phase finds their ids in GET /connections, and
  deleting them would leave every later allocation a 409. A DELETE of one is sent for an unknown id.
"""

from __future__ import annotations

import os
import re
import zlib
from functools import cache
from typing import Any, TypeGuard

import asyncssh
import schemathesis

from cli.dev import DevConfig
from fakeclouds import clouds

DISCARD = 9  # the discard port: nothing listens, a connect (an HTTP request, an SSH login) fails at once
CLOSED = f"http://127.0.0.1:{DISCARD}"
KEEP = "GPUPROV_FUZZ_KEEP_CONNECTIONS"


def safe_endpoint(provider: object) -> str:
    """The simulation of `provider` that `make run` serves, else a port where nothing answers."""
    if not isinstance(provider, str):
        return CLOSED
    try:
        facade = clouds.facade(provider)
    except (LookupError, ImportError):  # no simulation of that cloud
        return CLOSED
    return DevConfig.from_env().cloud_url + facade.prefix


@cache
def private_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


def ssh_key() -> str:
    return str(private_key().export_public_key().decode().strip())


def valid_keys(keys: object) -> object:
    """A list of strings as that many copies of one valid OpenSSH key (random text never is one)."""
    if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
        return [ssh_key()] * len(keys)
    return keys


def fleet_hosts(count: int) -> list[str]:
    """The hosts a fuzzed fleet of `count` gets: loopback addresses, distinct up to 250."""
    return [f"127.0.0.{2 + i % 250}" for i in range(count)]


def kept_as_generated(body: dict[str, Any]) -> bool:
    """Whether this body is one of the half kept as generated, for the API's refusals (picked by its
    text, so the same body is picked the same way)."""
    return bool(zlib.crc32(repr(body).encode()) % 2)


def json_number(value: object) -> TypeGuard[int | float]:
    """An int or float of JSON's (`true` is not a number)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def safe_fleet(body: dict[str, Any]) -> None:
    """`body` (a fleet's, POST or PUT) with its hosts on loopback's discard port and a valid key."""
    if isinstance(body.get("hosts"), list):
        body["hosts"] = fleet_hosts(len(body["hosts"]))
    body["port"] = DISCARD
    if isinstance(body.get("private_key"), str) and body["private_key"].strip():
        body["private_key"] = private_key().export_private_key().decode()
    bastion = body.get("bastion")
    if isinstance(bastion, dict):
        bastion["host"], bastion["port"] = "127.0.0.1", DISCARD
        if isinstance(bastion.get("private_key"), str) and bastion["private_key"].strip():
            bastion["private_key"] = private_key().export_private_key().decode()


def safe_trust(body: dict[str, Any]) -> None:
    """`body` (a fleet's trust, POST), half of them (picked by the generated text), with hosts that
    `safe_fleet` gives a fleet: the trust's logic is reached, the rest refused as not in the fleet."""
    hosts = body.get("hosts")
    if isinstance(hosts, list) and not kept_as_generated(body):
        body["hosts"] = fleet_hosts(len(hosts))


POOL_SIZE_MAX = 3  # a pool the fuzz makes keeps at most this many machines on `make run`'s clouds


def safe_pool(body: dict[str, Any]) -> None:
    """`body` (a pool's, PUT) with at most `POOL_SIZE_MAX` machines — a generated size of hundreds
    would make `make run` boot as many — and, for half of them (picked by the generated text), what
    JSON Schema cannot say: min <= size <= max, and keys that parse."""
    sizes = [k for k in ("min", "size", "max") if json_number(body.get(k))]  # 500.0 is JSON's 500 too
    body.update({k: min(body[k], POOL_SIZE_MAX) for k in sizes})
    if kept_as_generated(body):
        return
    if len(sizes) == 3:
        body["min"], body["size"], body["max"] = sorted(body[k] for k in sizes)
    if "ssh_public_keys" in body:
        body["ssh_public_keys"] = valid_keys(body["ssh_public_keys"])


# What a fuzzed job runs instead of its command: each ends by itself, touches nothing outside the
# job's own directory, and none reaches the network.
JOB_COMMANDS = ("true", "echo fuzzed; exit 3", "for i in 1 2 3; do echo \"line $i\"; done", "sleep 20")


PRIORITY_MAX = 100  # the administrator's default range (GPUPROV_JOB_PRIORITY_MAX), which make run keeps
# Over every simulated offer. Always given: once the fuzz has set a $/hr limit, a job must name a price
# (under a limit below it, the job is refused as over that limit on its own: a refusal worth sending).
MAX_PRICE = 50.0


def safe_job(body: dict[str, Any]) -> None:
    """`body` (a job's, POST) with a command of ours and no image. Every other case is also made one
    the API accepts — no GPU no cloud sells or pool the project lacks, a price over every offer, a
    priority in the administrator's range, printable names — so it reaches the queue and a machine;
    the rest keep those fields as generated, for the API's refusals."""
    if not isinstance(body.get("command"), str):
        return
    pick = zlib.crc32(body["command"].encode())  # spread: the fuzz's many "0"s are not all one command
    body["command"] = JOB_COMMANDS[pick % len(JOB_COMMANDS)]
    body.pop("image", None)
    if pick // len(JOB_COMMANDS) % 2:
        return
    for made_up in ("gpu", "gpu_count", "pool"):
        body.pop(made_up, None)
    body["max_price_per_hour"] = MAX_PRICE
    priority = body.get("priority")
    if json_number(priority) and float(priority).is_integer():
        body["priority"] = max(-PRIORITY_MAX, min(PRIORITY_MAX, int(priority)))  # 58.0 is JSON's 58
    for name in ("name", "requested_by"):
        if not (isinstance(body.get(name), str) and body[name].isprintable() and body[name].strip()):
            body[name] = f"fuzz-{name}"


WEBHOOK = f"http://127.0.0.1:{DISCARD}/fuzz-hook"
CRONS = ("*/5 * * * *", "@hourly", "0 9-17 * * mon-fri", "30 2 1,15 * *")


def safe_policy(body: dict[str, Any]) -> None:
    """`body` (a policy's, POST or PUT) with its webhook on loopback and, for half the cards, a cron
    expression that parses and exactly one of a pool scaling's `to` and `by`."""
    when, then = body.get("when"), body.get("then")
    if isinstance(then, dict) and then.get("kind") == "webhook" and isinstance(then.get("url"), str):
        query = then["url"].partition("?")[2]
        then["url"] = WEBHOOK + (f"?{query}" if query else "")
    if kept_as_generated(body):
        return
    if isinstance(when, dict) and when.get("kind") == "cron":
        when["expression"] = CRONS[zlib.crc32(repr(body).encode()) // 2 % len(CRONS)]
    if isinstance(then, dict) and then.get("kind") == "scale_pool":
        if then.get("to") is not None:
            then.pop("by", None)
        elif not then.get("by"):
            then["by"] = 1


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    body, method, path = case.body, case.operation.method.upper(), case.operation.path
    params = case.path_parameters or {}
    if method == "DELETE" and params.get("connection_id") in os.environ.get(KEEP, "").split(","):
        params["connection_id"] = "kept-by-fuzz"
    if not isinstance(body, dict):
        return
    if method in ("POST", "PUT") and re.fullmatch(r".*/fleets(?:/\{fleet_id\})?", path):
        safe_fleet(body)
    if method in ("POST", "PUT") and re.fullmatch(r".*/policies(?:/\{policy_id\})?", path):
        safe_policy(body)
    if method == "PUT" and path.endswith("/pools/{name}"):
        safe_pool(body)
    if method == "POST" and path.endswith("/fleets/{fleet_id}/trust"):
        safe_trust(body)
    if method != "POST":
        return
    if path.endswith("/jobs"):
        safe_job(body)
    if path.endswith("/connections"):
        body["endpoint"] = safe_endpoint(body.get("provider"))
    if path.endswith("/instances") and "ssh_public_keys" in body:
        body["ssh_public_keys"] = valid_keys(body["ssh_public_keys"])
