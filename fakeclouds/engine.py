"""The one engine behind every simulated cloud: catalogue, stock, machines, billing, faults.

Facades translate HTTP into these calls. What differs between clouds (catalogue, names, ids,
login user, image, SSH address) comes from each one's `Facade` declaration; the engine serves the
facades it is given (`clouds.all_facades()`: every simulated cloud). Everything runs on one asyncio
loop (the server's); lifecycle steps (boot, terminate, die) are tasks on that loop. With a
`state_dir`, every change is written to `state.json` and `start()` brings machines back, same SSH
addresses, ports and host keys. What runs on a machine besides its SSH server (user data at boot,
power-off) is in `machine_processes.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from fakeclouds import catalog, cloudinit, fake_systemd, guest_power, k8s_api, machine_disk, own_temp
from fakeclouds.addresses import SHARED_HOST, LoopbackPool, bind_failure
from fakeclouds.calls import CallLog
from fakeclouds.errors import Invalid, NameConflict, NoCapacity, NotFound, QuotaExceeded
from fakeclouds.facade import Facade, index_facades
from fakeclouds.faults import FaultBook
from fakeclouds.k8s_api import MachineApi
from fakeclouds.machine_processes import power_off, remove_once_unused, run_user_data, tmp_of
from fakeclouds.ratelimit import RateLimiter
from fakeclouds.ssh import MachineSSH, load_or_create_host_key, parse_public_key

log = logging.getLogger(__name__)

BIND_ATTEMPTS = 16  # addresses a new machine tries when another process holds the one it drew
ADMIN_PREFIX = "/_fake"
PENDING, RUNNING, TERMINATING, TERMINATED, ERROR = "pending", "running", "terminating", "terminated", "error"
# A delay past any test: a held boot (Engine.hold_boots, ended by boot_now), a held termination
# (terminate_delay set to it, ended by setting it back).
HELD_S = 7 * 24 * 3600.0
PREEMPTED = "preempted"  # Machine.detail of a machine the cloud took back (status terminated)


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
    address: str | None = None  # where its SSH server listens, once it first did (kept for restarts)
    ssh_port: int | None = None
    ended_at: float | None = None  # billing stops here (gone)
    booted_at: float | None = None  # when a boot last completed (what outlives a short-lived running state)
    stuck: bool = False  # injected: never leaves pending
    die_after_boot: float | None = None  # injected: dies this many seconds after boot
    preempt_after: float | None = None  # injected: the cloud takes it back this many seconds after boot
    detail: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # facade-specific (e.g. ssh_key_names)

    @property
    def host(self) -> str | None:
        return self.address if self.status == RUNNING else None

    def billing_seconds(self, now: float | None = None) -> float:
        end = self.ended_at if self.ended_at is not None else (now or time.time())
        return max(0.0, end - self.created_at)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Engine:
    def __init__(self, *, facades: Iterable[Facade], boot_delay: float = 1.0,
                 terminate_delay: float = 0.2, state_dir: str | Path | None = None,
                 loopback: LoopbackPool | None = None, time_scale: float = 1.0) -> None:
        """`facades`: the clouds to simulate (`clouds.all_facades()`: every simulated cloud).
        `loopback`: where machines of fixed-SSH-port clouds get their addresses (default: a random /24).
        `time_scale`: documented rate-limit windows run this much faster (1.0: real speed; 0: off)."""
        self.facades = index_facades(facades, reserved=ADMIN_PREFIX)
        self.loopback = loopback or LoopbackPool()
        self.boot_delay = boot_delay
        # Machines created while set boot only when the admin says (boot_now): a test reads them
        # booting without racing their boot. What depends on boot_delay alone (GCP's insert
        # operation ends at a quarter of it) is unchanged.
        self.hold_boots = False
        self.terminate_delay = terminate_delay
        # Set (and replaced) when terminate_delay changes: a termination under way measures its wait
        # against the new delay, so a test can hold machines terminating and then let them go.
        self._terminate_delay_changed = asyncio.Event()
        self.faults = FaultBook()
        self.calls = CallLog()  # what adapters asked of each facade (fakeclouds/calls.py)
        self.limiter = RateLimiter(time_scale)
        self.machines: dict[str, Machine] = {}
        self.stock = self._default_stock()
        self.quota: dict[str, int | None] = {f: None for f in self.facades}  # max live machines
        self.ssh_keys: dict[str, dict[str, dict[str, str]]] = {f: {} for f in self.facades}
        # Each facade's own account state (JSON-able: e.g. Azure's resource groups, NICs, operations),
        # persisted with the machines and cleared by reset(). The facade owns its shape.
        self.facade_state: dict[str, dict[str, Any]] = {f: {} for f in self.facades}
        self._persist = state_dir is not None
        self.root = Path(state_dir) if state_dir else own_temp.make("engine")
        self.root.mkdir(parents=True, exist_ok=True)
        self._ssh: dict[str, MachineSSH] = {}
        self._k8s: dict[str, MachineApi] = {}  # each running machine's simulated Kubernetes API
        self._tasks: dict[str, asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ lifecycle of the engine

    async def start(self) -> None:
        """Load persisted state and bring machines back where they were."""
        path = self.root / "state.json"
        if not (self._persist and path.exists()):
            return
        state = json.loads(path.read_text())
        self.stock.update(self._load_stock(state["stock"]))
        self.quota.update({f: n for f, n in state.get("quota", {}).items() if f in self.facades})
        self.ssh_keys.update(state.get("ssh_keys", {}))
        saved = state.get("facade_state", {})
        self.facade_state.update({f: d for f, d in saved.items() if f in self.facades})
        for raw in state["machines"]:
            m = Machine(**raw)
            self.machines[m.id] = m
            if m.facade not in self.facades:  # its cloud is no longer registered: kept, but inert
                log.warning("machine %s belongs to unknown facade %r; not restored", m.id, m.facade)
            elif m.status == RUNNING:
                why = await self._listen(m)
                if why is not None:
                    m.status, m.detail = ERROR, f"not restored: {why}"
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
        for api in list(self._k8s.values()):
            await api.stop()
        self._k8s.clear()
        self.save()
        if not self._persist:  # the cloud is gone for good: so is everything its machines ran
            # One scan of the host's processes for every machine's at once (a power-off each took
            # one per machine ever made: a whole `make bench`'s thousands outran its stop's 15 s).
            if not remove_once_unused(self.root):
                log.warning("%s: processes kept appearing there; left in place", self.root)

    def save(self) -> None:
        if not self._persist:
            return
        state = {
            "machines": [m.to_dict() for m in self.machines.values()],
            "stock": [[f, t, r, n] for (f, t, r), n in self.stock.items()],
            "quota": self.quota,
            "ssh_keys": self.ssh_keys,
            "facade_state": self.facade_state,
        }
        tmp = self.root / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.root / "state.json")

    def _default_stock(self) -> dict[catalog.StockKey, int]:
        stock: dict[catalog.StockKey, int] = {}
        for f in self.facades.values():
            stock.update(catalog.default_stock(f.name, f.instance_types))
        return stock

    def _load_stock(self, rows: list[list[Any]]) -> dict[catalog.StockKey, int]:
        stock: dict[catalog.StockKey, int] = {}
        for row in rows:
            if len(row) == 3:  # written before stock was per facade: the facade selling that type
                t, r, n = row
                row = [next((f.name for f in self.facades.values() if f.instance_type(t)), "?"), t, r, n]
            f, t, r, n = row
            stock[(f, t, r)] = n
        return stock

    # ------------------------------------------------------------------ catalogue

    def facade(self, name: str) -> Facade:
        found = self.facades.get(name)
        if found is None:
            raise Invalid(f"unknown facade {name!r}; known: {', '.join(sorted(self.facades))}")
        return found

    def in_stock(self, facade: str, instance_type: str, region: str) -> int:
        return self.stock.get((facade, instance_type, region), 0)

    def offers(self, facade: str) -> list[dict[str, Any]]:
        """One row per (type, region, spot) this facade sells, with live availability."""
        rows = []
        for itype in self.facade(facade).instance_types:
            for region, price in itype.prices.items():
                stock = self.in_stock(facade, itype.name, region)
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
               extra: dict[str, Any] | None = None, preempt_after: float | None = None) -> list[Machine]:
        """Validate, take stock, and start booting `quantity` machines. Synchronous, hence atomic."""
        cloud = self.facade(facade)
        itype = cloud.instance_type(instance_type)
        if itype is None:
            raise Invalid(f"unknown instance type {instance_type!r}")
        if cloud.region(region) is None:
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
        self._check_name(facade, name, region)
        for port in ports or []:
            if not 1 <= port <= 65535:
                raise Invalid(f"port {port} out of range")
        live = [m for m in self.machines.values() if m.facade == facade and m.status != TERMINATED]
        limit = self.quota.get(facade)
        if limit is not None and len(live) + quantity > limit:
            raise QuotaExceeded(f"quota of {limit} machines reached")
        if self.in_stock(facade, instance_type, region) < quantity:
            raise NoCapacity(f"no capacity for {instance_type} in {region}", region)
        self.stock[(facade, instance_type, region)] -= quantity
        now = time.time()
        price = next(o["price_per_hour"] for o in self.offers(facade)
                     if o["type"].name == instance_type and o["region"] == region and o["spot"] == spot)
        made = []
        for _ in range(quantity):
            mid = cloud.machine_id()
            while mid in self.machines:  # ids are never reused, not even those of gone machines
                mid = cloud.machine_id()
            m = Machine(
                id=mid, facade=facade, name=name, instance_type=instance_type, region=region, spot=spot,
                ssh_user=cloud.login_user, public_keys=[k.strip() for k in public_keys],
                price_per_hour=price,
                created_at=now, boot_at=now + (HELD_S if self.hold_boots else self.boot_delay),
                labels=dict(labels or {}),
                user_data=user_data, ports=list(ports or []), stuck=stuck, die_after_boot=die_after_boot,
                preempt_after=preempt_after, extra=dict(extra or {}),
            )
            self.machines[mid] = m
            machine_disk.prepare_home(self.machine_home(m), m, self.facades[m.facade], itype)
            self._spawn(m, self._boot(m))
            made.append(m)
        self.save()
        return made

    def _check_name(self, facade: str, name: str | None, region: str) -> None:
        rule = self.facade(facade).names
        problem = rule.problem(name)
        if problem is not None:
            raise Invalid(problem)
        if not rule.unique or not name:
            return
        for m in self.machines.values():
            if m.facade == facade and m.name == name and m.status != TERMINATED \
                    and (not rule.per_region or m.region == region):
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

    def boot_now(self, machine_id: str) -> Machine:
        """Admin: a booting machine's boot ends now, whatever delay it was created with. A test reads
        a machine booting without racing its boot (created while `hold_boots` is set: it stays
        booting however slow the test's host is), then lets it come up."""
        m = self.machines.get(machine_id)
        if m is None or m.status == TERMINATED:
            raise NotFound(f"no machine {machine_id!r}")
        if m.status != PENDING or m.stuck:
            raise Invalid(f"machine {machine_id!r} is not booting (status {m.status}"
                          f"{', stuck' if m.stuck else ''})")
        m.boot_at = time.time()
        self.save()
        self._spawn(m, self._boot(m))  # the boot's wait starts again, from the new boot_at
        return m

    async def preempt(self, machine_id: str) -> Machine:
        """The cloud takes the machine back now: SSH stops and it is gone (billing stops, its stock
        returns), with detail `preempted` for facades whose cloud reports preemption."""
        m = self.machines.get(machine_id)
        if m is None or m.status == TERMINATED:
            raise NotFound(f"no machine {machine_id!r}")
        self._cancel(m)
        m.detail = PREEMPTED
        await self._gone(m)
        return m

    # ------------------------------------------------------------------ admin knobs

    def set_stock(self, instance_type: str, region: str, count: int, facade: str | None = None) -> None:
        """`facade` may be left out when only one facade sells `instance_type`."""
        sellers = [f for f in self.facades.values()
                   if f.instance_type(instance_type) and facade in (None, f.name)]
        if not sellers:
            raise Invalid(f"unknown instance type {instance_type!r}")
        if len(sellers) > 1:
            raise Invalid(f"several facades sell {instance_type!r}: say which "
                          f"({', '.join(f.name for f in sellers)})")
        itype = sellers[0].instance_type(instance_type)
        if itype is None or region not in itype.prices:
            raise Invalid(f"instance type {instance_type!r} is not offered in {region!r}")
        if count < 0:
            raise Invalid("count must be >= 0")
        self.stock[(sellers[0].name, instance_type, region)] = count
        self.save()

    @property
    def time_scale(self) -> float:
        return self.limiter.time_scale

    def configure(self, *, boot_delay: float | None = None, terminate_delay: float | None = None,
                  quota: dict[str, int | None] | None = None, time_scale: float | None = None,
                  hold_boots: bool | None = None) -> None:
        if hold_boots is not None:
            self.hold_boots = hold_boots
        if boot_delay is not None:
            if boot_delay < 0:
                raise Invalid("boot_delay must be >= 0")
            self.boot_delay = boot_delay
        if terminate_delay is not None:
            if terminate_delay < 0:
                raise Invalid("terminate_delay must be >= 0")
            self.terminate_delay = terminate_delay
            self._terminate_delay_changed.set()
            self._terminate_delay_changed = asyncio.Event()
        if time_scale is not None:
            if time_scale < 0:
                raise Invalid("time_scale must be >= 0")
            self.limiter.time_scale = time_scale
        for facade, limit in (quota or {}).items():
            if facade not in self.quota:
                raise Invalid(f"unknown facade {facade!r}")
            self.quota[facade] = limit
        self.save()

    async def reset(self) -> None:
        """A fresh cloud: terminate everything now and forget it, clear faults, restore stock and quotas."""
        self.faults.clear()
        self.hold_boots = False
        self.limiter.reset()
        for m in self.machines.values():
            if m.status != TERMINATED:
                self._cancel(m)
                await self._gone(m)
            shutil.rmtree(self.root / "machines" / m.id, ignore_errors=True)
        self.machines.clear()
        self.stock = self._default_stock()
        self.quota = {f: None for f in self.facades}
        self.facade_state = {f: {} for f in self.facades}
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

    def authorize_key(self, facade: str, machine_id: str, public_key: str) -> Machine:
        """Let `public_key` log in to a machine that is not gone, at once and after restarts (clouds
        that attach keys to an existing instance: Vast.ai's per-instance SSH keys)."""
        m = self.get(facade, machine_id)
        try:
            parsed = parse_public_key(public_key)
        except ValueError as exc:
            raise Invalid(str(exc)) from exc
        if public_key.strip() not in m.public_keys:
            m.public_keys.append(public_key.strip())
            server = self._ssh.get(m.id)
            if server is not None:  # running: its SSH server takes the key for new logins
                server.keys.add(parsed.public_data)
            self.save()
        return m

    def delete_ssh_key(self, facade: str, key_id: str) -> None:
        if self.ssh_keys[facade].pop(key_id, None) is None:
            raise NotFound(f"no SSH key {key_id!r}")
        self.save()

    # ------------------------------------------------------------------ internals

    def machine_home(self, m: Machine) -> Path:
        return self.root / "machines" / m.id / "home"

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

    def _addresses(self, m: Machine) -> Iterator[tuple[str, int]]:
        """Where m's SSH server should listen, best first."""
        port = self.facades[m.facade].ssh_port
        if port is None:  # the API reports the port: 127.0.0.1, a random port (the same one on restore)
            yield SHARED_HOST, m.ssh_port or 0
        elif m.address is not None:  # clients know this address: come back on it or fail
            yield m.address, port
        else:  # its own address; another engine on this host may hold the one drawn, so draw again
            held = {x.address for x in self.machines.values() if x.status != TERMINATED and x.address}
            for _ in range(BIND_ATTEMPTS):
                address = self.loopback.take(held)
                if address is None:
                    return
                held.add(address)
                yield address, port

    async def _listen(self, m: Machine) -> str | None:
        """Start m's SSH server; None once it listens, else why it cannot (for m.detail)."""
        why = f"no free loopback address left in {self.loopback.network}"
        home = self.machine_home(m)
        own_tmp = {"TMPDIR": str(tmp_of(home))}
        for host, port in self._addresses(m):
            host_key = load_or_create_host_key(self.root / "machines" / m.id / "host_key")
            api = MachineApi(home)
            server = MachineSSH(home=home, host_key=host_key, user=m.ssh_user,
                                public_keys=m.public_keys, inside={k8s_api.PORT: api.inside},
                                on_login=functools.partial(self.calls.record_login, m.id), env=own_tmp)
            try:
                m.ssh_port = await server.start(host, port)
            except OSError as exc:
                why = bind_failure(exc, host, port)
                if exc.errno == errno.EADDRINUSE:
                    continue
                break
            m.address = host
            # Keys attached while it was starting (Vast.ai's attach during boot) went to m only.
            server.keys.update(parse_public_key(k).public_data for k in m.public_keys)
            self._ssh[m.id], self._k8s[m.id] = server, api
            guest_power.watch(self)  # its shutdown/poweroff act as its cloud's do (guest_power.py)
            if self.facades[m.facade].ssh_port is not None:  # its own address: 6443 there too
                await api.listen_behind(self.facades[m.facade].ingress, self, m)
            return None
        log.warning("machine %s: %s", m.id, why)
        return why

    async def _stop_ssh(self, m: Machine) -> None:
        server = self._ssh.pop(m.id, None)
        if server is not None:
            await server.stop()
        api = self._k8s.pop(m.id, None)
        if api is not None:
            await api.stop()

    async def _boot(self, m: Machine) -> None:
        await asyncio.sleep(max(0.0, m.boot_at - time.time()))
        if m.stuck:
            return  # injected: stays pending forever (until terminated)
        why = await self._listen(m)
        if why is not None:  # the machine is broken, not booting forever: callers see it and give up
            m.status, m.detail = ERROR, why
            self.save()
            return
        m.status, m.booted_at = RUNNING, time.time()
        self.save()
        self._run_user_data(m)
        if m.die_after_boot is not None:
            await asyncio.sleep(m.die_after_boot)
            await self._die(m, "died after boot (injected)")
        elif m.preempt_after is not None:
            await asyncio.sleep(m.preempt_after)
            m.detail = PREEMPTED
            await self._gone(m)

    def machine_env(self, m: Machine) -> dict[str, str]:
        """The environment m's commands run with (its logins', boot scripts', units')."""
        server = self._ssh.get(m.id)
        home = self.machine_home(m)
        return server._env() if server else {"HOME": str(home), "TMPDIR": str(tmp_of(home))}

    def _run_user_data(self, m: Machine) -> None:
        run_user_data(self.machine_home(m), m.user_data, self.machine_env(m))

    async def _die(self, m: Machine, why: str) -> None:
        fake_systemd.stop_all(self, m)
        await self._stop_ssh(m)
        m.status, m.detail = ERROR, why
        self.save()

    async def _finish_terminate(self, m: Machine) -> None:
        """Gone `terminate_delay` after this started — the delay as it is now, not as it was: one
        lengthened holds the machine terminating, one shortened lets it go."""
        await self._stop_ssh(m)
        started = time.monotonic()
        while (left := started + self.terminate_delay - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._terminate_delay_changed.wait(), left)
        await self._gone(m)

    async def _gone(self, m: Machine) -> None:
        fake_systemd.stop_all(self, m)  # first: a service killed by the power-off is not restarted
        await self._stop_ssh(m)
        power_off(self.machine_home(m))
        m.status, m.ended_at = TERMINATED, m.ended_at or time.time()  # a stopped one's bill ended
        key = (m.facade, m.instance_type, m.region)
        self.stock[key] = self.stock.get(key, 0) + 1
        self.save()
