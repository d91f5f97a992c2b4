"""Least privilege, both ways: the permission set written down for each cloud (providers/permissions.py)
covers every remote call its adapter made at its simulation during conformance
(tests/conformance/remote_calls/<cloud>.json, `_sometimes` included), and holds nothing no call uses
unless a documented reason says why. Pure: reads the committed files, starts nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from providers import connect_guide, listing, permissions, registry
from tests.conformance import remote_calls

ROOT = Path(__file__).resolve().parent.parent
RECORDED = sorted(p.stem for p in remote_calls.PINNED.glob("*.json"))
WRITTEN = {p.cloud: p for p in permissions.all_entries()}


def entry(cloud: str) -> permissions.CloudPermissions:
    p = permissions.of(cloud)
    assert p is not None, f"{cloud}: no providers/permissions/{cloud}.py"
    return p


def recorded_calls(cloud: str) -> set[str]:
    entries = remote_calls.pinned(cloud)
    calls = {c for check, cs in entries.items() if check != remote_calls.SOMETIMES for c in cs}
    return calls | set(entries.get(remote_calls.SOMETIMES, {}))


def test_every_cloud_and_the_ssh_fleet_is_written_down() -> None:
    clouds = [e.id for e in registry.BUILTIN] + [e.id for e in registry.FLEETS]
    assert sorted(WRITTEN) == sorted(clouds)
    assert set(RECORDED) <= set(WRITTEN)


def unmapped(cloud: str, seen: set[str]) -> list[str]:
    return sorted(seen - set(entry(cloud).calls))


@pytest.mark.parametrize("cloud", RECORDED)
def test_every_recorded_call_is_mapped_and_no_mapping_is_stale(cloud: str) -> None:
    p = entry(cloud)
    seen, mapped = recorded_calls(cloud), set(p.calls)
    assert not unmapped(cloud, seen), (
        f"{cloud}'s adapter makes calls providers/permissions.py does not map to permissions: "
        f"{sorted(seen - mapped)}. Say what each needs (and add it to the set), or why it needs nothing.")
    assert not mapped - seen, f"{cloud}: mapped calls the adapter no longer makes: {sorted(mapped - seen)}"


@pytest.mark.parametrize("cloud", sorted(WRITTEN))
def test_the_set_is_exactly_what_the_calls_need(cloud: str) -> None:
    p = entry(cloud)
    granted = set(p.permissions)
    for call, needs in p.calls.items():
        assert set(needs) <= granted, f"{cloud}: {call} needs {sorted(set(needs) - granted)}, not in the set"
        if not needs:
            assert p.free.get(call), f"{cloud}: {call} needs no permission, but no reason is given"
    used = {perm for needs in p.calls.values() for perm in needs}
    unused = granted - used - set(p.extra)
    assert not unused, f"{cloud}: {sorted(unused)} granted but no recorded call needs them (least privilege)"
    assert all(p.extra.values()) and set(p.extra) <= granted
    assert len(p.permissions) == len(granted), f"{cloud}: a permission listed twice"
    assert p.sources and all(p.sources), f"{cloud}: where its facts come from"


@pytest.mark.parametrize("cloud", sorted(c for c, p in WRITTEN.items() if not p.scoped))
def test_a_cloud_without_scopes_says_so(cloud: str) -> None:
    p = entry(cloud)
    assert p.kind == "none" or permissions.UNSCOPED in p.summary, cloud
    assert p.kind != "none" or p.summary.startswith("none"), cloud
    assert permissions.connect_note(cloud) and p.summary in permissions.markdown()


def test_the_documents_hold_exactly_the_set() -> None:
    """What the user pastes is the set: the policy's actions, the role's permissions, the scopes."""
    aws = json.loads(entry("aws").document)
    actions = {a for s in aws["Statement"]
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions == set(entry("aws").permissions)
    own = [s for s in aws["Statement"] if "ec2:TerminateInstances" in s["Action"]]
    assert own and all("aws:ResourceTag/gpuprov-installation" in s["Condition"]["Null"] for s in own)
    from providers.aws import TAG_INSTALLATION
    assert TAG_INSTALLATION == "gpuprov-installation"  # the tag the conditions name is the one it sets
    gcp = json.loads(entry("gcp").document)["includedPermissions"]
    assert set(gcp) == set(entry("gcp").permissions)
    assert set(json.loads(entry("azure").document)["Actions"]) == set(entry("azure").permissions)
    assert entry("oci").document.splitlines() == list(entry("oci").permissions)
    assert set(entry("digitalocean").document.split()) == set(entry("digitalocean").permissions)
    assert set(json.loads(entry("vastai").document)["api"]) == set(entry("vastai").permissions)


def test_a_new_call_without_a_mapping_is_found() -> None:
    assert unmapped("aws", recorded_calls("aws")) == []
    assert unmapped("aws", recorded_calls("aws") | {"ec2:CreateVolume"}) == ["ec2:CreateVolume"]


def test_docs_permissions_md_is_what_the_module_renders_and_the_readme_links_it() -> None:
    doc = ROOT / permissions.DOC
    assert doc.read_text() == permissions.markdown(), (
        f"{permissions.DOC} is stale: run `python -m providers.permissions > {permissions.DOC}`")
    readme = (ROOT / "README.md").read_text()
    assert permissions.README_HEADING in readme
    section = readme.split(permissions.README_HEADING, 1)[1].split("\n## ", 1)[0]
    assert f"({permissions.DOC})" in section


@pytest.mark.parametrize("cloud", registry.known())
def test_the_connect_page_ends_with_the_least_privilege_line(cloud: str) -> None:
    card = listing.of(registry.adapter_class(cloud))
    text = connect_guide.how_to(card)
    assert text.endswith(permissions.connect_note(cloud)), cloud
    assert text.startswith(card.how_to_connect)
    assert connect_guide.how_to(card, cloud) == text  # found from the listing as given by id


def test_a_short_document_is_shown_whole_on_the_connect_page() -> None:
    assert "droplet:create" in permissions.connect_note("digitalocean")
    assert "instance_write" in permissions.connect_note("vastai")
    assert permissions.DOC in permissions.connect_note("aws")  # a policy is too long: where to find it
