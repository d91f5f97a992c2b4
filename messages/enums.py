"""The closed vocabularies shared across layers. `StrEnum`, so they store and serialise as the
plain strings the database, the API and the Temporal Web UI show."""

from __future__ import annotations

from enum import StrEnum


class AllocationStatus(StrEnum):
    """Where an allocation stands, as users see it."""

    PROVISIONING = "provisioning"
    READY = "ready"
    TERMINATING = "terminating"  # a machine may still exist; it is being removed
    TERMINATED = "terminated"  # the cloud shows it gone
    FAILED = "failed"  # never became ready; anything it made is gone
    LOST = "lost"  # the cloud reported it gone, preempted or broken after ready; cleaned up

    @property
    def live(self) -> bool:
        """May a cloud machine exist (or be about to) for an allocation in this status?"""
        return self in (AllocationStatus.PROVISIONING, AllocationStatus.READY, AllocationStatus.TERMINATING)


class Phase(StrEnum):
    VALIDATE = "validate"
    PLAN = "plan"
    CREATE = "create"
    WAIT_RUNNING = "wait_running"
    PORTS = "ports"
    SSH = "ssh"
    K3S = "k3s"
    GPU_CHECK = "gpu_check"
    READY = "ready"
    COMPENSATING = "compensating"
    FAILED = "failed"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    LOST = "lost"


class AttemptOutcome(StrEnum):
    """How one offer tried by an allocation ended (or stands)."""

    CREATING = "creating"
    CREATED = "created"
    CAPACITY = "capacity"
    QUOTA = "quota"
    BOOT_TIMEOUT = "boot_timeout"  # not running within the cloud's boot timeout: torn down, next offer
    FAILED = "failed"
    CANCELLED = "cancelled"


class ConnectionStatus(StrEnum):
    CONNECTED = "connected"
    REMOVING = "removing"  # its instances are being terminated; deleted once none is live


class ErrorKind(StrEnum):
    """ApplicationError types workflows act on: the provider taxonomy, then gpuprov's own."""

    CAPACITY = "CapacityError"
    QUOTA = "QuotaError"
    RATE_LIMITED = "RateLimited"
    AUTH = "AuthError"
    INVALID_REQUEST = "InvalidRequest"
    UNSUPPORTED = "Unsupported"
    TRANSIENT = "Transient"
    INSTANCE_GONE = "InstanceGone"
    INSTANCE_FAILED = "InstanceFailed"
    K3S_FAILED = "K3sFailed"
    GPU_CHECK_FAILED = "GpuCheckFailed"
    NO_OFFERS = "NoOffers"
    NO_CAPACITY = "NoCapacity"
    CONNECTION_NOT_FOUND = "ConnectionNotFound"
    SECRET_ERROR = "SecretError"
    NOT_FOUND = "NotFound"
    ALLOCATION_FAILED = "AllocationFailed"
    HOST_KEY_CHANGED = "HostKeyChanged"  # a machine's SSH host key is not the pinned one (never retried)
    JOB_LAUNCH_FAILED = "JobLaunchFailed"  # the job's launch script failed on its host (never retried)

    @property
    def fails_over(self) -> bool:
        """Retrying the same call cannot help, but another offer outside the scope may."""
        return self in (ErrorKind.CAPACITY, ErrorKind.QUOTA)
