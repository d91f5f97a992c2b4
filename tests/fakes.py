"""FakeInMemoryProvider: an in-process cloud for workflow tests, with real SSH machines.

State lives in one FakeCloud shared by every adapter instance (activities build a new
adapter per call). Each running machine is an asyncssh server on 127.0.0.1 that runs
commands with bash; `nvidia-smi` answers from the offer's GPUs, or is "not found".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import asyncssh

from providers.base import (
    AuthError,
    Capabilities,
    CapacityError,
    CloudProvider,
    GpuSpec,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    LaunchSpec,
    Offer,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
    launch_leaving,
    launch_request,
    rank_offers,
)
from providers.credentials import ApiKeyCredentials

FAKE_OFFERS = [
    Offer(provider="fake", instance_type="gpu.1x", gpu=GpuSpec(name="A10", count=1, memory_gib=24),
          vcpus=8, memory_gib=32, region="r1", price_per_hour=0.5),
    Offer(provider="fake", instance_type="gpu.1x", gpu=GpuSpec(name="A10", count=1, memory_gib=24),
          vcpus=8, memory_gib=32, region="r2", price_per_hour=0.6),
    Offer(provider="fake", instance_type="gpu.2x", gpu=GpuSpec(name="A10", count=2, memory_gib=24),
          vcpus=16, memory_gib=64, region="r1", price_per_hour=1.0),
    Offer(provider="fake", instance_type="cpu.small", vcpus=2, memory_gib=4, region="r1",
          price_per_hour=0.05),
]


@dataclass
class FakeFault:
    op: str  # create|get|terminate|offers|verify|list
    # capacity|quota|transient|auth|rate_limit|lose_response|latency|die_at_boot|end_at_boot|lands_late|
    # stuck_booting
    kind: str
    times: int = 1  # -1: forever
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeMachine:
    ref: InstanceRef
    spec: LaunchSpec
    offer: Offer
    boot_at: float
    state: InstanceState = InstanceState.PENDING
    dies_at_boot: bool = False
    ends_at_boot: str | None = None  # the cloud ends it as it boots, saying this (a lifetime run out)
    ssh: asyncssh.SSHAcceptor | None = None
    port: int | None = None


class FakeCloud:
    def __init__(self) -> None:
        self.machines: dict[str, FakeMachine] = {}  # every machine ever made, by id
        self.faults: list[FakeFault] = []
        self.boot_delay = 0.0
        self.ssh_delay = 0.0  # running -> SSH server accepting
        self.gpu_probe_delay = 0.0
        # The next this many nvidia-smi runs fail as they do while the driver is not loaded yet.
        self.gpu_probe_failures = 0
        self.create_calls = 0
        self.pending: list[asyncio.Task[None]] = []  # creates that land later (fault lands_late)
        self._ids = itertools.count(1)
        self._host_key = asyncssh.generate_private_key("ssh-ed25519")

    def add_fault(self, op: str, kind: str, times: int = 1, **params: Any) -> None:
        self.faults.append(FakeFault(op, kind, times, params))

    def live(self) -> list[FakeMachine]:
        return [m for m in self.machines.values() if m.state != InstanceState.TERMINATED]

    async def reset(self) -> None:
        for task in self.pending:
            task.cancel()
        for m in self.machines.values():
            await self._stop_ssh(m)
        self.__init__()  # type: ignore[misc]

    def take_fault(self, op: str) -> FakeFault | None:
        for f in self.faults:
            if f.op in (op, "*") and f.times != 0:
                f.times -= 1 if f.times > 0 else 0
                return f
        return None

    async def raise_fault(self, op: str, scope: str) -> FakeFault | None:
        """Raise the error of the next matching fault; return non-raising ones to the caller."""
        f = self.take_fault(op)
        if f is None:
            return None
        if f.kind == "capacity":
            raise CapacityError("fake: no capacity", scope=f.params.get("scope", scope))
        if f.kind == "quota":
            raise QuotaError("fake: quota exceeded", scope=f.params.get("scope", scope))
        if f.kind == "transient":
            raise Transient("fake: 503")
        if f.kind == "auth":
            raise AuthError("fake: invalid api key")
        if f.kind == "rate_limit":
            raise RateLimited("fake: 429 Too Many Requests", retry_after=f.params.get("retry_after", 1.0))
        if f.kind == "latency" and f.params.get("when", "before") == "before":
            await asyncio.sleep(f.params["seconds"])
        return f

    async def advance(self, m: FakeMachine, die: bool = False) -> None:
        """Boot on read: pending until boot_at, then running (SSH after ssh_delay)."""
        if m.state == InstanceState.PENDING and time.monotonic() >= m.boot_at:
            m.state = (InstanceState.ERROR if m.dies_at_boot else InstanceState.TERMINATED if m.ends_at_boot
                       else InstanceState.RUNNING)
        if m.state == InstanceState.RUNNING and m.ssh is None:
            await self._start_ssh(m)

    async def _start_ssh(self, m: FakeMachine) -> None:
        keys = {asyncssh.import_public_key(k).public_data for k in m.spec.ssh_public_keys}
        gpus = m.offer.gpu
        cloud = self
        # The port is known once running; logins are refused until ssh_delay has passed.
        accept_from = time.monotonic() + self.ssh_delay

        class Auth(asyncssh.SSHServer):
            def begin_auth(self, username: str) -> bool:
                return True

            def public_key_auth_supported(self) -> bool:
                return True

            def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
                return time.monotonic() >= accept_from and key.public_data in keys

        async def handle(process: asyncssh.SSHServerProcess) -> None:
            cmd = process.command or ""
            if cmd.startswith("nvidia-smi"):
                await asyncio.sleep(cloud.gpu_probe_delay)
                if cloud.gpu_probe_failures > 0:
                    cloud.gpu_probe_failures -= 1
                    process.stdout.write("NVIDIA-SMI has failed because it couldn't communicate with "
                                         "the NVIDIA driver. Make sure that the latest NVIDIA driver is "
                                         "installed and running.\n")
                    process.exit(9)
                    return
                if gpus is None:
                    process.stderr.write("bash: nvidia-smi: command not found\n")
                    process.exit(127)
                    return
                mem = int((gpus.memory_gib or 0) * 1024)
                for i in range(gpus.count):
                    process.stdout.write(f"{i}, NVIDIA {gpus.name}, {mem}, GPU-fake-{m.ref.instance_id}-{i}, "
                                         "[Not Supported]\n")
                process.exit(0)
                return
            proc = await asyncio.create_subprocess_exec("bash", "-c", cmd, stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
            process.stdout.write(out.decode())
            process.stderr.write(err.decode())
            process.exit(proc.returncode or 0)

        m.ssh = await asyncssh.listen("127.0.0.1", 0, server_factory=Auth, server_host_keys=[self._host_key],
                                      process_factory=handle)
        m.port = m.ssh.sockets[0].getsockname()[1]

    async def _stop_ssh(self, m: FakeMachine) -> None:
        if m.ssh is not None:
            m.ssh.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(m.ssh.wait_closed(), 1)
            m.ssh = None


class FakeInMemoryProvider(CloudProvider):
    id: ClassVar[str] = "fake"
    credentials_model: ClassVar[type[ApiKeyCredentials]] = ApiKeyCredentials
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Fake cloud", k3s="none", k3s_reason="fake machines cannot host k3s",
        ports=True, spot=False, login_user="gpuprov", regions=["r1", "r2"],
    )
    cloud: ClassVar[FakeCloud] = FakeCloud()

    def _mine(self, m: FakeMachine) -> bool:
        return m.spec.owner.installation_id == self.installation_id

    async def verify(self) -> str:
        await self.cloud.raise_fault("verify", self.id)
        if self.credentials.reveal()["api_key"] != "good":
            raise AuthError("fake: invalid api key")
        return "fake-account"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        await self.cloud.raise_fault("offers", self.id)
        return rank_offers(FAKE_OFFERS, query)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        cloud = self.cloud
        cloud.create_calls += 1
        found = await self.find(spec.key)
        if found is not None:
            return found
        with launch_request():
            await launch_leaving()  # the launch leaves now (no HTTP here: marked by hand)
        fault = await cloud.raise_fault("create", f"{self.id}/{offer.region}")
        # Stamped like a real cloud's creation time (the spend ledger starts there).
        ref = InstanceRef(provider=self.id, instance_id=f"m{next(cloud._ids)}", key=spec.key,
                          region=offer.region, created_at=datetime.now(UTC))
        boot_at = time.monotonic() + cloud.boot_delay
        machine = FakeMachine(ref=ref, spec=spec, offer=offer, boot_at=boot_at)
        if fault is not None and fault.kind == "lands_late":
            # The request timed out on our side, but the cloud still acts on it a little later.
            async def land() -> None:
                await asyncio.sleep(fault.params["seconds"])
                machine.ref = ref.model_copy(update={"created_at": datetime.now(UTC)})
                cloud.machines[ref.instance_id] = machine
            cloud.pending.append(asyncio.get_running_loop().create_task(land()))
            raise Transient("fake: timed out waiting for the answer", in_doubt=True)
        if fault is not None and fault.kind == "stuck_booting":
            machine.boot_at = float("inf")
        cloud.machines[ref.instance_id] = machine
        if fault is not None and fault.kind == "die_at_boot":
            cloud.machines[ref.instance_id].dies_at_boot = True
        if fault is not None and fault.kind == "end_at_boot":
            machine.ends_at_boot = fault.params["detail"]
        if fault is not None and fault.kind == "lose_response":
            raise Transient("fake: connection reset after create", in_doubt=True)
        if fault is not None and fault.kind == "latency":  # when="after": the create took effect
            await asyncio.sleep(fault.params["seconds"])
        return ref

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        await self.cloud.raise_fault("get", self.id)
        m = self.cloud.machines.get(ref.instance_id)
        if m is None or (m.state == InstanceState.TERMINATED and not m.ends_at_boot):
            return None
        await self.cloud.advance(m)
        if m.state == InstanceState.TERMINATED:  # ended by the cloud: shown, with its reason, as Modal's are
            return InstanceStatus(ref=m.ref, state=m.state, detail=m.ends_at_boot)
        ready = m.state == InstanceState.RUNNING
        return InstanceStatus(ref=m.ref, state=m.state, host="127.0.0.1" if ready else None,
                              ssh_port=m.port or 22, ssh_user="gpuprov", instance_type=m.offer.instance_type)

    async def terminate(self, ref: InstanceRef) -> None:
        await self.cloud.raise_fault("terminate", self.id)
        m = self.cloud.machines.get(ref.instance_id)
        if m is not None:
            m.state = InstanceState.TERMINATED
            await self.cloud._stop_ssh(m)

    async def list_owned(self) -> list[InstanceRef]:
        await self.cloud.raise_fault("list", self.id)
        return [m.ref for m in self.cloud.live() if self._mine(m)]
