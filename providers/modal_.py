"""Modal (research/new-clouds-facts.md, "Modal"; PROVIDER-APIS.md). The official `modal` client (1.6.4,
pinned) over gRPC; credentials a token id and secret plus an environment (default `main`).

The model: a machine is a GPU Sandbox, a container (no systemd: no k3s) in the app `gpuprov` of the
connection's environment, whose command installs the SSH keys and execs sshd; SSH reaches it only
through the TCP tunnel of port 22 (`sb.tunnels()[22].tcp_socket`), so there is no `--port`. No spot,
no custom image (the image must carry sshd), one scheduling "region": Modal places the sandbox.

Keys: the user's and gpuprov's public keys travel only in the sandbox's command (`printf '%s\\n' KEY
... > /root/.ssh/authorized_keys`), never in a Modal secret or an account object; the base image (Debian
slim + openssh-server, host keys removed at build so each sandbox makes its own) is shared by every
sandbox and cached by Modal.

Find-or-create: the sandbox's name is `gpuprov-<installation>-<key>` (unique within the app, so a second
create under one key is refused by Modal itself: ALREADY_EXISTS, then the existing one is found), and
its tags carry the installation and key, which is how `list_owned` finds ours (Sandbox.list by tags).

Lifetime: a sandbox lives at most its `timeout` (Modal caps it at 24 h); it is set from the
allocation's max_hours (`LaunchSpec.lifetime_s`), else to that cap, and a sandbox that reached it is
reported terminated with that reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import SecretStr

from providers import naming
from providers.base import (
    Capabilities,
    CloudProvider,
    FailureScope,
    GpuSpec,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    ProviderError,
    SelfEnd,
    Unsupported,
    launch_leaving,
    launch_request,
    rank_offers,
)
from providers.credentials import Credentials, field
from providers.listing import Listing
from providers.modal_client import DEFAULT_SERVER_URL, map_error, open_client
from providers.modal_gpus import GPUS, parse_spec

APP_NAME = "gpuprov"
REGION = "global"  # Modal places the sandbox; region selection is a priced add-on not used here
NAME_MAX = 64
MAX_TIMEOUT_S = 24 * 3600  # Modal's cap on a sandbox's lifetime
TUNNEL_WAIT_S = 1  # how long one get() lets SandboxGetTunnels hold
TAG_INSTALLATION, TAG_KEY = "gpuprov-installation", "gpuprov-key"
# When the create left, as a tag: the client drops SandboxInfo.created_at when it lists sandboxes, so
# a sandbox found later (a create whose answer was lost) carries its launch time this way.
TAG_LAUNCHED = "gpuprov-launched"
TIMEOUT_DETAIL = (
    "timeout: the sandbox reached its lifetime limit (Modal stops a sandbox after its timeout, at most 24 h)"
)
# What the Sandbox's image carries: sshd, without host keys (each sandbox makes its own at start).
IMAGE_PACKAGES = ("openssh-server",)
IMAGE_COMMANDS = ("rm -f /etc/ssh/ssh_host_*",)
VCPUS_PER_GPU, MEMORY_GIB_PER_GPU = 1, 1  # floors: Modal bills CPU and memory on top, per second [approx]


class ModalCredentials(Credentials):
    """A Modal API token (Settings → API Tokens) and the environment its sandboxes run in."""

    token_id: str = field("Token ID", min_length=1, max_length=200, help="starts with ak-")
    token_secret: SecretStr = field(
        "Token Secret", "secret", min_length=1, max_length=200, help="starts with as-"
    )
    environment: str = field("Environment", default="main", min_length=1, max_length=100)


def sandbox_name(installation_id: str, key: str) -> str:
    return naming.owned_name(installation_id, key, NAME_MAX, what="a Modal sandbox name")


def sshd_command(public_keys: list[str]) -> tuple[str, ...]:
    """The sandbox's command: install exactly `public_keys` for root, make host keys, exec sshd."""
    keys = " ".join(shlex.quote(k.strip()) for k in public_keys)
    script = "\n".join(
        [
            "set -e",
            "umask 077",
            "mkdir -p /root/.ssh /run/sshd",
            f"printf '%s\\n' {keys} > /root/.ssh/authorized_keys",
            "ssh-keygen -A",
            "exec /usr/sbin/sshd -D -e",
        ]
    )
    return ("/bin/sh", "-c", script)


class ModalProvider(CloudProvider):
    id: ClassVar[str] = "modal"
    credentials_model: ClassVar[type[ModalCredentials]] = ModalCredentials
    api_hosts: ClassVar[tuple[str, ...]] = ("api.modal.com",)
    listing: ClassVar[Listing] = Listing(
        tagline="Serverless GPUs, scale to zero",
        how_to_connect=(
            "In Modal open Settings → API Tokens → New Token (or run `modal token new`): copy the Token ID "
            "(ak-…) and Token Secret (as-…). Environment defaults to main."
        ),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Modal",
        k3s="none",
        k3s_reason="Modal sandboxes are containers without systemd: k3s cannot run there (skipped)",
        ports=False,
        ports_reason="--port: Modal sandboxes are reached only through Modal's tunnels (port 22 for SSH); "
        "there is no firewall to open another port",
        spot=False,
        custom_image=False,
        login_user="root",
        regions=[REGION],
        max_lifetime_h=MAX_TIMEOUT_S / 3600,  # the sandbox's timeout
        lifetime_reason="Modal caps a sandbox's lifetime (its timeout) at 24 h",
        create_in_flight_s=0.0,  # names are unique within the app: Modal refuses a second create
        boot_timeout_s=1500.0,  # Sandbox.create itself waits up to 21 min for scheduling
        self_end=SelfEnd(
            method="none",
            how=("a sandbox has no guest shutdown; the cloud ends it at its timeout (--max-hours, at "
                 "most 24 h), which is set at launch and cannot be renewed"),
            source="https://modal.com/docs/guide/sandbox",
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client: Any = None
        self._app: Any = None
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ plumbing

    @property
    def _creds(self) -> ModalCredentials:
        assert isinstance(self.credentials, ModalCredentials)
        return self.credentials

    async def _modal(self) -> Any:
        async with self._lock:
            if self._client is None:
                creds = self._creds
                try:
                    self._client = await open_client(
                        self.options.endpoint or DEFAULT_SERVER_URL,
                        creds.token_id,
                        creds.token_secret.get_secret_value(),
                    )
                except Exception as exc:  # noqa: BLE001 — every client failure is mapped
                    raise map_error(exc, self.id) from None
            return self._client

    async def _call(self, fn: Any, *args: Any, scope: FailureScope | str | None = None, **kwargs: Any) -> Any:
        """One `modal` coroutine (an `.aio` method), its failure as a contract error."""
        try:
            return await fn(*args, **kwargs)
        except ProviderError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise map_error(exc, self.id, scope) from None

    async def _the_app(self) -> Any:
        import modal

        client = await self._modal()
        if self._app is None:
            self._app = await self._call(
                modal.App.lookup.aio,
                APP_NAME,
                create_if_missing=True,
                client=client,
                environment_name=self._creds.environment,
            )
        return self._app

    def _name(self, key: str) -> str:
        return sandbox_name(self.installation_id, key)

    async def _sandboxes(self, tags: dict[str, str]) -> list[Any]:
        import modal

        app, client = await self._the_app(), await self._modal()

        async def collect() -> list[Any]:
            return [sb async for sb in modal.Sandbox.list.aio(app_id=app.app_id, tags=tags, client=client)]

        return list(await self._call(collect))

    def _ref(self, sb: Any, key: str, created: float | None = None) -> InstanceRef:
        return InstanceRef(
            provider=self.id,
            instance_id=sb.object_id,
            key=key,
            region=REGION,
            created_at=datetime.fromtimestamp(created, UTC) if created else None,
        )

    async def _refs(self, tags: dict[str, str]) -> list[InstanceRef]:
        out = []
        for sb in await self._sandboxes(tags):
            sb_tags = await self._call(sb.get_tags.aio)
            try:
                launched: float | None = float(sb_tags.get(TAG_LAUNCHED, ""))
            except ValueError:
                launched = None
            out.append(self._ref(sb, sb_tags.get(TAG_KEY, ""), launched))
        return out

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        client = await self._modal()
        await self._call(client.hello.aio)
        digest = hashlib.sha256(self._creds.token_id.encode()).hexdigest()[:12]
        return f"Modal token {digest} (environment {self._creds.environment})"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        client = await self._modal()
        await self._call(client.hello.aio)  # prices are a table; this checks the token can reach Modal
        if query.spot:
            return []
        out = []
        for g in GPUS:
            for count in range(1, g.max_count + 1):
                out.append(
                    Offer(
                        provider=self.id,
                        instance_type=g.spec(count),
                        gpu=GpuSpec(name=g.canonical, count=count, memory_gib=float(g.memory_gib)),
                        vcpus=VCPUS_PER_GPU * count,
                        memory_gib=float(MEMORY_GIB_PER_GPU * count),
                        region=REGION,
                        price_per_hour=round(g.price_per_hour * count, 4),
                    )
                )
        return rank_offers(out, query)

    async def find_all(self, key: str) -> list[InstanceRef]:
        tags = {TAG_INSTALLATION: self.installation_id, TAG_KEY: key}
        return [r.model_copy(update={"key": key}) for r in await self._refs(tags)]

    async def find(self, key: str) -> InstanceRef | None:
        found = await self.find_all(key)
        return found[0] if found else None

    async def list_owned(self) -> list[InstanceRef]:
        return await self._refs({TAG_INSTALLATION: self.installation_id})

    async def list_machines(self) -> None:
        # SandboxList's entries carry no tunnel: SSH's host and port come only from SandboxGetTunnels.
        return None

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        import modal

        if spec.k3s or spec.user_data:
            raise Unsupported("Modal sandboxes are containers: no cloud-init user data, no k3s at boot")
        try:
            parse_spec(offer.instance_type)
        except ValueError as exc:
            raise InvalidRequest(f"modal: {exc}") from None
        # Over 24 h was refused by create's capability check (max_lifetime_h), as Modal would.
        timeout = MAX_TIMEOUT_S if spec.lifetime_s is None else spec.lifetime_s
        found = await self.find(spec.key)
        if found is not None:
            return found
        app, client = await self._the_app(), await self._modal()
        image = modal.Image.debian_slim().apt_install(*IMAGE_PACKAGES).run_commands(*IMAGE_COMMANDS)
        scope = FailureScope(provider=self.id, region=REGION, instance_type=offer.instance_type)
        launched = datetime.now(UTC).timestamp()
        tags = {TAG_INSTALLATION: self.installation_id, TAG_KEY: spec.key, TAG_LAUNCHED: f"{launched:.3f}"}
        try:
            with launch_request():
                await launch_leaving()  # not sent over httpx: mark the launch leaving ourselves
                sb = await modal.Sandbox.create.aio(
                    *sshd_command(spec.ssh_public_keys),
                    app=app,
                    image=image,
                    gpu=offer.instance_type,
                    name=self._name(spec.key),
                    tags=tags,
                    unencrypted_ports=[22],
                    timeout=timeout,
                    client=client,
                )
        except modal.exception.AlreadyExistsError:
            # A create under this key got there first (a race, or a retry whose answer was lost).
            again = await self.find(spec.key)
            if again is None:
                raise InvalidRequest(
                    f"modal: sandbox {self._name(spec.key)!r} exists but is not ours"
                ) from None
            return again
        except ProviderError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise map_error(exc, self.id, scope) from None
        return self._ref(sb, spec.key, launched)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        import modal

        client = await self._modal()
        try:
            sb = await modal.Sandbox.from_id.aio(ref.instance_id, client=client)
        except modal.exception.NotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001
            raise map_error(exc, self.id) from None
        code = sb.returncode
        if code is not None:
            timed_out = code == 124  # GENERIC_STATUS_TIMEOUT, as the client reports it
            return InstanceStatus(
                ref=ref,
                state=InstanceState.TERMINATED,
                ssh_user="root",
                detail=TIMEOUT_DETAIL if timed_out else f"terminated (exit {code})",
            )
        try:
            tunnels = await sb.tunnels.aio(timeout=TUNNEL_WAIT_S)
        except modal.exception.SandboxTimeoutError:
            tunnels = {}
        except Exception as exc:  # noqa: BLE001
            raise map_error(exc, self.id) from None
        tunnel = tunnels.get(22)
        if tunnel is None:
            return InstanceStatus(
                ref=ref,
                state=InstanceState.PENDING,
                ssh_user="root",
                detail="scheduled (SSH tunnel not open yet)",
            )
        host, port = tunnel.tcp_socket
        return InstanceStatus(
            ref=ref, state=InstanceState.RUNNING, host=host, ssh_port=port, ssh_user="root", detail="running"
        )

    async def terminate(self, ref: InstanceRef) -> None:
        import modal

        client = await self._modal()
        try:
            sb = await modal.Sandbox.from_id.aio(ref.instance_id, client=client)
            if sb.returncode is None:
                await sb.terminate.aio()
        except modal.exception.NotFoundError:
            return  # gone: success
        except Exception as exc:  # noqa: BLE001
            raise map_error(exc, self.id) from None

    async def aclose(self) -> None:
        client, self._client, self._app = self._client, None, None
        if client is not None:
            try:
                await client.close.aio()
            except Exception:  # noqa: BLE001, S110 — closing a dead channel must not fail teardown
                pass
