"""README's cloud table is the one `providers/table.py` generates from the adapters' Capabilities."""

from __future__ import annotations

from pathlib import Path

from providers import registry, table

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_table_is_what_the_code_says() -> None:
    text = README.read_text()
    start, end = text.index(table.START), text.index(table.END) + len(table.END)
    assert text[start:end] == table.table(), "README's cloud table is stale: run `python -m providers.table`"


def test_the_table_follows_a_capability_change() -> None:
    caps = registry.capabilities("lambda")
    spot_cell = 5  # Cloud, --cloud, k3s, k8s API, --port, --spot, ...
    for spot in (True, False):
        cells = table.row("lambda", caps.model_copy(update={"spot": spot})).strip("| ").split(" | ")
        assert cells[spot_cell] == ("✓" if spot else "✗")
