"""The flags every embedded Temporal dev server here starts with: `gpuprov dev`'s (cli/dev.py), the
test session's (tests/conftest.py) and bench's (bench/harness.py). Search attributes are registered
apart (workflows/search_attributes.py)."""

from __future__ import annotations

FLAGS: list[str] = [
    # SQLite in WAL mode, synced at checkpoints: the dev server's default journal fsyncs every write.
    "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
    # The frontend's version check looks up version-info.temporal.io as the server starts (a DNS query to
    # the host's resolver, then HTTPS to Temporal): traffic off this machine, which nothing here may
    # send (it runs beside the start-up, so it never slowed one: tests/deploy/test_temporal_offline.py).
    "--dynamic-config-value", "frontend.enableServerVersionCheck=false",
    # One partition per task queue (the default is 4): a single-node server gains nothing from more, and a
    # rate-limited queue (a cloud's launch queue, worker.py launch_rates) is limited per partition — on 4,
    # Lambda's first create after a start waited ~45 s for one launch per 12 s, and the next went at once.
    "--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
]
