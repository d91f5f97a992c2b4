"""Values kept under GPUPROV_HOME are created once, whole, and shared by racing processes."""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from settings import home_value


def test_racing_creators_agree_on_one_private_value(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with ThreadPoolExecutor(16) as pool:
        values = set(pool.map(lambda _: home_value(home, "installation-id", lambda: uuid.uuid4().hex),
                              range(64)))
    assert len(values) == 1
    assert (os.stat(home / "installation-id").st_mode & 0o777) == 0o600
    assert os.listdir(home) == ["installation-id"]  # no temp files left behind
    assert home_value(home, "installation-id", lambda: "other") == values.pop()
