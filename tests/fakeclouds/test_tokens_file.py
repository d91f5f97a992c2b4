"""The simulation server takes its tokens from a file (what `gpuprov dev` keeps, 0600), so none is
on its command line; `--token` still works for a quick standalone run, and neither echoes a value."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from fakeclouds.server import main, tokens_of

FACADES = ["local", "lambda"]


def args(tokens_file: Path | None = None, token: list[str] | None = None) -> argparse.Namespace:
    return argparse.Namespace(tokens_file=str(tokens_file) if tokens_file else None, token=token)


def test_tokens_come_from_the_file_and_a_token_argument_overrides(tmp_path: Path) -> None:
    path = tmp_path / "cloud-tokens.json"
    # A cloud no longer simulated keeps its entry in gpuprov dev's file: skipped, not an error.
    path.write_text(json.dumps({"local": "from-file-l", "lambda": "from-file-a", "retired": "r"}))
    assert tokens_of(args(path), FACADES) == {"local": "from-file-l", "lambda": "from-file-a"}
    assert tokens_of(args(path, ["lambda=flag"]), FACADES) == {"local": "from-file-l", "lambda": "flag"}
    assert tokens_of(args(), FACADES) == {}  # every facade on its `<name>-dev-token`


@pytest.mark.parametrize("text", ['{"local": "s3cret-value"', '["s3cret-value"]', '{"local": ""}',
                                  '{"local": 7}'])
def test_a_bad_tokens_file_is_refused_without_its_content(tmp_path: Path, text: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main(["--tokens-file", str(path), "--port", "0"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--tokens-file {path}" in err and "s3cret" not in err


def test_a_malformed_token_argument_is_refused_without_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("s3cret-value", "nimbus=s3cret-value", "local="):
        with pytest.raises(SystemExit):
            main(["--token", bad, "--port", "0"])
        err = capsys.readouterr().err
        assert "--token wants facade=token pairs" in err and "s3cret" not in err, err
