"""How every embedded Temporal dev server here is started — `gpuprov dev`'s (cli/dev.py), the test
session's (tests/conftest.py) and bench's (bench/harness.py): its flags, and how long the SDK-spawned
ones may take to answer. Search attributes are registered apart (workflows/search_attributes.py)."""

from __future__ import annotations

from datetime import timedelta

# How long a spawned Temporal server (dev or time-skipping) may take to answer. The SDK's default is
# 5 s, and on a busy 2-core CI box each test worker's dev server starts beside the others' stacks: a CI
# run had 135 tests error at setup on "did not start within 5s". One that never starts still fails,
# after this.
STARTUP_TIMEOUT = timedelta(seconds=120)

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
    # A history shard reads its transfer queue (the tasks that hand a workflow or activity task to matching)
    # at most this often; the default of 20 is per shard, sized for clusters of hundreds, and the dev server
    # has one shard — so past a short burst every step of a workflow (an activity completes, the next workflow
    # task is dispatched) waited up to 50 ms for that read: 42.4 ms per step of a sequence of no-op
    # activities, 11.9 ms at 200 (bench/step_latency.py, side by side on the 2-core dev box).
    "--dynamic-config-value", "history.transferProcessorMaxPollRPS=200",
    # An activity the workflow schedules on its own task queue starts in the reply to the workflow task
    # that scheduled it, when the worker has a slot (the SDK asks; never for a cloud's launch queue, whose
    # rate only matching applies): no trip through matching. The dev server's own default, written here so
    # docker-compose's Temporal gets it too — a stock server's is false. Measured with it false on the
    # bench's dev server (three alternating `--only bc` runs): bare workflows 27.3-28.8 → 32.4-33.6/s,
    # 0.16-0.18 → 0.15-0.16 CPU-s per allocation; a step 11.2-11.8 → 9.8-10.0 ms.
    "--dynamic-config-value", "system.enableActivityEagerExecution=true",
]


def dynamic_config(flags: list[str] = FLAGS) -> dict[str, str]:
    """The `--dynamic-config-value key=value` pairs of `flags`: key -> value as written."""
    pairs = (flags[i + 1].split("=", 1) for i, flag in enumerate(flags) if flag == "--dynamic-config-value")
    return {key: value for key, value in pairs}
