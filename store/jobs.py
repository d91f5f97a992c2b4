"""Jobs and their output (store/models.py Job, JobLogChunk): the writes the job's activities make
and the reads the API serves. A job's output is kept as chunks keyed by byte offset, appended in
order by the one activity that runs the job, so `offset` is a resume point for every reader."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from messages.job import JobStatus, RecordJobInput, RetryCause, attempt_marker
from store.models import Job, JobGpuSample, JobLogChunk, utcnow
from store.queue import release
from store.records import bound_records


def log_end(session: Session, job_id: str) -> int:
    """The byte offset just past the job's stored output (0: none yet)."""
    row = session.exec(select(JobLogChunk.offset, sa.func.length(JobLogChunk.data))
                       .where(JobLogChunk.job_id == job_id)
                       .order_by(col(JobLogChunk.offset).desc()).limit(1)).first()
    return 0 if row is None else int(row[0]) + int(row[1])


def append_chunk(session: Session, job_id: str, offset: int, data: bytes) -> None:
    """Store `data` as the output at `offset`, once: a retried write of that offset changes nothing."""
    if not data or session.get(JobLogChunk, (job_id, offset)) is not None:
        return
    session.add(JobLogChunk(job_id=job_id, offset=offset, data=data))
    try:
        session.commit()
    except IntegrityError:
        session.rollback()  # the same write, made concurrently: it is there


def read_log(session: Session, job_id: str, offset: int, max_bytes: int = 1 << 20) -> bytes:
    """Up to about `max_bytes` of the job's output from byte `offset` (fewer at its end)."""
    chunks: Sequence[JobLogChunk] = session.exec(
        select(JobLogChunk).where(JobLogChunk.job_id == job_id,
                                  JobLogChunk.offset + sa.func.length(JobLogChunk.data) > offset)
        .order_by(col(JobLogChunk.offset))).all()
    out = bytearray()
    for c in chunks:
        if len(out) >= max_bytes:
            break
        out += c.data[max(0, offset - c.offset):] if not out else c.data
    return bytes(out)


def last_lines(session: Session, job_id: str, n: int = 20) -> list[str]:
    """The job's last `n` output lines (from its last few chunks)."""
    return log_tail(session, job_id, n)[0]


def log_tail(session: Session, job_id: str, n: int = 20) -> tuple[list[str], int]:
    """The job's last `n` output lines and the offset just past them, read together: one query, so
    a reader that shows the lines and then follows the log from the offset sees each line once
    (read apart, a chunk written between the two reads was shown and then streamed again)."""
    chunks = session.exec(select(JobLogChunk.offset, JobLogChunk.data).where(JobLogChunk.job_id == job_id)
                          .order_by(col(JobLogChunk.offset).desc()).limit(4)).all()
    if not chunks:
        return [], 0
    end = int(chunks[0][0]) + len(chunks[0][1])
    text = b"".join(data for _, data in reversed(chunks))[-16384:].decode(errors="replace")
    return text.splitlines()[-n:], end


def output_start(job: Job, attempt: int) -> int:
    """Where attempt `attempt`'s output starts in the job's log: after the marker line its record
    wrote (0 for a first attempt, and for a job without attempt records)."""
    for rec in job.attempt_log or []:
        if rec.get("attempt") == attempt and rec.get("output_at") is not None:
            return int(rec["output_at"])
    return 0


def _attempts(session: Session, row: Job, inp: RecordJobInput) -> None:
    """Bring the job's attempt records up to the workflow's (a job with a retry policy): each ended
    attempt's end, once; the attempt recorded begun, once — from the second on with the marker line
    appended to the log (a retried record finds its attempt there and writes nothing again)."""
    assert inp.attempt is not None
    now = utcnow().isoformat()
    log: list[dict[str, Any]] = [dict(r) for r in row.attempt_log or []]
    by_attempt = {r["attempt"]: r for r in log}
    if inp.attempt not in by_attempt:
        at = log_end(session, row.id)
        if inp.attempt > 1:
            previous = inp.ends[-1].cause if inp.ends else RetryCause.FAILED
            marker = attempt_marker(inp.attempt, inp.attempts or inp.attempt, previous).encode()
            if at and not _ends_a_line(session, row.id):
                marker = b"\n" + marker
            session.add(JobLogChunk(job_id=row.id, offset=at, data=marker))
            at += len(marker)
        begun: dict[str, Any] = {"attempt": inp.attempt, "allocation_id": inp.allocation_id,
                                 "output_at": at, "started_at": now, "ended": None, "reason": None,
                                 "exit_code": None, "ended_at": None}
        log.append(begun)
        by_attempt[inp.attempt] = begun
    for end in inp.ends:
        rec = by_attempt.get(end.attempt)
        if rec is not None and rec.get("ended") is None:
            rec.update(ended=end.cause.value, reason=end.reason[:2000], exit_code=end.exit_code, ended_at=now)
    row.attempt_log = sorted(log, key=lambda r: int(r["attempt"]))  # a new list: the change is seen
    row.attempts = max(row.attempts or 1, inp.attempt)


def _ends_a_line(session: Session, job_id: str) -> bool:
    last = session.exec(select(JobLogChunk.data).where(JobLogChunk.job_id == job_id)
                        .order_by(col(JobLogChunk.offset).desc()).limit(1)).first()
    return last is None or last.endswith(b"\n")


def record(session: Session, inp: RecordJobInput) -> None:
    """Bring the job's row to `inp.status`; an ended job stays as it ended (a retried or late record
    does not move it back). A job with a retry policy: its attempt records too (`_attempts`)."""
    row = session.get(Job, inp.job_id)
    if row is None or JobStatus(row.status).ended:
        return
    now = utcnow()
    if inp.attempt is not None:
        _attempts(session, row, inp)
    row.status, row.updated_at = inp.status, now
    for name in ("allocation_id", "host", "exit_code", "error"):
        if (value := getattr(inp, name)) is not None:
            setattr(row, name, value)
    if inp.status == JobStatus.RUNNING and row.started_at is None:
        row.started_at = now
    if inp.status.ended:
        row.ended_at = now
        release(row)  # recorded only after the job's machine is verified gone
    session.add(row)
    session.commit()


# Readings kept per job (a reading: every GPU at one instant): at the default 30 s, the last 2 h.
KEEP_READINGS = 240


def add_gpu_reading(session: Session, job_id: str, at: datetime, gpus: Sequence[tuple[float, int, int]],
                    keep: int = KEEP_READINGS) -> None:
    """Store one reading — (utilisation %, memory used MiB, memory total MiB) per GPU, in
    nvidia-smi's order — and drop the job's readings older than its `keep` most recent."""
    for i, (util, used, total) in enumerate(gpus):
        session.add(JobGpuSample(job_id=job_id, at=at, gpu=i, utilization_pct=util, memory_used_mib=used,
                                 memory_total_mib=total))
    session.flush()
    cutoff = session.exec(select(JobGpuSample.at).where(JobGpuSample.job_id == job_id)
                          .group_by(col(JobGpuSample.at)).order_by(col(JobGpuSample.at).desc())
                          .offset(keep).limit(1)).first()
    if cutoff is not None:
        session.execute(sa.delete(JobGpuSample).where(col(JobGpuSample.job_id) == job_id,
                                                      col(JobGpuSample.at) <= cutoff))
    session.commit()


GPU_READING_COLUMNS = (col(JobGpuSample.at), col(JobGpuSample.gpu), col(JobGpuSample.utilization_pct),
                       col(JobGpuSample.memory_used_mib), col(JobGpuSample.memory_total_mib))


def gpu_readings(session: Session, job_id: str, n: int = 60) -> list[JobGpuSample]:
    """The job's last `n` readings' samples, oldest first: records of GPU_READING_COLUMNS
    (store/records.py), read by attribute as a JobGpuSample is (a job's detail shows 60 readings of
    each GPU: as ORM objects, two thirds of its time)."""
    return cast(list[JobGpuSample], bound_records(session, _readings_statement(), {"job_id": job_id, "n": n}))


@functools.cache
def _readings_statement() -> sa.Executable:
    """`gpu_readings`' one statement, built once (`job_id` and `n` bound): the samples from the
    oldest of the job's last `n` reading times on."""
    at, job_id = col(JobGpuSample.at), col(JobGpuSample.job_id)
    latest = (sa.select(at).where(job_id == sa.bindparam("job_id"))
              .group_by(at).order_by(at.desc()).limit(sa.bindparam("n")).subquery())
    oldest = sa.select(sa.func.min(latest.c.at)).scalar_subquery()
    return (sa.select(*GPU_READING_COLUMNS)
            .where(job_id == sa.bindparam("job_id"), at >= oldest)
            .order_by(at, col(JobGpuSample.gpu)))
