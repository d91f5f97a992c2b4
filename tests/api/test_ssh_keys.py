"""`ssh_public_keys`: one OpenSSH public key line per entry, re-serialised from the parsed key;
private keys, multi-line entries and oversized ones are a 422 naming the entry, never quoting it,
with nothing stored and no workflow started."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from providers import ssh_keys
from store.models import Instance
from tests.api.conftest import FakeWorkflows, connect_fake

URL = "/api/compute/instances"


def private(alg: str, fmt: str, **kw: Any) -> Callable[[], str]:
    return lambda: asyncssh.generate_private_key(alg, **kw).export_private_key(fmt).decode()


PRIVATE_KEYS = {
    "ed25519 OpenSSH": private("ssh-ed25519", "openssh"),
    "rsa OpenSSH": private("ssh-rsa", "openssh", key_size=2048),
    "ecdsa OpenSSH": private("ecdsa-sha2-nistp256", "openssh"),
    "rsa PEM (PKCS#1)": private("ssh-rsa", "pkcs1-pem", key_size=2048),
    "ecdsa PEM (SEC1)": private("ecdsa-sha2-nistp256", "pkcs1-pem"),
    "PKCS#8": private("ssh-ed25519", "pkcs8-pem"),
    "PKCS#8 encrypted": lambda: asyncssh.generate_private_key("ssh-rsa", key_size=2048).export_private_key(
        "pkcs8-pem", passphrase="pw").decode(),
    "PuTTY": lambda: "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: me\n"
                     "Public-Lines: 2\nAAAAC3NzaC1lZDI1NTE5AAAAIHpDVk\nPrivate-Lines: 1\nAAAAIFUPHUpVk7\n",
}


async def nothing_stored(client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine) -> None:
    assert workflows.starts == []
    with Session(engine) as s:
        assert s.exec(select(Instance)).all() == []
    assert (await client.get(URL)).json()["items"] == []


@pytest.mark.parametrize("kind", list(PRIVATE_KEYS))
async def test_a_private_key_is_refused_naming_its_entry_and_never_echoed(
        client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine, ssh_key: str,
        kind: str) -> None:
    await connect_fake(client)
    secret = PRIVATE_KEYS[kind]()
    r = await client.post(URL, json={"cloud": "fakecloud", "ssh_public_keys": [ssh_key, secret]})
    assert r.status_code == 422, r.text
    [error] = r.json()["errors"]
    assert error["loc"] == ["body", "ssh_public_keys"]
    assert "ssh_public_keys[1]: this is a private key — paste the .pub file" in error["msg"]
    body_lines = [line for line in secret.splitlines()[1:-1] if len(line) > 8]
    assert not any(line in r.text for line in body_lines)
    await nothing_stored(client, workflows, engine)


@pytest.mark.parametrize(("entry", "reason"), [
    ("{key}\nruncmd:\n  - touch /tmp/pwned", "ssh_public_keys[0]: not one OpenSSH public key line: it has a "
                                             "line break (one key per entry)"),
    ("{key}\n{key}", "it has a line break"),
    ("{key}\r\nssh-ed25519 AAAA", "it has a line break"),
    ("{key} me\x1b[2Jyou", "it has a control or invisible character"),
    ("{key} me\u202eyou", "it has a control or invisible character"),
    # 200 kB: over the per-key bound, under the request body limit (a larger body is a 413 before this)
    ("{key} " + "c" * 200_000, "ssh_public_keys[0]: too long: more than 16384 characters"),
    ("{key} " + "c" * 300, "ssh_public_keys[0]: comment longer than 256 characters"),
    ("   ", "ssh_public_keys[0]: empty"),
    ("ssh-rsa AAAAnotakey", "ssh_public_keys[0]: not an OpenSSH public key"),
    ('command="id" {key}', "ssh_public_keys[0]: not an OpenSSH public key"),
    ("ssh-rsa {blob}", "ssh_public_keys[0]: not an OpenSSH public key"),  # the type must be the key's
])
async def test_a_bad_entry_is_a_422_with_nothing_stored_and_no_workflow(
        client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine, ssh_key: str, entry: str,
        reason: str) -> None:
    await connect_fake(client)
    bare = " ".join(ssh_key.split()[:2])
    entry = entry.format(key=bare, blob=bare.split()[1])
    r = await client.post(URL, json={"cloud": "fakecloud", "ssh_public_keys": [entry]})
    assert r.status_code == 422, r.text[:500]
    assert reason in r.json()["errors"][0]["msg"]
    assert len(r.text) < 1_000  # the entry is not echoed (the 200 kB one least of all)
    await nothing_stored(client, workflows, engine)


async def test_what_is_passed_on_is_re_serialised_from_the_parsed_key(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    await connect_fake(client)
    key = asyncssh.generate_private_key("ssh-ed25519")
    blob = key.export_public_key().decode().split()[1]
    given = [f"  ssh-ed25519\t{blob}   my \t laptop  \n",  # whitespace anywhere, a trailing newline
             f"ssh-ed25519 {blob} josé@host",  # a printable non-ASCII comment is kept
             f"ssh-ed25519 {blob}"]
    r = await client.post(URL, json={"cloud": "fakecloud", "ssh_public_keys": given})
    assert r.status_code == 202, r.text
    [start] = workflows.starts
    assert start.arg.request.ssh_public_keys == [  # type: ignore[attr-defined]
        f"ssh-ed25519 {blob} my laptop", f"ssh-ed25519 {blob} josé@host", f"ssh-ed25519 {blob}"]


def test_every_key_type_round_trips() -> None:
    for alg in ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ssh-ed448"):
        line = asyncssh.generate_private_key(alg).export_public_key().decode().strip() + " a b"
        assert ssh_keys.public_key_line(line) == line
