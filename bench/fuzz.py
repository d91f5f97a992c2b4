"""`make fuzz` (`python -m bench.fuzz`): schemathesis against a running `make run`, with more
examples than `make test` runs in process (tests/api/test_schemathesis.py).

    --max-examples N   cases per operation (default 300; coverage and stateful cases come on top)
    --seed N           reproduce an earlier run
    ARGS after `--`    passed to `schemathesis run` as they are (e.g. `-- --phases fuzzing`)

The API from GPUPROV_API_URL (default: where `gpuprov dev` listens, GPUPROV_API_PORT); the token as
the CLI finds it (GPUPROV_TOKEN, else $GPUPROV_HOME/api-token), handed to schemathesis in its
environment, never on a command line. Every default check runs but one (bench/schemathesis.toml);
bench/fuzz_hooks.py keeps the connections it creates on the simulated clouds and leaves the ones
there before in place. It creates real (simulated) allocations: fuzz a throwaway GPUPROV_HOME.

Afterwards it lists the activity attempts that failed in the worker meanwhile (its log under
`$GPUPROV_HOME/logs`): an API that answered every case can still have a worker that did not (a
record racing the API's insert, a listing failing on a container removed meanwhile — both found
so). Each is the cloud's answer to fuzzed input, which the allocation's error then names, or a bug.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import typer

from bench.fuzz_hooks import KEEP
from cli.client import token
from cli.dev import DevConfig

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "schemathesis.toml"


def command(url: str, args: argparse.Namespace, extra: list[str]) -> list[str]:
    argv = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(CONFIG), "run",
            f"{url}/openapi.json", "--max-examples", str(args.max_examples)]
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    return argv + extra


def main(argv: list[str]) -> int:
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(ours)
    url = (os.environ.get("GPUPROV_API_URL") or DevConfig.from_env().api_url).rstrip("/")
    try:
        secret = token()
    except typer.Exit as e:  # no token: the CLI's message is printed already
        return e.exit_code
    env = {**os.environ, "GPUPROV_FUZZ_TOKEN": secret, KEEP: ",".join(connection_ids(url, secret)),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    worker_log = DevConfig.from_env().home / "logs" / "worker.log"
    start = worker_log.stat().st_size if worker_log.exists() else 0
    code = subprocess.call(command(url, args, extra), env=env)
    if worker_log.exists():
        with worker_log.open("rb") as log:
            log.seek(start)
            print("\n".join(failed_attempts(log.read().decode(errors="replace"), worker_log)))
    return code


# The SDK's line for an activity attempt that raised (its traceback follows, the message withheld)
FAILED_ATTEMPT = re.compile(r"Completing activity as failed \(\{.*?'activity_type': '(?P<type>[^']+)'.*?"
                            r"'workflow_id': '(?P<workflow>[^']+)'")
# The traceback's last line (logsafe.py): the exception's type, an ApplicationError's kind
RAISED = re.compile(r"^(?P<error>[\w.]+)(?: \[(?P<kind>\w+)\])? \(message withheld", re.MULTILINE)


def failed_attempts(log: str, path: Path) -> list[str]:
    """What `log` (the worker's, during the fuzz) says failed: lines for the report."""
    found: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)  # activity -> (workflow, error)
    for m in FAILED_ATTEMPT.finditer(log):
        raised = RAISED.search(log, m.end())
        found[m["type"]].append((m["workflow"], (raised["kind"] or raised["error"]) if raised else "?"))
    if not found:
        return ["worker: no activity attempt failed during the fuzz"]
    lines = [f"worker: {sum(map(len, found.values()))} activity attempt(s) failed during the fuzz "
             f"(tracebacks in {path}):"]
    for activity, attempts in sorted(found.items(), key=lambda item: -len(item[1])):
        shown = sorted({workflow for workflow, _ in attempts})
        more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
        errors = collections.Counter(error for _, error in attempts).most_common()
        raised_as = ", ".join(f"{error} {n}" for error, n in errors)
        lines.append(f"  {activity}: {len(attempts)} [{raised_as}] ({', '.join(shown[:3])}{more})")
    return lines


def connection_ids(url: str, secret: str) -> list[str]:
    """The connections there before the fuzz (one page of the maximum size is plenty here)."""
    r = httpx.get(f"{url}/api/compute/connections", params={"limit": 200}, timeout=30,
                  headers={"Authorization": f"Bearer {secret}"})
    r.raise_for_status()
    return [c["id"] for c in r.json()["items"]]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
