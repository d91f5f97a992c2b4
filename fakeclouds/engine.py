"""The one engine behind every simulated cloud: catalogue, stock, machines, billing, faults.

Facades translate HTTP into these calls. Everything runs on one asyncio loop (the
server's); lifecycle steps (boot, terminate, die) are tasks on that loop. With a
`state_dir`, every change is written to `state.json` and `start()` brings machines back,
same SSH ports and host keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from fakeclouds import catalog, cloudinit, k3s, nvidia_smi
from fakeclouds.errors import Invalid, NameConflict, NoCapacity, NotFound, QuotaExceeded
from fakeclouds.faults import FaultBook
from fakeclouds.ssh import MachineSSH, load_or_create_host_key, parse_public_key

log = logging.getLogger(__name__)

LOCAL_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
LAMBDA_NAME_MAX = 64
PENDING, RUNNING, TERMINATING, TERMINATED, ERROR = "pending", "running", "terminating", "terminated", "error"


@dataclass
class Machine:
    id: str
    facade: str
    name: str | None
    instance_type: str
    region: str
    spot: bool
    ssh_user: str
    public_keys: list[str]
    price_per_hour: float
    created_at: float
    boot_at: float  # when boot completes (created_at + boot delay at create time)
    status: str = PENDING
    labels: dict[str, str] = field(default_factory=dict)
    user_data: str | None = None
    ports: list[int] = field(default_factory=list)
    ssh_port: int | None = None
    ended_at: float | None = None  # billing stops here (gone)
    stuck: bool = False  # injected: never leaves pending
    die_after_boot: float | None = None  # injected: dies this many seconds after boot
    detail: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # facade-specific (e.g. ssh_key_names)

    @property
    def host(self) -> str | None:
        return "127.0.0.1" if self.status == RUNNING else None

    def billing_seconds(self, now: float | None = None) -> float:
        end = self.ended_at if self.ended_at is not None else (now or time.time())
        return max(0.0, end - self.created_at)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Engine:
    def __init__(self, *, boot_delay: float = 1.0, terminate_delay: float = 0.2,
                 state_dir: str | Path | None = None) -> None:
        self.boot_delay = boot_delay
        self.terminate_delay = terminate_delay
        self.faults = FaultBook()
        self.machines: dict[str, Machine] = {}
        self.stock: dict[tuple[str, str], int] = catalog.default_stock()
        self.quota: dict[str, int | None] = {f: None for f in catalog.FACADES}  # max live machines
        self.ssh_keys: dict[str, dict[str, dict[str, str]]] = {f: {} for f in catalog.FACADES}
        self._persist = state_dir is not None
        self.root = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="fakeclouds-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._ssh: dict[str, MachineSSH] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ lifecycle of the engine

    async def start(self) -> None:
        """Load persisted state and bring machines back where they were."""
        path = self.root / "state.json"
        if not (self._persist and path.exists()):
            return
        state = json.loads(path.read_text())
        self.stock = {(t, r): n for t, r, n in state["stock"]}
        self.quota.update(state.get("quota", {}))
        self.ssh_keys.update(state.get("ssh_keys", {}))
        for raw in state["machines"]:
            m = Machine(**raw)
            self.machines[m.id] = m
            if m.status == RUNNING:
                try:
                    await self._start_ssh(m, port=m.ssh_port or 0)
                except OSError as exc:
                    m.status, m.detail = ERROR, f"SSH port {m.ssh_port} unavailable on restore: {exc}"
            elif m.status == PENDING:
                self._spawn(m, self._boot(m))
            elif m.status == TERMINATING:
                self._spawn(m, self._finish_terminate(m))
        self.save()

    async def stop(self) -> None:
        """Stop tasks and SSH servers; persisted machines come back on the next start()."""
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()
        for server in list(self._ssh.values()):
            await server.stop()
        self._ssh.clear()
        self.save()
        if not self._persist:
            shutil.rmtree(self.root, ignore_errors=True)

    def save(self) -> None:
        if not self._persist:
            return
        state = {
            "machines": [m.to_dict() for m in self.machines.values()],
            "stock": [[t, r, n] for (t, r), n in self.stock.items()],
            "quota": self.quota,
            "ssh_keys": self.ssh_keys,
        }
        tmp = self.root / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.root / "state.json")

    # ------------------------------------------------------------------ catalogue

    def offers(self, facade: str) -> list[dict[str, Any]]:
        """One row per (type, region, spot) this facade sells, with live availability."""
        rows = []
        for itype in catalog.types_for(facade).values():
            for region, price in itype.prices.items():
                stock = self.stock.get((itype.name, region), 0)
                markets = [False] + ([True] if itype.spot_factor else [])
                for spot in markets:
                    rows.append({
                        "type": itype, "region": region, "spot": spot, "stock": stock,
                        "price_per_hour": round(price * (itype.spot_factor or 1.0 if spot else 1.0), 4),
                    })
        return rows

    # ------------------------------------------------------------------ machines

    def create(self, facade: str, *, instance_type: str, region: str, public_keys: list[str],
               name: str | None = None, spot: bool = False, labels: dict[str, str] | None = None,
               user_data: str | None = None, ports: list[int] | None = None, stuck: bool = False,
               die_after_boot: float | None = None, quantity: int = 1,
               extra: dict[str, Any] | None = None) -> list[Machine]:
        """Validate, take stock, and start booting `quantity` machines. Synchronous, hence atomic."""
        itype = catalog.types_for(facade).get(instance_type)
        if itype is None:
            raise Invalid(f"unknown instance type {instance_type!r}")
        if region not in catalog.regions_for(facade):
            raise Invalid(f"unknown region {region!r}")
        if region not in itype.prices:
            raise Invalid(f"instance type {instance_type!r} is not offered in {region!r}")
        if spot and not itype.spot_factor:
            raise Invalid(f"instance type {instance_type!r} has no spot market")
        if quantity < 1:
            raise Invalid("quantity must be >= 1")
        if not public_keys:
            raise Invalid("at least one SSH public key is required")
        try:
            init = cloudinit.parse(user_data)
        except cloudinit.UserDataError as exc:
            raise Invalid(str(exc)) from exc
        public_keys = [*public_keys, *init.authorized_keys]  # cloud-init adds these at boot
        for key in public_keys:
            try:
                parse_public_key(key)
            except ValueError as exc:
                raise Invalid(str(exc)) from exc
        self._check_name(facade, name)
        for port in ports or []:
            if not 1 <= port <= 65535:
                raise Invalid(f"port {port} out of range")
        live = [m for m in self.machines.values() if m.facade == facade and m.status != TERMINATED]
        limit = self.quota.get(facade)
        if limit is not None and len(live) + quantity > limit:
            raise QuotaExceeded(f"quota of {limit} machines reached")
        if self.stock.get((instance_type, region), 0) < quantity:
            raise NoCapacity(f"no capacity for {instance_type} in {region}", region)
        self.stock[(instance_type, region)] -= quantity
        now = time.time()
        price = next(o["price_per_hour"] for o in self.offers(facade)
                     if o["type"].name == instance_type and o["region"] == region and o["spot"] == spot)
        made = []
        for _ in range(quantity):
            mid = uuid.uuid4().hex if facade == "lambda" else f"m-{uuid.uuid4().hex[:12]}"
            m = Machine(
                id=mid, facade=facade, name=name, instance_type=instance_type, region=region, spot=spot,
                ssh_user=catalog.LOGIN_USER[facade], public_keys=[k.strip() for k in public_keys],
                price_per_hour=price,
                created_at=now, boot_at=now + self.boot_delay, labels=dict(labels or {}),
                user_data=user_data, ports=list(ports or []), stuck=stuck, die_after_boot=die_after_boot,
                extra=dict(extra or {}),
            )
            self.machines[mid] = m
            self._prepare_home(m, itype)
            self._spawn(m, self._boot(m))
            made.append(m)
        self.save()
        return made

    def _check_name(self, facade: str, name: str | None) -> None:
        if facade == "lambda":  # Lambda: optional, <= 64 chars, NOT unique
            if name is not None and len(name) > LAMBDA_NAME_MAX:
                raise Invalid(f"name must be at most {LAMBDA_NAME_MAX} characters")
            return
        if not name or not LOCAL_NAME_RE.match(name):
            raise Invalid("name must be 1-63 characters of [a-z0-9-], starting with a letter or digit")
        for m in self.machines.values():
            if m.facade == facade and m.name == name and m.status != TERMINATED:
                raise NameConflict(f"a machine named {name!r} already exists ({m.id})")

    def get(self, facade: str, machine_id: str) -> Machine:
        m = self.machines.get(machine_id)
        if m is None or m.facade != facade or m.status == TERMINATED:
            raise NotFound(f"no machine {machine_id!r}")
        return m

    def live(self, facade: str) -> list[Machine]:
        """This facade's machines that are not gone, oldest first."""
        return sorted((m for m in self.machines.values() if m.facade == facade and m.status != TERMINATED),
                      key=lambda m: (m.created_at, m.id))

    def terminate(self, facade: str, machine_id: str) -> Machine:
        m = self.get(facade, machine_id)
        if m.status != TERMINATING:
            self._cancel(m)
            m.status = TERMINATING
            self._spawn(m, self._finish_terminate(m))
            self.save()
        return m

    async def kill(self, machine_id: str) -> Machine:
        """Admin: the machine dies now (SSH stops, status error; it bills until terminated)."""
        m = self.machines.get(machine_id)
        if m is None or m.status == TERMINATED:
            raise NotFound(f"no machine {machine_id!r}")
        if m.status != TERMINATING:
            self._cancel(m)
            await self._die(m, "killed by admin")
        return m

    # ------------------------------------------------------------------ admin knobs

    def set_stock(self, instance_type: str, region: str, count: int) -> None:
        itype = catalog.find_type(instance_type)
        if itype is None:
            raise Invalid(f"unknown instance type {instance_type!r}")
        if region not in itype.prices:
            raise Invalid(f"instance type {instance_type!r} is not offered in {region!r}")
        if count < 0:
            raise Invalid("count must be >= 0")
        self.stock[(instance_type, region)] = count
        self.save()

    def configure(self, *, boot_delay: float | None = None, terminate_delay: float | None = None,
                  quota: dict[str, int | None] | None = None) -> None:
        if boot_delay is not None:
            if boot_delay < 0:
                raise Invalid("boot_delay must be >= 0")
            self.boot_delay = boot_delay
        if terminate_delay is not None:
            if terminate_delay < 0:
                raise Invalid("terminate_delay must be >= 0")
            self.terminate_delay = terminate_delay
        for facade, limit in (quota or {}).items():
            if facade not in self.quota:
                raise Invalid(f"unknown facade {facade!r}")
            self.quota[facade] = limit
        self.save()

    async def reset(self) -> None:
        """A fresh cloud: terminate everything now and forget it, clear faults, restore stock and quotas."""
        self.faults.clear()
        for m in self.machines.values():
            if m.status != TERMINATED:
                self._cancel(m)
                await self._gone(m)
            shutil.rmtree(self.root / "machines" / m.id, ignore_errors=True)
        self.machines.clear()
        self.stock = catalog.default_stock()
        self.quota = {f: None for f in catalog.FACADES}
        self.save()

    # ------------------------------------------------------------------ SSH keys (Lambda's account keys)

    def add_ssh_key(self, facade: str, name: str, public_key: str | None) -> dict[str, str]:
        keys = self.ssh_keys[facade]
        if not name or len(name) > 64:
            raise Invalid("key name must be 1-64 characters")
        if any(k["name"] == name for k in keys.values()):
            raise Invalid(f"an SSH key named {name!r} already exists")
        private = None
        if public_key is None:  # Lambda generates a pair and returns the private half once
            pair = asyncssh.generate_private_key("ssh-ed25519")
            private = pair.export_private_key().decode()
            public_key = pair.export_public_key().decode().strip()
        try:
            parse_public_key(public_key)
        except ValueError as exc:
            raise Invalid(str(exc)) from exc
        entry = {"id": uuid.uuid4().hex, "name": name, "public_key": public_key.strip()}
        keys[entry["id"]] = entry
        self.save()
        return {**entry, "private_key": private} if private else dict(entry)

    def delete_ssh_key(self, facade: str, key_id: str) -> None:
        if self.ssh_keys[facade].pop(key_id, None) is None:
            raise NotFound(f"no SSH key {key_id!r}")
        self.save()

    # ------------------------------------------------------------------ internals

    def machine_home(self, m: Machine) -> Path:
        return self.root / "machines" / m.id / "home"

    def _prepare_home(self, m: Machine, itype: catalog.InstanceType) -> None:
        home = self.machine_home(m)
        (home / "bin").mkdir(parents=True, exist_ok=True)
        # A prompt that names the machine (the server's own user and hostname would mislead).
        label = re.sub(r"[^A-Za-z0-9._-]", "", m.name or "") or m.id[:12]
        (home / ".bashrc").write_text(f"PS1='{m.ssh_user}@{label}:\\w\\$ '\n")
        (home / ".bash_profile").write_text("[ -f ~/.bashrc ] && . ~/.bashrc\n")
        if itype.gpu is not None:
            smi = home / "bin" / "nvidia-smi"
            smi.write_text(nvidia_smi.script_for(itype, m.id))
            smi.chmod(0o755)
        if m.facade == "lambda":
            k3s_bin = home / "bin" / "k3s"
            k3s_bin.write_text(k3s.SCRIPT)
            k3s_bin.chmod(0o755)

    def _spawn(self, m: Machine, coro: Any) -> None:
        self._cancel(m)
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[m.id] = task
        task.add_done_callback(functools.partial(self._forget, m.id))

    def _forget(self, machine_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(machine_id) is task:
            del self._tasks[machine_id]

    def _cancel(self, m: Machine) -> None:
        task = self._tasks.pop(m.id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _start_ssh(self, m: Machine, port: int = 0) -> None:
        host_key = load_or_create_host_key(self.root / "machines" / m.id / "host_key")
        server = MachineSSH(home=self.machine_home(m), host_key=host_key, user=m.ssh_user,
                            public_keys=m.public_keys)
        m.ssh_port = await server.start(port)
        self._ssh[m.id] = server

    async def _stop_ssh(self, m: Machine) -> None:
        server = self._ssh.pop(m.id, None)
        if server is not None:
            await server.stop()

    async def _boot(self, m: Machine) -> None:
        await asyncio.sleep(max(0.0, m.boot_at - time.time()))
        if m.stuck:
            return  # injected: stays pending forever (until terminated)
        try:
            await self._start_ssh(m, m.ssh_port or 0)
        except OSError as exc:
            m.status, m.detail = ERROR, f"SSH server failed to start: {exc}"
            self.save()
            return
        m.status = RUNNING
        self.save()
        self._run_user_data(m)
        if m.die_after_boot is not None:
            await asyncio.sleep(m.die_after_boot)
            await self._die(m, "died after boot (injected)")

    def _run_user_data(self, m: Machine) -> None:
        # Like cloud-init, run the user data's "#!" scripts once at boot (keys were added at create).
        home = self.machine_home(m)
        for i, text in enumerate(cloudinit.parse(m.user_data).scripts):
            script = home / f".user-data-{i}"
            script.write_text(text)
            script.chmod(0o755)
            server = self._ssh.get(m.id)
            env = server._env() if server else {"HOME": str(home)}
            log_file = (home / "cloud-init-output.log").open("ab")
            asyncio.get_running_loop().create_task(self._run_detached([str(script)], home, env, log_file))

    @staticmethod
    async def _run_detached(argv: list[str], cwd: Path, env: dict[str, str], log_file: Any) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdout=log_file,
                                                        stderr=log_file, start_new_session=True)
            await proc.wait()
        except OSError as exc:
            log.warning("user_data failed to start: %s", exc)
        finally:
            log_file.close()

    async def _die(self, m: Machine, why: str) -> None:
        await self._stop_ssh(m)
        m.status, m.detail = ERROR, why
        self.save()

    async def _finish_terminate(self, m: Machine) -> None:
        await self._stop_ssh(m)
        await asyncio.sleep(self.terminate_delay)
        await self._gone(m)

    async def _gone(self, m: Machine) -> None:
        await self._stop_ssh(m)
        m.status, m.ended_at = TERMINATED, time.time()
        key = (m.instance_type, m.region)
        self.stock[key] = self.stock.get(key, 0) + 1
        self.save()
