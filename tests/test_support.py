"""Support status comes from acceptance results only (providers/support.py): `supported` needs a
passing real-account run on the current adapter version; a simulated pass is `simulated`; the latest
failing run is `failing`; a run on an older adapter does not count. Pure: no Temporal, no network."""

from __future__ import annotations

import ast
import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from providers import registry, support

CLOUD = "somecloud"  # status() takes the version as given: no adapter needed
V1, V2 = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def run(account: str, *outcomes: str, version: str = V1, hours: int = 0,
        **extra: Any) -> support.AcceptanceResult:
    steps = [{"name": f"step{i}", "outcome": o, "seconds": 1.5, "detail": None}
             for i, o in enumerate(outcomes)]
    return support.AcceptanceResult.model_validate(
        {"cloud": CLOUD, "adapter_version": version, "account": account, "steps": steps,
         "started_at": (T0 + timedelta(hours=hours)).isoformat(), **extra})


def status(*results: support.AcceptanceResult, version: str = V1) -> support.SupportStatus:
    return support.status(CLOUD, list(results), version=version)


def registered() -> list[str]:
    """The registry's clouds — not a test's own fake, which another test of the same worker may have
    registered (register_for_tests) and which has no registry entry."""
    return [e.id for e in registry.entries()]


def test_no_run_is_untested() -> None:
    s = status()
    assert (s.status, s.last_run_at, s.adapter_version) == ("untested", None, V1)
    assert "no acceptance run" in s.detail


def test_a_passing_real_account_run_is_supported() -> None:
    s = status(run("real", "passed", "passed"))
    assert s.status == "supported" and s.last_run_at == T0


def test_a_simulated_pass_is_simulated_never_supported() -> None:
    s = status(run("simulated", "passed", "passed"), run("simulated", "passed", hours=1))
    assert s.status == "simulated" and s.last_run_at == T0 + timedelta(hours=1)
    assert "simulation" in s.detail


def test_the_latest_run_failing_is_failing_with_its_step() -> None:
    s = status(run("real", "passed", "passed"), run("real", "passed", "failed", "not_run", hours=1))
    assert s.status == "failing" and "step1" in s.detail and s.last_run_at == T0 + timedelta(hours=1)


def test_a_real_run_failing_after_a_simulated_pass_is_failing() -> None:
    s = status(run("simulated", "passed"), run("real", "failed", hours=1))
    assert s.status == "failing" and "step0" in s.detail


def test_a_later_pass_after_a_failure_counts() -> None:
    assert status(run("real", "failed"), run("real", "passed", hours=1)).status == "supported"
    assert status(run("real", "failed"), run("simulated", "passed", hours=1)).status == "simulated"


def test_results_are_ordered_by_start_not_by_position() -> None:
    assert status(run("real", "passed", hours=2), run("real", "failed", hours=1)).status == "supported"


def test_a_run_on_an_older_adapter_does_not_count() -> None:
    s = status(run("real", "passed", version=V1), version=V2)
    assert s.status == "untested" and s.adapter_version == V2 and s.last_run_at is None
    assert s.detail.startswith("untested (last run on an older adapter")
    # a current-version run counts, the older one is ignored either way
    assert status(run("real", "failed", version=V1, hours=1), run("simulated", "passed", version=V2),
                  version=V2).status == "simulated"


def test_an_incomplete_run_counts_neither_way() -> None:
    assert status(run("real", "passed", "not_run")).status == "untested"
    assert status(run("simulated", "passed"), run("real", "passed", "not_run", hours=1)).status == "simulated"


def test_a_result_with_a_credential_or_any_unknown_field_is_refused() -> None:
    for extra in ({"api_key": "secret"}, {"token": "t"}, {"credentials": {"k": "v"}}):
        with pytest.raises(ValidationError):
            run("real", "passed", **extra)
    steps = [{"name": "connect", "outcome": "passed", "seconds": 1, "password": "p"}]
    with pytest.raises(ValidationError):
        support.AcceptanceResult.model_validate({"cloud": CLOUD, "adapter_version": V1, "account": "real",
                                                  "steps": steps, "started_at": T0.isoformat()})
    text = run("real", "passed").model_dump_json()
    with pytest.raises(ValidationError):
        support.parse_results(f"[{text[:-1]}, \"secret_key\": \"x\"}}]")


def test_the_account_is_a_fingerprint_at_most_and_never_a_flag_but_real_or_simulated() -> None:
    assert run("real", "passed", account_fingerprint="0123abcd").account_fingerprint == "0123abcd"
    for bad in ("AKIAIOSFODNN7EXAMPLE", "sk-live-123", "short"):
        with pytest.raises(ValidationError):
            run("real", "passed", account_fingerprint=bad)
    with pytest.raises(ValidationError):
        run("production", "passed")
    assert set(support.AcceptanceResult.model_fields) == {
        "cloud", "adapter_version", "account", "steps", "started_at", "account_fingerprint"}


def test_results_round_trip_through_the_file_format(tmp_path: Path) -> None:
    results = [run("simulated", "passed"), run("real", "failed", hours=1)]
    path = tmp_path / "results.json"
    path.write_text(support.dump(results))
    assert support.load(path) == results


# --------------------------------------------------------------------------- account kind

HOSTS = ("api.cloud.example",)


@pytest.mark.parametrize("endpoint", [None, "https://api.cloud.example", "https://API.cloud.example/v1/",
                                      "https://api.cloud.example:443/v1"])
def test_the_documented_host_or_the_default_is_a_real_account(endpoint: str | None) -> None:
    assert support.account_kind(endpoint, HOSTS) == "real"


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8765/lambda", "https://127.0.0.1:8766/x",
                                      "https://localhost/v1", "http://[::1]:8765", "http://api.cloud.example",
                                      "https://api.cloud.example:8443", "https://proxy.corp.example/cloud",
                                      "unix:///var/run/docker.sock", "not a url"])
def test_loopback_or_any_other_endpoint_is_simulated(endpoint: str) -> None:
    assert support.account_kind(endpoint, HOSTS) == "simulated"


def test_a_cloud_without_documented_hosts_is_never_a_real_account() -> None:
    assert support.account_kind(None, ()) == "simulated"


def test_account_kind_of_reads_the_adapters_documented_hosts() -> None:
    with_hosts = [c for c in registered() if registry.adapter_class(c).api_hosts]
    assert with_hosts
    for cloud in with_hosts:
        host = registry.adapter_class(cloud).api_hosts[0]
        assert support.account_kind_of(cloud, f"https://{host}") == "real"
        assert support.account_kind_of(cloud, None) == "real"
        assert support.account_kind_of(cloud, "http://127.0.0.1:8765") == "simulated"


# --------------------------------------------------------------------------- adapter version

def test_every_adapter_has_a_short_stable_version() -> None:
    for cloud in registered():
        files = support.adapter_files(cloud)
        assert files[0].suffix == ".py" and all(f.parent == files[0].parent for f in files)
        version = support.adapter_version(cloud)
        assert len(version) == 12 and int(version, 16) >= 0 and version == support.adapter_version(cloud)


def test_sibling_modules_are_part_of_the_adapter() -> None:
    with_siblings = {c: support.adapter_files(c) for c in registered()}
    for cloud, files in with_siblings.items():
        names = [f.name for f in files]
        module = registry.entry(cloud).adapter.partition(":")[0].rpartition(".")[2]
        assert f"{module}.py" in names, (cloud, names)
        assert all(n == f"{module}.py" or n.startswith(f"{module.rstrip('_')}_") for n in names)
    assert any(len(files) > 2 for files in with_siblings.values())  # e.g. an adapter, its client, its catalog


def test_the_version_changes_when_the_adapters_source_changes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cloud = max(registered(), key=lambda c: len(support.adapter_files(c)))
    copies = []
    for f in support.adapter_files(cloud):
        copies.append(tmp_path / f.name)
        shutil.copy(f, copies[-1])
    monkeypatch.setattr(support, "adapter_files", lambda c: copies if c == cloud else [])
    before = support.adapter_version(cloud)
    copies[-1].write_text(copies[-1].read_text() + "\n# an edit\n")  # a sibling module, not the main one
    after = support.adapter_version(cloud)
    assert before != after
    copies[-1].write_text(copies[-1].read_text().removesuffix("\n# an edit\n"))
    assert support.adapter_version(cloud) == before
    # and the result recorded before the edit no longer counts
    results = [run("real", "passed", version=before).model_copy(update={"cloud": cloud})]
    copies[0].write_text(copies[0].read_text() + "\n")
    assert support.status(cloud, results).status == "untested"


def test_the_version_covers_the_client_librarys_exact_pin(tmp_path: Path) -> None:
    adapter = tmp_path / "thing.py"
    adapter.write_text("def f():\n    import somesdk.client\n    from google.cloud import compute_v1\n")
    pins = {"somesdk": "1.0.0", "google-cloud-compute": "1.2.3", "unrelated": "9.9"}
    assert support.client_pins([adapter], pins) == ["google-cloud-compute==1.2.3", "somesdk==1.0.0"]
    one = support.version_of([adapter], support.client_pins([adapter], pins))
    two = support.version_of([adapter], support.client_pins([adapter], {**pins, "somesdk": "1.0.1"}))
    assert one != two


def test_sources_are_parsed_one_at_a_time_whatever_the_threads(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads reading adapters' imports at once (the API's sync routes do) never parse at the
    same moment: CPython 3.11 can fail such a pair with "AST constructor recursion depth mismatch"."""
    inside, most, first_in, second_in = 0, 0, threading.Event(), threading.Event()
    lock = threading.Lock()
    real_parse = ast.parse

    def parse_watched_fake(source: str, *args: Any, **kwargs: Any) -> ast.Module:
        nonlocal inside, most
        if source not in ours:  # pytest's own parsing, say: the real one, unwatched
            return real_parse(source, *args, **kwargs)
        with lock:
            inside += 1
            most = max(most, inside)
            if inside > 1:
                second_in.set()
        first_in.set()
        second_in.wait(0.5)  # the first parse holds on, giving the second thread its chance to enter
        with lock:
            inside -= 1
        return real_parse(source)

    monkeypatch.setattr(support.ast, "parse", parse_watched_fake)
    files = [tmp_path / "a.py", tmp_path / "b.py"]
    files[0].write_text("import alpha\n")
    files[1].write_text("from beta import gamma\n")
    ours = {f.read_text() for f in files}
    found: dict[int, set[str]] = {}
    threads = [threading.Thread(target=lambda n=n: found.update({n: support.imported_modules([files[n]])}))
               for n in (0, 1)]
    threads[0].start()
    assert first_in.wait(30)
    threads[1].start()
    for t in threads:
        t.join(30)
    assert found == {0: {"alpha"}, 1: {"beta", "beta.gamma"}}
    assert most == 1


def test_the_exact_pins_are_read_from_pyproject() -> None:
    pins = support.exact_pins()
    sdk_clouds = [c for c in registered() if support.client_pins(support.adapter_files(c))]
    assert sdk_clouds, "an adapter whose SDK is pinned exactly"
    for cloud in sdk_clouds:
        for pin in support.client_pins(support.adapter_files(cloud)):
            name, _, version = pin.partition("==")
            assert pins[name] == version and f'"{pin}"' in support.PYPROJECT.read_text()


# --------------------------------------------------------------------------- today

def test_no_cloud_reads_supported_today() -> None:
    results = support.load()
    for cloud in registered():
        assert support.status(cloud, results).status != "supported", cloud
