"""`make fuzz`'s report of the worker (bench/fuzz.py): the activity attempts that failed while it ran,
counted by activity type with the workflows they belong to — an API that answered every case can
still have a worker that did not."""

from __future__ import annotations

from pathlib import Path

from bench.fuzz import failed_attempts

FAILED = ("2026-12-06 21:51:11,822 WARNING temporalio.activity: Completing activity as failed "
          "({{'activity_id': '6', 'activity_type': '{kind}', 'attempt': 1, 'namespace': 'default', "
          "'task_queue': 'gpuprov', "
          "'workflow_id': '{workflow}', 'workflow_run_id': '01a2', 'workflow_type': 'AcceptanceWorkflow'}})\n"
          "Traceback (most recent call last):\n  File \"activities/acceptance.py\", line 142, in leftovers\n"
          "ApplicationError{kind_shown} (message withheld: it may hold input)\n")


def test_failed_attempts_are_counted_by_activity_type() -> None:
    log = "".join([
        "2026-12-06 21:50:00,000 INFO something else\n",
        *(FAILED.format(kind="leftovers", workflow=f"acceptance-acc-{n}", kind_shown=shown)
          for n, shown in ((1, " [InvalidRequest]"), (2, " [InvalidRequest]"), (2, " [Transient]"), (3, ""),
                           (4, " [InvalidRequest]"))),
        FAILED.format(kind="validate_allocation", workflow="allocation-a1", kind_shown=""),
    ])
    lines = failed_attempts(log, Path("/home/x/logs/worker.log"))
    assert lines == [
        "worker: 6 activity attempt(s) failed during the fuzz (tracebacks in /home/x/logs/worker.log):",
        "  leftovers: 5 [InvalidRequest 3, Transient 1, ApplicationError 1] (acceptance-acc-1, "
        "acceptance-acc-2, acceptance-acc-3 and 1 more)",
        "  validate_allocation: 1 [ApplicationError 1] (allocation-a1)",
    ]


def test_a_quiet_worker_says_so() -> None:
    assert failed_attempts("2026-12-06 21:50:00,000 INFO polling\n", Path("w.log")) == [
        "worker: no activity attempt failed during the fuzz"]
