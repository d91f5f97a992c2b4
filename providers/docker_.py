"""Docker: a local sshd container, for trying gpuprov without any account (the clouds page's Docker
row). The official `docker` SDK (7.2.0, pinned; imported lazily) against a Docker Engine API on a unix
socket: the connection's `docker_host`, else DOCKER_HOST, else /var/run/docker.sock. Where no engine
answers, `make run` and the test session start Debian's podman serving one (providers/docker_engine.py).

The model: a machine is a container of the image `gpuprov-sshd:bookworm` (Debian + openssh-server,
built locally: no registry is reached), whose command creates the user `ubuntu`, installs exactly the
launch's public keys for it, makes host keys and execs sshd. Port 22 is published on 127.0.0.1 only,
on a port the engine picks: SSH goes to `ubuntu@127.0.0.1:<that port>`. No systemd (no k3s), no
firewall (no `--port`), no spot, no custom image; one region, `local`, and one offer.

Find-or-create: the container's name is the key (the engine refuses a second container of one name:
409, and the existing one is found), and its labels carry the installation, allocation and key —
`list_owned` filters by the installation label. Terminate removes the container by force with its
anonymous volumes (and with it whatever `exec` left running in it); a container already gone is
success.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from providers.base import (
    Capabilities,
    CloudProvider,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    ProviderError,
    SelfEnd,
    Transient,
    Unsupported,
    launch_leaving,
    launch_request,
    rank_offers,
)
from providers.credentials import Credentials, field
from providers.docker_engine import DEFAULT_SOCKET, IMAGE
from providers.listing import Listing
from providers.rest import parsing

REGION = "local"
INSTANCE_TYPE = "container"
LOGIN_USER = "ubuntu"
HOST = "127.0.0.1"  # ports are published here only, and SSH connects only here
API_VERSION = "1.41"  # what podman 4.x and Docker ≥ 20.10 both serve; pinning it skips a /version call
REQUEST_TIMEOUT_S = 30
SSH_PROBE_S = 1.0
LABEL_INSTALLATION = "gpuprov-installation"
LABEL_ALLOCATION = "gpuprov-allocation"
LABEL_KEY = "gpuprov-key"

T = TypeVar("T")
HOSTS_SETTING = "GPUPROV_DOCKER_HOSTS"  # comma-separated unix:// URLs of further engines allowed


def allowed_hosts() -> set[str]:
    """The engines a connection may name: DOCKER_HOST, the default socket, and the setting's."""
    hosts = {f"unix://{DEFAULT_SOCKET}", *(h.strip() for h in os.environ.get(HOSTS_SETTING, "").split(","))}
    if os.environ.get("DOCKER_HOST"):
        hosts.add(os.environ["DOCKER_HOST"])
    return {h for h in hosts if h}


class DockerCredentials(Credentials):
    """Where the engine is: nothing to sign up for."""

    docker_host: str = field(
        "Docker host", default="", max_length=200,
        help="unix:///path/to/docker.sock; empty: $DOCKER_HOST, else unix:///var/run/docker.sock",
    )


def sshd_command(public_keys: list[str]) -> list[str]:
    """The container's command: user `ubuntu` with exactly `public_keys`, fresh host keys, sshd."""
    import shlex

    keys = " ".join(shlex.quote(k.strip()) for k in public_keys)
    home = f"/home/{LOGIN_USER}"
    script = "\n".join([
        "set -e",
        f"id {LOGIN_USER} >/dev/null 2>&1 || useradd -m -s /bin/bash {LOGIN_USER}",
        "umask 077",
        f"mkdir -p {home}/.ssh /run/sshd",
        f"printf '%s\\n' {keys} > {home}/.ssh/authorized_keys",
        f"chown -R {LOGIN_USER}:{LOGIN_USER} {home}/.ssh",
        "ssh-keygen -A",
        "exec /usr/sbin/sshd -D -e",
    ])
    return ["/bin/sh", "-c", script]


def _created(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("Z", "+00:00")
    if "." in text:  # the engine gives nanoseconds; Python parses up to microseconds
        head, _, tail = text.partition(".")
        digits = "".join(c for c in tail if c.isdigit())
        zone = tail[len(digits):]
        text = f"{head}.{digits[:6]}{zone}"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


async def sshd_answers(port: int, wait_s: float = SSH_PROBE_S) -> bool:
    """Whether sshd greets on 127.0.0.1:`port` (the container runs before its sshd listens)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), wait_s)
    except (OSError, TimeoutError):
        return False
    try:
        banner = await asyncio.wait_for(reader.readline(), wait_s)
    except (OSError, TimeoutError):
        banner = b""
    finally:
        writer.close()
    return banner.startswith(b"SSH-")


def _name_taken(exc: Any) -> bool:
    """Docker answers a taken name with 409; podman 4.3, when two creates race past its own check,
    with a 500 whose message says the name "is already in use" (seen here)."""
    text = str(getattr(exc, "explanation", "") or "").lower()
    return exc.status_code == 409 or (exc.status_code == 500 and "already in use" in text)


class DockerProvider(CloudProvider):
    id: ClassVar[str] = "docker"
    credentials_model: ClassVar[type[DockerCredentials]] = DockerCredentials
    api_hosts: ClassVar[tuple[str, ...]] = ()
    listing: ClassVar[Listing] = Listing(
        tagline="A local sshd container; trying gpuprov without any account",
        how_to_connect=(
            "Nothing to sign up for: gpuprov talks to the Docker Engine API on this host ($DOCKER_HOST or "
            "/var/run/docker.sock). Where none runs, `make run` starts podman serving one."
        ),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Docker",
        k3s="none",
        k3s_reason="Docker containers have no systemd: k3s cannot run there (skipped)",
        ports=False,
        ports_reason="--port: a Docker machine is a local container reached on 127.0.0.1; there is no "
        "firewall to open a port",
        spot=False,
        custom_image=False,
        login_user=LOGIN_USER,
        regions=[REGION],
        create_in_flight_s=0.0,  # container names are unique: the engine refuses a second create (409)
        boot_timeout_s=120.0,  # a container starts in well under a second
        self_end=SelfEnd(
            method="n/a",
            how=("no cloud bill: a container on the user's own Docker host, never leased"),
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client: Any = None
        own = os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
        host = self._creds.docker_host or own
        if not host.startswith("unix://"):
            raise InvalidRequest("docker: docker_host must be a unix:// socket (the engine on this host)")
        if host not in allowed_hosts():
            # A connection may not point the server at any socket of its host: only at the engines
            # the administrator names (or `make run` started).
            raise InvalidRequest(f"docker: docker_host is not an engine this server allows "
                                 f"($DOCKER_HOST, unix://{DEFAULT_SOCKET}, or one in {HOSTS_SETTING})")
        self.base_url = host

    @property
    def _creds(self) -> DockerCredentials:
        assert isinstance(self.credentials, DockerCredentials)
        return self.credentials

    # ------------------------------------------------------------------ plumbing

    def _docker(self) -> Any:
        if self._client is None:
            import docker

            self._client = docker.DockerClient(base_url=self.base_url, version=API_VERSION,
                                               timeout=REQUEST_TIMEOUT_S)
        return self._client

    def _error(self, exc: Exception, *, in_doubt: bool = False) -> ProviderError:
        import docker.errors
        import requests

        if isinstance(exc, docker.errors.APIError):
            code = exc.status_code or 0
            text = str(exc.explanation or exc)[:300]
            if code >= 500 or code == 0:
                return Transient(f"docker: engine error {code}: {text}", in_doubt=in_doubt)
            return InvalidRequest(f"docker: {code}: {text}")
        if isinstance(exc, requests.exceptions.RequestException | OSError | docker.errors.DockerException):
            return Transient(f"docker: no answer from the engine at {self.base_url}: {type(exc).__name__}",
                             in_doubt=in_doubt)
        return Transient(f"docker: {type(exc).__name__}: {str(exc)[:200]}", in_doubt=in_doubt)

    async def _run(self, fn: Callable[[], T], *, in_doubt: bool = False) -> T:
        """One blocking SDK call on a thread, its failure as a contract error."""
        try:
            return await asyncio.to_thread(fn)
        except ProviderError:
            raise
        except Exception as exc:  # noqa: BLE001 — every SDK failure is mapped
            raise self._error(exc, in_doubt=in_doubt) from None

    def _ref(self, c: Any) -> InstanceRef:
        labels = c.attrs.get("Config", {}).get("Labels") or c.labels or {}
        return InstanceRef(provider=self.id, instance_id=c.id, key=str(labels.get(LABEL_KEY) or c.name),
                           region=REGION, created_at=_created(c.attrs.get("Created")))

    def _lookup(self, name: str) -> Any:
        """The container named `name` (or with that id), None when there is none."""
        import docker.errors

        try:
            return self._docker().containers.get(name)
        except docker.errors.NotFound:
            return None

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        version = await self._run(lambda: self._docker().version())
        names = [c.get("Name") for c in version.get("Components") or [] if c.get("Name")]
        engine = names[0] if names else "Docker Engine"
        return f"{engine} {version.get('Version', '?')} at {self.base_url}"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        info = await self._run(lambda: self._docker().info())
        if query.spot:
            return []
        cpus = int(info.get("NCPU") or os.cpu_count() or 1)
        mem = float(info.get("MemTotal") or 0) / 2**30
        offer = Offer(provider=self.id, instance_type=INSTANCE_TYPE, gpu=None, vcpus=cpus,
                      memory_gib=round(mem, 1), region=REGION, price_per_hour=0.0)
        return rank_offers([offer], query)

    async def list_owned(self) -> list[InstanceRef]:
        return await self._ours_where({"label": f"{LABEL_INSTALLATION}={self.installation_id}"})

    async def find_all(self, key: str) -> list[InstanceRef]:
        return await self._ours_where({"label": [f"{LABEL_INSTALLATION}={self.installation_id}",
                                                 f"{LABEL_KEY}={key}"]})

    async def _ours_where(self, filters: dict[str, Any]) -> list[InstanceRef]:
        """Our containers the filters select. The SDK lists ids, then inspects each: one removed in
        between (a teardown finishing meanwhile) is gone, not a failed listing — it failed the
        sweep's and an acceptance run's listings under `make fuzz`'s concurrent runs."""
        found = await self._run(lambda: self._docker().containers.list(all=True, filters=filters,
                                                                        ignore_removed=True))
        return [self._ref(c) for c in found]

    async def _ours(self, key: str) -> Any:
        c = await self._run(lambda: self._lookup(key))
        if c is None:
            return None
        if (c.labels or {}).get(LABEL_INSTALLATION) != self.installation_id:
            # Never adopt someone else's container as ours.
            raise InvalidRequest(f"docker: container name {key!r} is taken by something not ours")
        return c

    async def _started(self, c: Any) -> InstanceRef:
        import docker.errors

        if c.status != "created":
            return self._ref(c)
        # Made, but the start was never sent or its answer was lost (a worker killed mid-create).
        try:
            await asyncio.to_thread(c.start)
        except docker.errors.APIError as exc:
            if "address already in use" not in str(exc.explanation or exc):
                # A create racing under the same key (its twin found it created too) may be starting
                # it this moment, and the engine refuses a second start meanwhile (podman: "must be
                # in Created or Stopped state to be started: container state improper"). Started by
                # either is what this create wanted.
                await self._run(c.reload)
                if c.status != "created":
                    return self._ref(c)
                raise self._error(exc) from None
            # The engine chose the published SSH port at create (podman does), and by this start
            # something else holds it: every later start would fail the same way. The container
            # never ran: remove it, and the create's retry makes another on a port free now.
            await self._run(lambda: c.remove(force=True))
            raise Transient("docker: the port the engine chose for the container was taken before "
                            "its start; the container was removed and is made again") from None
        except Exception as exc:  # noqa: BLE001 — every SDK failure is mapped
            raise self._error(exc) from None
        return self._ref(c)

    async def _racing_twin(self, key: str) -> Any:
        """The container a concurrent create under `key` made. podman reserves the name before the
        container is listed (seen here: a conflict answered, then a listing without it), so look
        a few times over about 3 s before calling the conflict unexplained."""
        for delay in (0.0, 0.1, 0.2, 0.4, 0.8, 1.5):
            await asyncio.sleep(delay)
            found = await self._ours(key)
            if found is not None:
                return found
        return None

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        import docker.errors

        if spec.k3s or spec.user_data:
            raise Unsupported("Docker containers have no cloud-init and no systemd: no user data, no k3s")
        if offer.instance_type != INSTANCE_TYPE:
            raise InvalidRequest(f"docker: no instance type {offer.instance_type!r} (only {INSTANCE_TYPE!r})")
        found = await self._ours(spec.key)
        if found is not None:
            return await self._started(found)
        labels = {LABEL_INSTALLATION: self.installation_id, LABEL_ALLOCATION: spec.owner.allocation_id,
                  LABEL_KEY: spec.key}
        command = sshd_command(spec.ssh_public_keys)

        def create() -> Any:
            return self._docker().containers.create(
                IMAGE, command, name=spec.key, labels=labels, hostname=spec.key,
                ports={"22/tcp": (HOST, None)}, detach=True,
            )

        try:
            with launch_request():
                await launch_leaving()  # not sent over httpx: mark the launch leaving ourselves
                c = await asyncio.to_thread(create)
        except docker.errors.APIError as exc:
            if _name_taken(exc):  # a create under this key got there first: find it
                again = await self._racing_twin(spec.key)
                if again is None:
                    raise Transient("docker: name conflict, yet no container of that name") from None
                return await self._started(again)
            if exc.status_code == 404 and "image" in str(exc.explanation or "").lower():
                raise InvalidRequest(
                    f"docker: the engine has no image {IMAGE} (`make run` builds it)"
                ) from None
            raise self._error(exc, in_doubt=True) from None
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc, in_doubt=True) from None
        return await self._started(c)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        c = await self._run(lambda: self._lookup(ref.instance_id))
        if c is None:
            return None
        state = c.attrs.get("State") or {}
        bound = ((c.attrs.get("NetworkSettings") or {}).get("Ports") or {}).get("22/tcp") or []
        port = next((int(b["HostPort"]) for b in bound if b.get("HostPort")), None)
        ended = f"{c.status} (exit {state.get('ExitCode')})"
        if state.get("Error"):
            ended += f": {str(state['Error'])[:200]}"
        return await self._status(ref, c.status, port, ended)

    async def _status(self, ref: InstanceRef, status: str, port: int | None, ended: str) -> InstanceStatus:
        """A container's status from its engine status word and published SSH port, as the inspect
        (`get`) and the listing (`list_machines`) both tell them; `ended` is the detail of an exited one."""
        if status == "running":
            if port is None:
                return InstanceStatus(ref=ref, state=InstanceState.PENDING, ssh_user=LOGIN_USER,
                                      instance_type=INSTANCE_TYPE,
                                      detail="running; port 22 not published yet")
            if not await sshd_answers(port):
                return InstanceStatus(ref=ref, state=InstanceState.PENDING, ssh_user=LOGIN_USER,
                                      instance_type=INSTANCE_TYPE, detail="running; sshd not answering yet")
            return InstanceStatus(ref=ref, state=InstanceState.RUNNING, host=HOST, ssh_port=port,
                                  ssh_user=LOGIN_USER, instance_type=INSTANCE_TYPE, detail="running")
        if status in ("created", "restarting"):
            return InstanceStatus(ref=ref, state=InstanceState.PENDING, ssh_user=LOGIN_USER,
                                  instance_type=INSTANCE_TYPE, detail=status)
        if status == "removing":
            return InstanceStatus(ref=ref, state=InstanceState.TERMINATING, ssh_user=LOGIN_USER,
                                  instance_type=INSTANCE_TYPE, detail=status)
        if status == "paused":
            return InstanceStatus(ref=ref, state=InstanceState.STOPPED, ssh_user=LOGIN_USER,
                                  instance_type=INSTANCE_TYPE, detail=status)
        # exited / dead: sshd is gone, the container only lingers
        return InstanceStatus(ref=ref, state=InstanceState.ERROR, ssh_user=LOGIN_USER,
                              instance_type=INSTANCE_TYPE, detail=ended)

    async def list_machines(self) -> list[InstanceStatus]:
        """One GET /containers/json (the engine's listing, not paged; no inspect per container): its
        entries carry the status word and the published ports. The sshd probe `get` makes is a local
        TCP connect, not an engine call; the probes run side by side."""
        flt = {"label": f"{LABEL_INSTALLATION}={self.installation_id}"}
        rows = await self._run(lambda: self._docker().api.containers(all=True, filters=flt))
        with parsing(self.id, "container listing"):
            listed = [self._listed(r) for r in rows
                      if (r.get("Labels") or {}).get(LABEL_INSTALLATION) == self.installation_id]
        return list(await asyncio.gather(*(self._status(*one) for one in listed)))

    def _listed(self, row: dict[str, Any]) -> tuple[InstanceRef, str, int | None, str]:
        """(ref, status word, published SSH port, detail if ended) of one listing entry."""
        labels = row.get("Labels") or {}
        names = row.get("Names") or []
        name = str(names[0]).lstrip("/") if names else ""
        created = row.get("Created")  # epoch seconds here; the inspect's ISO text in `get`
        when = datetime.fromtimestamp(created, UTC) if isinstance(created, int | float) else _created(created)
        ref = InstanceRef(provider=self.id, instance_id=str(row["Id"]),
                          key=str(labels.get(LABEL_KEY) or name), region=REGION, created_at=when)
        port = next((int(p["PublicPort"]) for p in row.get("Ports") or []
                     if p.get("PrivatePort") == 22 and p.get("Type", "tcp") == "tcp" and p.get("PublicPort")),
                    None)
        status = str(row.get("State") or "")
        return ref, status, port, str(row.get("Status") or status)

    async def terminate(self, ref: InstanceRef) -> None:
        import docker.errors

        def remove() -> None:
            try:
                self._docker().api.remove_container(ref.instance_id, force=True, v=True)
            except docker.errors.NotFound:
                return  # gone: success

        await self._run(remove)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await asyncio.to_thread(client.close)
            except Exception:  # noqa: BLE001, S110 — closing must not fail teardown
                pass
