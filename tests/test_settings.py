"""Values kept under GPUPROV_HOME are created once, whole, and shared by racing processes; the
home and what is made in it are its owner's only."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from settings import home_value, private_home


def test_racing_creators_agree_on_one_private_value(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with ThreadPoolExecutor(16) as pool:
        values = set(pool.map(lambda _: home_value(home, "installation-id", lambda: uuid.uuid4().hex),
                              range(64)))
    assert len(values) == 1
    assert (os.stat(home / "installation-id").st_mode & 0o777) == 0o600
    assert os.listdir(home) == ["installation-id"]  # no temp files left behind
    assert home_value(home, "installation-id", lambda: "other") == values.pop()


@pytest.fixture
def umask() -> Iterator[None]:
    """A permissive umask, as a user's shell may have; restored after (private_home changes it)."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_a_new_home_and_everything_made_in_it_is_private(tmp_path: Path, umask: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    home = private_home(tmp_path / "a" / "home")
    (home / "logs").mkdir()
    (home / "logs" / "api.log").write_text("x")
    home_value(home, "api-token", lambda: "t")
    made = (home, home / "logs", home / "logs" / "api.log", home / "api-token")
    assert [oct(p.stat().st_mode & 0o777) for p in made] == ["0o700", "0o700", "0o600", "0o600"]
    assert capsys.readouterr().err == ""  # nothing to report about a home made private


def test_a_looser_home_is_tightened_with_its_own_files_saying_so_once(
        tmp_path: Path, umask: None, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    (home / "localcloud" / "machines").mkdir(parents=True)
    (home / "localcloud" / "state.json").write_text("{}")
    (home / "temporal.db").write_text("")
    (home / "notes.txt").write_text("")  # not gpuprov's: left as its owner made it
    (home / "elsewhere").mkdir()
    (home / "logs").symlink_to(home / "elsewhere")  # a link: neither it nor its target is changed
    home.chmod(0o755)
    private_home(home)
    modes = {str(p.relative_to(home)): p.stat().st_mode & 0o777 for p in home.rglob("*")}
    assert home.stat().st_mode & 0o777 == 0o700
    assert modes == {"localcloud": 0o700, "localcloud/machines": 0o700, "localcloud/state.json": 0o600,
                     "temporal.db": 0o600, "notes.txt": 0o644, "elsewhere": 0o755, "logs": 0o755}
    assert capsys.readouterr().err == f"gpuprov: made {home} private (mode 700, was 755); " \
                                      "its files are owner-only now\n"
    private_home(home)
    assert capsys.readouterr().err == ""
