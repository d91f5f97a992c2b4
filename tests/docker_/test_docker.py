"""The Docker adapter on the official `docker` SDK against a real Docker Engine API (podman's, where
no Docker runs: tests/docker_/conftest.py): SSH as `ubuntu` with exactly the keys sent, published on
127.0.0.1 only, nothing left behind by terminate; and the conformance checks that apply to a local
engine, through a fault-injecting proxy in front of its socket (tests/docker_/fault_proxy.py), each
with the engine calls it made compared with the pinned ones (tests/conformance/remote_calls.py:
remote_calls/docker.json; GPUPROV_RECORD_CALLS=1 records them), so a `docker` SDK upgrade or an
adapter change that calls the engine differently fails here."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncssh
import pytest

from fakeclouds.faults import FaultRule
from providers.base import (
    CloudProvider,
    InstanceRef,
    InstanceState,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    Ownership,
    Transient,
    Unsupported,
)
from providers.docker_ import (
    HOST,
    HOSTS_SETTING,
    LABEL_INSTALLATION,
    LABEL_KEY,
    LOGIN_USER,
    DockerCredentials,
    DockerProvider,
    _created,
    sshd_command,
)
from providers.docker_engine import IMAGE
from tests.conformance import checks, remote_calls
from tests.conformance.clouds import Harness, new_installation_id
from tests.docker_.fault_proxy import FACADE, FaultProxy, call_name, op_of

USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
OTHER_KEY = asyncssh.generate_private_key("ssh-ed25519")


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


def provider(url: str, installation: str | None = None) -> DockerProvider:
    creds = DockerCredentials(docker_host=url)
    return DockerProvider(creds, installation_id=installation or new_installation_id())


def spec(p: DockerProvider, key: str | None = None) -> LaunchSpec:
    key = key or f"dk-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key),
                      ssh_public_keys=[public(USER_KEY)])


def engine_client(url: str) -> Any:
    import docker

    return docker.DockerClient(base_url=url, version="1.41", timeout=30)


async def wait_running(p: DockerProvider, ref: Any, within_s: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        st = await p.get(ref)
        if st is not None and st.state == InstanceState.RUNNING:
            return st
        assert asyncio.get_running_loop().time() < deadline, f"not running: {st}"
        await asyncio.sleep(0.1)


async def created_never_started(p: DockerProvider, client: Any) -> tuple[Any, LaunchSpec, Any]:
    """What a worker killed mid-create leaves: a container made under a new key, never started.
    Returns the offer and the spec a retried create sends, and the container."""
    [offer] = await p.offers(OfferQuery())
    s = spec(p)

    async def killed_before_the_start(c: Any) -> Any:
        return p._ref(c)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(p, "_started", killed_before_the_start)
        await p.create(offer, s)
    [made] = client.containers.list(all=True, filters={"label": f"{LABEL_KEY}={s.key}"})
    assert made.status == "created"
    return offer, s, made


# ------------------------------------------------------------------ pure


def test_the_command_installs_exactly_the_keys_for_ubuntu_quoted() -> None:
    cmd = sshd_command(["ssh-ed25519 AAAA x'; rm -rf / #"])
    script = cmd[-1]
    assert cmd[:2] == ["/bin/sh", "-c"]
    assert "'ssh-ed25519 AAAA x'\"'\"'; rm -rf / #'" in script  # one argument, never shell code
    assert f"/home/{LOGIN_USER}/.ssh/authorized_keys" in script
    assert script.rstrip().endswith("exec /usr/sbin/sshd -D -e")


def test_the_engines_creation_time_is_read_to_the_microsecond_in_utc() -> None:
    assert _created("2026-12-02T07:47:00.946104553Z") == datetime(2026, 12, 2, 7, 47, 0, 946104, UTC)
    assert _created("2026-12-02T07:47:00.946104553") == datetime(2026, 12, 2, 7, 47, 0, 946104, UTC)
    assert _created("2026-12-02T08:47:00+01:00") == datetime(2026, 12, 2, 7, 47, 0, tzinfo=UTC)
    assert _created("") is None and _created("yesterday") is None


def test_a_connection_names_only_an_engine_the_server_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv(HOSTS_SETTING, "unix:///tmp/allowed.sock")
    with pytest.raises(InvalidRequest, match="unix://"):
        provider("tcp://0.0.0.0:2375")
    with pytest.raises(InvalidRequest, match="not an engine this server allows"):
        provider("unix:///run/postgresql/.s.PGSQL.5432")
    assert provider("unix:///tmp/allowed.sock").base_url == "unix:///tmp/allowed.sock"
    assert provider("").base_url == "unix:///var/run/docker.sock"  # empty: the server's own engine
    monkeypatch.setenv("DOCKER_HOST", "unix:///tmp/mine.sock")
    assert provider("").base_url == "unix:///tmp/mine.sock"
    assert provider("unix:///tmp/mine.sock").base_url == "unix:///tmp/mine.sock"


def test_the_proxy_names_each_engine_call_by_its_op() -> None:
    assert op_of("POST", "/v1.41/containers/create") == "create"
    assert op_of("GET", "/v1.41/containers/json") == "list"
    assert op_of("GET", "/v1.41/containers/abc/json") == "get"
    assert op_of("DELETE", "/v1.41/containers/abc") == "terminate"
    assert op_of("POST", "/v1.41/containers/abc/start") == "start"
    assert op_of("GET", "/v1.41/info") == "offers"


def test_the_proxy_names_each_engine_call_by_its_path_template() -> None:
    assert call_name("POST", "/v1.41/containers/create?name=dk-1") == "POST /containers/create"
    assert call_name("GET", "/v1.41/containers/json?all=1&filters=%7B%7D") == "GET /containers/json"
    assert call_name("GET", "/v1.41/containers/4f0c9e/json") == "GET /containers/{id}/json"
    assert call_name("GET", "/v1.45/containers/dk-abc/json") == "GET /containers/{id}/json"
    assert call_name("POST", "/v1.41/containers/4f0c9e/start") == "POST /containers/{id}/start"
    assert call_name("DELETE", "/v1.41/containers/4f0c9e?force=True&v=True") == "DELETE /containers/{id}"
    assert call_name("GET", "/v1.41/info") == "GET /info" and call_name("GET", "/_ping") == "GET /_ping"
    assert call_name("GET", "/v1.41/images/localhost/gpuprov-sshd:bookworm/json") == "GET /images/{name}/json"
    assert call_name("GET", "/v1.41/images/json") == "GET /images/json"
    assert call_name("POST", "/v1.41/exec/9a1b/start") == "POST /exec/{id}/start"


def test_a_docker_call_not_pinned_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pins are compared, not skipped: docker.json holds every check run here."""
    monkeypatch.delenv(remote_calls.RECORD, raising=False)
    pinned = remote_calls.pinned("docker")
    assert {c.__name__.removeprefix("check_") for c in APPLY} | {LOST_CREATE_ANSWER} <= set(pinned)
    with pytest.raises(AssertionError, match=r"new \['GET /images/\{name\}/json'\], no longer \[\]"):
        remote_calls.compare("docker", "lifecycle", [*pinned["lifecycle"], "GET /images/{name}/json"])


# ------------------------------------------------------------------ against the engine


async def test_up_logs_in_with_the_users_key_and_down_leaves_nothing(docker_engine_url: str) -> None:
    p = provider(docker_engine_url)
    async with p:
        [offer] = await p.offers(OfferQuery())
        assert (offer.region, offer.instance_type, offer.spot) == ("local", "container", False)
        s = spec(p)
        ref = await p.create(offer, s)
        try:
            st = await wait_running(p, ref)
            assert (st.host, st.ssh_user) == (HOST, LOGIN_USER) and st.ssh_port not in (0, 22)
            async with asyncssh.connect(st.host, port=st.ssh_port, username=LOGIN_USER,
                                        client_keys=[USER_KEY], known_hosts=None) as conn:
                out = await conn.run("id -un; cat ~/.ssh/authorized_keys", check=True)
            assert str(out.stdout).split("\n")[0] == LOGIN_USER
            assert str(out.stdout).split("\n")[1].strip() == public(USER_KEY)
            with pytest.raises(asyncssh.PermissionDenied):
                await asyncssh.connect(st.host, port=st.ssh_port, username=LOGIN_USER,
                                       client_keys=[OTHER_KEY], known_hosts=None)
            # Published on the loopback only.
            c = engine_client(docker_engine_url).containers.get(ref.instance_id)
            bound = c.attrs["HostConfig"]["PortBindings"]["22/tcp"]
            assert [b["HostIp"] for b in bound] == ["127.0.0.1"]
            assert c.name == s.key and c.labels[LABEL_KEY] == s.key
            assert [r.instance_id for r in await p.list_owned()] == [ref.instance_id]
        finally:
            await p.terminate(ref)
        assert await p.get(ref) is None
        assert await p.list_owned() == []
        left = engine_client(docker_engine_url).containers.list(all=True, filters={"name": s.key})
        assert left == [], "terminate left the container"
        await p.terminate(ref)  # gone already: success


async def test_a_name_taken_by_a_container_not_ours_is_refused(docker_engine_url: str) -> None:
    ours, theirs = provider(docker_engine_url), provider(docker_engine_url)
    async with ours, theirs:
        [offer] = await ours.offers(OfferQuery())
        s = spec(theirs)
        ref = await theirs.create(offer, s)
        try:
            with pytest.raises(InvalidRequest, match="not ours"):
                await ours.create(offer, s.model_copy(update={"owner": Ownership(
                    installation_id=ours.installation_id, allocation_id="x")}))
            assert await ours.list_owned() == []
        finally:
            await theirs.terminate(ref)


async def test_racing_creates_under_one_key_make_one_container(docker_engine_url: str) -> None:
    p = provider(docker_engine_url)
    async with p:
        [offer] = await p.offers(OfferQuery())
        s = spec(p)
        refs = await asyncio.gather(*(p.create(offer, s) for _ in range(3)))
        try:
            assert len({r.instance_id for r in refs}) == 1
            assert [r.instance_id for r in await p.find_all(s.key)] == [refs[0].instance_id]
        finally:
            await p.terminate(refs[0])
        assert await p.find_all(s.key) == []


async def test_a_start_refused_while_a_racing_create_starts_the_container_returns_that_container(
        docker_engine_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Racing creates under one key both find the container created; the first start wins, and the
    engine refuses the other while the first is under way (a fresh-clone run saw podman answer 500
    "container state improper" in test_racing_creates_under_one_key_make_one_container). That create
    returns the started container rather than failing. The race, made certain: the twin's start runs
    just before ours (FakeTwinStartsFirst), and ours is refused with podman's answer."""
    import docker.errors
    import requests
    from docker.models.containers import Container

    p = provider(docker_engine_url)
    client = engine_client(docker_engine_url)
    async with p:
        offer, s, made = await created_never_started(p, client)
        real_start = Container.start

        def fake_twin_starts_first(self: Container, **kwargs: Any) -> None:
            real_start(self, **kwargs)  # the twin's start
            refused = requests.Response()
            refused.status_code = 500
            raise docker.errors.APIError("500 Server Error", response=refused, explanation=(
                f"container {self.id} must be in Created or Stopped state to be started: "
                "container state improper"))

        monkeypatch.setattr(Container, "start", fake_twin_starts_first)
        ref = await p.create(offer, s)
        monkeypatch.undo()
        try:
            assert ref.instance_id == made.id
            await wait_running(p, ref)
            assert [r.instance_id for r in await p.find_all(s.key)] == [made.id]
        finally:
            await p.terminate(ref)
        assert await p.find_all(s.key) == []


async def test_a_created_container_whose_port_was_taken_before_its_start_is_made_again(
        docker_engine_url: str) -> None:
    """A worker killed mid-create leaves the container created, never started, its SSH port chosen by
    the engine at create (podman chooses then). Something else takes that port before the retry
    starts it (a fresh-clone run saw an ephemeral local port do so): that start can never succeed.
    The retry removes the container and says so (Transient); the next one makes one that runs."""
    p = provider(docker_engine_url)
    client = engine_client(docker_engine_url)
    async with p:
        offer, s, made = await created_never_started(p, client)
        port = int(made.attrs["HostConfig"]["PortBindings"]["22/tcp"][0]["HostPort"])
        with socket.socket() as holder:
            holder.bind((HOST, port))
            holder.listen()
            with pytest.raises(Transient, match="taken before its start"):
                await p.create(offer, s)
            assert client.containers.list(all=True, filters={"label": f"{LABEL_KEY}={s.key}"}) == []
            ref = await p.create(offer, s)
            try:
                st = await wait_running(p, ref)
                assert st.ssh_port not in (None, port), st
            finally:
                await p.terminate(ref)
        assert await p.find_all(s.key) == []


async def test_a_container_removed_while_listing_is_gone_not_a_failed_listing(
        docker_engine_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK lists the containers' ids, then inspects each. A teardown that removes one in between
    leaves it out of the listing; it failed the whole listing (the sweep's, an acceptance run's
    leftovers check) under `make fuzz`'s concurrent runs."""
    import docker.errors
    import docker.models.containers as models

    p = provider(docker_engine_url)
    client = engine_client(docker_engine_url)
    key = f"dk-{uuid.uuid4().hex[:10]}"
    labels = {LABEL_INSTALLATION: p.installation_id, LABEL_KEY: key}
    made = [client.containers.create(IMAGE, command=["true"], labels=labels, name=f"{key}-{n}")
            for n in range(2)]
    inspect, removed = models.ContainerCollection.get, []

    def removed_before_its_inspect(self: Any, container_id: str) -> Any:
        if not removed:  # the first container the listing inspects goes just before
            removed.append(container_id)
            client.api.remove_container(container_id, force=True)
        return inspect(self, container_id)

    monkeypatch.setattr(models.ContainerCollection, "get", removed_before_its_inspect)
    try:
        async with p:
            listed, by_key = await p.list_owned(), await p.find_all(key)
    finally:
        monkeypatch.undo()
        for c in made:
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)
    assert len(removed) == 1
    [left] = [c.id for c in made if c.id not in removed]
    assert [r.instance_id for r in listed] == [left] and [r.instance_id for r in by_key] == [left]


async def test_user_data_and_k3s_are_refused_before_anything_is_made(docker_engine_url: str) -> None:
    p = provider(docker_engine_url)
    async with p:
        [offer] = await p.offers(OfferQuery())
        for extra in ({"k3s": True}, {"user_data": "#cloud-config\n"}):
            s = spec(p).model_copy(update=extra)
            with pytest.raises(Unsupported):
                await p.create(offer, s)
        assert await p.list_owned() == []


async def test_an_engine_that_does_not_answer_is_transient(tmp_path: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOSTS_SETTING, f"unix://{tmp_path}/nothing.sock")
    p = provider(f"unix://{tmp_path}/nothing.sock")
    async with p:
        with pytest.raises(Transient, match="no answer"):
            await p.list_owned()


# ------------------------------------------------------------------ conformance, through the proxy


class ProxyAdmin:
    """The harness's admin for a real engine: faults go to the proxy, machines are the engine's."""

    def __init__(self, proxy: FaultProxy, engine_url: str) -> None:
        self.proxy, self.engine = proxy, engine_client(engine_url)

    def add_fault(self, cloud: str, op: str, kind: str, times: int = 1, **params: Any) -> None:
        rule = FaultRule.build(FACADE, op, kind, times, facades=[FACADE], **params)
        self.proxy.call(lambda: self.proxy.book.add(rule))

    def clear_faults(self) -> None:
        self.proxy.call(self.proxy.book.clear)

    def clear_calls(self) -> None:
        self.proxy.clear_calls()

    def calls(self) -> dict[str, list[str]]:
        """As a simulation's admin answers: per facade, the calls made since `clear_calls`."""
        return {FACADE: self.proxy.call_names()}

    def machines(self) -> list[dict[str, str]]:
        return [{"id": c.id} for c in self.engine.containers.list(all=True)]

    def side_resources(self) -> list[dict[str, str]]:
        return []  # a container has none


@dataclass  # a field's default overridden: without it Harness' __init__ set False on every instance
class DockerHarness(Harness):
    # A container's sshd answers within milliseconds of its start: on a loaded machine the first
    # look after create already finds it running (seen in fresh-clone runs), and nothing here can
    # hold a real engine's boot.
    boots_before_first_look: bool = True

    async def create_booting(self, p: CloudProvider, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        return await p.create(offer, spec)  # a real engine's boot: nothing holds it

    async def boot_now(self, ref: InstanceRef) -> None:
        pass

    def provider(self, *, installation_id: str | None = None, token: str | None = None) -> DockerProvider:
        return provider(self.server, installation_id or self.installation_id)


def test_the_engines_harness_lets_the_first_look_find_it_running() -> None:
    """The lifecycle check's first look may find a real engine's container running already (the
    flag was a class attribute that Harness' own __init__ shadowed: the check failed on it twice)."""
    assert DockerHarness(cloud="docker", server=None, admin=None).boots_before_first_look


# Which of checks.ALL_CHECKS apply to a local engine; the others, and why not.
APPLY = [
    checks.check_create_idempotent,
    checks.check_lifecycle,
    checks.check_list_owned,
    checks.check_server_error,
    checks.check_unsupported,
    checks.check_release,
    checks.check_list_owned_without_allocation,
    checks.check_list_owned_reports_leftover_side_resources,
    checks.check_spot,
    checks.check_launch_send_is_marked,
]
NOT_APPLICABLE = {
    checks.check_verify: "no credentials: nothing to refuse "
    "(a dead socket: test_an_engine_that_does_not_answer_is_transient)",
    checks.check_offers: "one offer, free (price 0; the check wants > 0): test_up_logs_in_…",
    checks.check_capacity_and_quota: "a local engine has no capacity or quota to run out of",
    checks.check_rate_limit: "a local engine has no rate limit",
    checks.check_find_all_and_terminate_by_key: "reads the simulation's facade; racing creates: "
    "test_racing_creates_under_one_key_make_one_container",
}


def test_every_conformance_check_is_run_or_said_not_to_apply() -> None:
    assert set(APPLY) | set(NOT_APPLICABLE) == set(checks.ALL_CHECKS)
    assert not set(APPLY) & set(NOT_APPLICABLE)


@pytest.fixture
def harness(fault_proxy: FaultProxy, docker_engine_url: str) -> Iterator[DockerHarness]:
    admin = ProxyAdmin(fault_proxy, docker_engine_url)
    yield DockerHarness(cloud="docker", server=fault_proxy.base_url, admin=admin)
    admin.clear_faults()


LOST_CREATE_ANSWER = "lost_create_answer"  # test_a_lost_create_answer_…'s entry in docker.json


async def compare_calls(harness: DockerHarness, check: str) -> None:
    """The engine calls made since the last `clear_calls`, against the pinned ones (remote_calls.py)."""
    seen = await harness.admin_do("calls")
    remote_calls.compare(harness.cloud, check, remote_calls.named(seen, harness.cloud))


@pytest.mark.parametrize("check", APPLY, ids=lambda c: c.__name__.removeprefix("check_"))
async def test_conformance_through_the_fault_proxy(harness: DockerHarness, check: checks.Check) -> None:
    await harness.admin_do("clear_calls")
    await check(harness)
    await compare_calls(harness, check.__name__.removeprefix("check_"))


class ChattyFakeDockerProvider(DockerProvider):
    """Changed on purpose: reads the image before answering offers, as an SDK upgrade might."""

    async def offers(self, query: OfferQuery) -> list[Any]:
        await self._run(lambda: self._docker().images.get(IMAGE))
        return await super().offers(query)


async def test_pinned_calls_catch_an_adapter_that_calls_the_engine_differently(
        harness: DockerHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(remote_calls.RECORD, raising=False)
    await harness.admin_do("clear_calls")
    p = ChattyFakeDockerProvider(DockerCredentials(docker_host=harness.server),
                                 installation_id=harness.installation_id)
    async with p:
        assert await p.offers(OfferQuery(spot=True)) == []  # what check_spot asks
    with pytest.raises(AssertionError, match=r"new \['GET /images/\{name\}/json'\], no longer \[\]"):
        await compare_calls(harness, "spot")


async def test_a_lost_create_answer_still_made_the_container(harness: DockerHarness,
                                                           fault_proxy: FaultProxy) -> None:
    """The proxy really loses the answer after the engine made the container (not a refusal)."""
    await harness.admin_do("clear_calls")
    p = harness.provider()
    async with p:
        [offer] = await p.offers(OfferQuery())
        s = spec(p)
        await harness.add_fault("create", "lose_response")
        with pytest.raises(Transient) as exc:
            await p.create(offer, s)
        assert exc.value.in_doubt
        found = await p.find(s.key)
        assert found is not None, "the engine made it; only the answer was lost"
        again = await p.create(offer, s)
        assert again.instance_id == found.instance_id
        await wait_running(p, again)  # the retry also started it
        await p.terminate(again)
        assert await p.find(s.key) is None
    assert IMAGE
    await compare_calls(harness, LOST_CREATE_ANSWER)
