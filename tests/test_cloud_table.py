"""README's cloud tables are the ones `providers/table.py` generates: the capability table from the
adapters' Capabilities, the support table from the committed acceptance results."""

from __future__ import annotations

from pathlib import Path

from providers import registry, support, table

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_table_is_what_the_code_says() -> None:
    text = README.read_text()
    start, end = text.index(table.START), text.index(table.END) + len(table.END)
    assert text[start:end] == table.table(), "README's cloud table is stale: run `python -m providers.table`"


def test_the_readme_support_table_is_what_the_committed_results_say() -> None:
    text = README.read_text()
    start = text.index(table.SUPPORT_START)
    end = text.index(table.SUPPORT_END) + len(table.SUPPORT_END)
    assert text[start:end] == table.support_table(support.load()), (
        "README's support table is stale: run `python -m providers.table`")


def test_the_table_follows_a_capability_change() -> None:
    caps = registry.capabilities("lambda")
    spot_cell = 5  # Cloud, --cloud, k3s, k8s API, --port, --spot, ...
    for spot in (True, False):
        cells = table.row("lambda", caps.model_copy(update={"spot": spot})).strip("| ").split(" | ")
        assert cells[spot_cell] == ("✓" if spot else "✗")
