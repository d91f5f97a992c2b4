"""Jobs and their output (store/models.py Job, JobLogChunk): the writes the job's activities make
and the reads the API serves. A job's output is kept as chunks keyed by byte offset, appended in
order by the one activity that runs the job, so `offset` is a resume point for every reader."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from messages.job import JobStatus, RecordJobInput
from store.models import Job, JobLogChunk, utcnow
from store.queue import release


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
    chunks = session.exec(select(JobLogChunk.data).where(JobLogChunk.job_id == job_id)
                          .order_by(col(JobLogChunk.offset).desc()).limit(4)).all()
    text = b"".join(reversed(chunks))[-16384:].decode(errors="replace")
    return text.splitlines()[-n:]


def record(session: Session, inp: RecordJobInput) -> None:
    """Bring the job's row to `inp.status`; an ended job stays as it ended (a retried or late record
    does not move it back)."""
    row = session.get(Job, inp.job_id)
    if row is None or JobStatus(row.status).ended:
        return
    now = utcnow()
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
