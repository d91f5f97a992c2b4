"""The SSH / on-prem fleet as a cloud: the user's own hosts are the capacity, a claim on a host is
the "machine". Credentials are the fleet's configuration (activities/deps.py builds them from the
Fleet row); no API, no simulation: every call logs in to the hosts over SSH (providers/ssh_login.py).

The host is the source of truth (DESIGN.md's idempotency rule). `create` claims a free host
atomically: it stages `~/.gpuprov/claim.<key>/` (the allocation key, the installation id, the
authorized_keys lines it will add, whether k3s was already installed) and renames it to
`~/.gpuprov/claim` — a rename onto an existing, non-empty directory fails, so of two creates one
wins, and the claim appears whole or not at all. A retry under the same key finds its own claim.
`terminate` removes exactly the lines it recorded, uninstalls k3s only if it was not there before
the claim, removes the claim and the directories it made, and touches nothing else.

Offers: one per reachable, unclaimed host with GPUs, priced 0 (the user's own hardware). The
instance type is the host's address (so a failure scope names one host), the region `on-prem`.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import ClassVar, TypeVar

import asyncssh

from providers.base import (
    AuthError,
    Capabilities,
    CapacityError,
    CloudProvider,
    ConnectionOptions,
    FailureScope,
    GpuSpec,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    SelfEnd,
    Transient,
    rank_offers,
)
from providers.credentials import Credentials
from providers.fleet_addresses import AddressRefused, FleetAddresses, checked_login
from providers.future import SshFleetCredentials
from providers.gpus import normalize_gpu
from providers.listing import Listing
from providers.ssh_login import Bastion, HostLogin, LoginFailed, login

T = TypeVar("T")

REGION = "on-prem"
CONNECT_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 120.0  # k3s-uninstall.sh on a real host takes a while
CLAIM = "~/.gpuprov/claim"
TAG = "gpuprov-"  # the comment of every authorized_keys line a claim adds: gpuprov-<key>

# What offers and reads need from a host, in one round trip.
_LOOK = r"""nproc 2>/dev/null || echo 1
awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0
echo '--claim'
cat ~/.gpuprov/claim/claim 2>/dev/null
echo '--gpus'
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>/dev/null
true
"""

_READ_CLAIM = "cat ~/.gpuprov/claim/claim 2>/dev/null; true"

# Claim the host for $KEY unless it is claimed. Exit 0: ours (new or found again); 3: another's
# claim (its key on stdout). The staging directory is rebuilt from scratch on a retry.
_CLAIM = r"""set -u
umask 077
c=~/.gpuprov/claim
mine() { [ "$(sed -n 's/^key=//p' "$c/claim" 2>/dev/null)" = "$KEY" ]; }
if [ -d "$c" ]; then
  if mine; then exit 0; fi
  sed -n 's/^key=//p' "$c/claim" 2>/dev/null; exit 3
fi
[ -d ~/.gpuprov ] && made_dir=0 || made_dir=1
mkdir -p ~/.gpuprov
s=~/.gpuprov/claim.$KEY
rm -rf "$s"; mkdir "$s"
k3s_before=0; command -v k3s >/dev/null 2>&1 && k3s_before=1
[ -d ~/.ssh ] && had_ssh=1 || had_ssh=0
[ -e ~/.ssh/authorized_keys ] && had_keys=1 || had_keys=0
nl=0
if [ -s ~/.ssh/authorized_keys ] && [ -n "$(tail -c 1 ~/.ssh/authorized_keys)" ]; then nl=1; fi
printf '%s\n' "key=$KEY" "installation=$INSTALLATION" "allocation=$ALLOCATION" "k3s_before=$k3s_before" \
  "had_ssh=$had_ssh" "had_keys=$had_keys" "added_newline=$nl" "made_dir=$made_dir" \
  "created_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$s/claim"
printf '%s\n' "$LINES" > "$s/keys"
if mv -T "$s" "$c" 2>/dev/null; then exit 0; fi
rm -rf "$s"
if mine; then exit 0; fi
sed -n 's/^key=//p' "$c/claim" 2>/dev/null; exit 3
"""

# Add the claim's key lines to authorized_keys, each once (the claim is ours: checked first).
_AUTHORIZE = r"""set -eu
umask 077
c=~/.gpuprov/claim
mkdir -p ~/.ssh
f=~/.ssh/authorized_keys
if [ "$(sed -n 's/^added_newline=//p' "$c/claim")" = 1 ] && [ -s "$f" ] && [ -n "$(tail -c 1 "$f")" ]; then
  echo >> "$f"
fi
while IFS= read -r line; do
  [ -n "$line" ] || continue
  grep -qxF -- "$line" "$f" 2>/dev/null || printf '%s\n' "$line" >> "$f"
done < "$c/keys"
"""

# Free the host from the claim of $KEY: exactly what the claim added goes, nothing else. Already
# free, or claimed by another key: nothing to do (exit 0).
_RELEASE = r"""set -u
c=~/.gpuprov/claim
rm -rf ~/.gpuprov/claim."$KEY"
if [ ! -d "$c" ] || [ "$(sed -n 's/^key=//p' "$c/claim" 2>/dev/null)" != "$KEY" ]; then exit 0; fi
get() { sed -n "s/^$1=//p" "$c/claim"; }
f=~/.ssh/authorized_keys
if [ -f "$f" ] && [ -s "$c/keys" ]; then
  grep -vxF -f "$c/keys" -- "$f" > "$f.gpuprov-tmp" || true
  cat "$f.gpuprov-tmp" > "$f"; rm -f "$f.gpuprov-tmp"
  if [ "$(get added_newline)" = 1 ] && [ -s "$f" ] && [ -z "$(tail -c 1 "$f")" ]; then
    truncate -s -1 "$f"
  fi
  if [ "$(get had_keys)" = 0 ] && [ ! -s "$f" ]; then rm -f "$f"; fi
  if [ "$(get had_ssh)" = 0 ]; then rmdir ~/.ssh 2>/dev/null; fi
fi
if [ "$(get k3s_before)" = 0 ] && command -v k3s-uninstall.sh >/dev/null 2>&1; then
  k3s-uninstall.sh >/dev/null || { echo "k3s-uninstall.sh failed" >&2; exit 4; }
  rm -f ~/.gpuprov/k3s-install.sh ~/.gpuprov/k3s-exec  # what activities/k3s_setup.py kept
fi
made_dir=$(get made_dir)
# Jobs run under this claim kept their files here (activities/jobs.py); their output is in the
# database by now (the job ended before its machine is released), and no other claim can be running.
rm -rf ~/.gpuprov/jobs
rm -rf "$c"
if [ "$made_dir" = 1 ]; then rmdir ~/.gpuprov 2>/dev/null; fi
exit 0
"""


class FleetCapacityError(CapacityError):
    """No host of the fleet is free (each one's reason in the message). Not retried as a call:
    asking the same hosts again at once tells nothing new; the planner reports it."""

    retryable = False

    @property
    def kind(self) -> str:
        return "CapacityError"


@dataclass(frozen=True)
class Claim:
    key: str
    installation: str
    fields: dict[str, str]


@dataclass(frozen=True)
class HostLook:
    host: str
    vcpus: int
    memory_gib: float
    gpu: GpuSpec | None
    claim: Claim | None


def parse_claim(text: str) -> Claim | None:
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if not fields.get("key"):
        return None
    return Claim(key=fields["key"], installation=fields.get("installation", ""), fields=fields)


def parse_look(host: str, text: str) -> HostLook:
    head, _, rest = text.partition("--claim\n")
    claim_text, _, gpu_text = rest.partition("--gpus\n")
    numbers = head.split()
    vcpus = int(numbers[0]) if numbers and numbers[0].isdigit() else 1
    kib = int(numbers[1]) if len(numbers) > 1 and numbers[1].isdigit() else 0
    names: list[tuple[str, float | None]] = []
    for line in gpu_text.splitlines():
        if not line.strip():
            continue
        name, _, memory = line.rpartition(",")
        try:
            gib: float | None = round(float(memory.strip()) / 1024)
        except ValueError:
            gib = None
        names.append((normalize_gpu(name or memory)[0], gib))
    gpu = None
    if names:  # a mixed host is offered as its first kind (count all: the workflow checks them)
        gpu = GpuSpec(name=names[0][0], count=len(names), memory_gib=names[0][1])
    return HostLook(host=host, vcpus=vcpus, memory_gib=round(kib / 1024 / 1024, 1), gpu=gpu,
                    claim=parse_claim(claim_text))


def authorized_line(public_key: str, key: str) -> str:
    """The user's key as an authorized_keys line tagged with the claim's key (its comment replaced),
    so removal takes exactly this line and never the user's own copy of the same key."""
    try:
        parsed = asyncssh.import_public_key(public_key.strip())
    except (asyncssh.KeyImportError, ValueError) as e:
        raise InvalidRequest(f"not an OpenSSH public key: {type(e).__name__}") from None
    kind, data = parsed.export_public_key("openssh").decode().split()[:2]
    return f"{kind} {data} {TAG}{key}"


class SshFleetProvider(CloudProvider):
    id: ClassVar[str] = "ssh"
    credentials_model: ClassVar[type[SshFleetCredentials]] = SshFleetCredentials
    listing: ClassVar[Listing] = Listing(
        connect_name="SSH / On-prem",  # the seed's name (its offers page: "SSH / On-prem — Available …")
        tagline="Bring your own GPU servers",
        how_to_connect="Save a fleet (POST /api/compute/fleets): SSH user, port, private key, hosts, "
                       "optional bastion. Its free GPU hosts are then offered at $0/hr.",
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="SSH fleet",
        k3s="ssh",
        ports=False,
        ports_reason="--port needs a firewall API; an SSH fleet's hosts are your own: open the port on "
                     "the host's firewall",
        spot=False,
        custom_image=False,
        login_user="ubuntu",  # the fleet's user, as `get` answers
        # The claim puts the user's keys (tagged, so `down` removes exactly them): not WAIT_SSH.
        user_keys="cloud",
        bastion=True,  # a fleet behind a proxy jump: gpuprov's SSH steps go through it (ssh_bastion)
        regions=[REGION],
        boot_timeout_s=120.0,  # a claimed host is running at once: minutes mean it stopped answering
        self_end=SelfEnd(
            method="n/a",
            how=("not applicable: a user's own host is never leased or ended by gpuprov"),
        ),
    )

    def __init__(self, credentials: Credentials, *, options: ConnectionOptions | None = None,
                 installation_id: str) -> None:
        super().__init__(credentials, options=options, installation_id=installation_id)
        c = credentials.reveal()
        try:
            key = asyncssh.import_private_key(c["private_key"])
            bkey = (asyncssh.import_private_key(c["bastion_private_key"])
                    if c.get("bastion_private_key") else key)
        except (asyncssh.KeyImportError, ValueError) as e:
            raise AuthError(f"the fleet's saved key cannot be used: {type(e).__name__}") from None
        bastion = None
        if c.get("bastion_host"):
            bastion = Bastion(c["bastion_host"], int(c.get("bastion_port") or 22),
                              c.get("bastion_user") or c["ssh_user"], bkey)
        self.bastion = bastion
        self._host_keys: dict[str, str] = {}
        self.user, self.port = str(c["ssh_user"]), int(c["ssh_port"])
        self.hosts = [h.strip() for h in str(c["hosts"]).splitlines() if h.strip()]
        self._key = key
        # Which addresses its hosts may have (providers/fleet_addresses.py): the defaults until the
        # builder gives the installation's (check_addresses).
        self.addresses = FleetAddresses()

    def check_addresses(self, addresses: FleetAddresses) -> None:
        """Every connection to a host (and the bastion) dials the address `addresses` checked;
        a refused one is an AuthError: asking again cannot help."""
        self.addresses = addresses

    def pin_host_keys(self, host_keys: dict[str, str], bastion_host_key: str | None) -> None:
        """The host keys the fleet's probe pinned (trust on first use, providers/host_keys.py): a host
        (or bastion) presenting another key is refused. A host not pinned yet is accepted."""
        self._host_keys = dict(host_keys)
        if self.bastion is not None:
            self.bastion = replace(self.bastion, host_key=bastion_host_key)

    def ssh_route(self, host: str) -> tuple[Bastion | None, str | None]:
        """How gpuprov's own SSH steps reach `host`: the proxy jump (None: direct) and the host's
        pinned key (None: not pinned yet)."""
        return self.bastion, self._host_keys.get(host)

    # ------------------------------------------------------------------ plumbing

    def _login(self, host: str) -> HostLogin:
        # Also for a host removed from the fleet since its claim: it is still freed with the fleet's key.
        return HostLogin(host=host, port=self.port, user=self.user, key=self._key, bastion=self.bastion,
                         host_key=self._host_keys.get(host))

    async def _run(self, host: str, script: str,
                   env: dict[str, str] | None = None) -> asyncssh.SSHCompletedProcess:
        """Run `script` (POSIX sh) on `host`; Transient when the host cannot be reached. Values go
        in as shell assignments, each quoted (never spliced into the script's text)."""
        prefix = "".join(f"{k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
        command = f"sh -c {shlex.quote(prefix + script)}"
        try:  # resolved once; the login dials the checked address, never the name again
            target = await asyncio.to_thread(checked_login, self.addresses, self._login(host))
        except AddressRefused as e:
            raise AuthError(f"{host}: {e}") from None
        try:
            async with login(target, CONNECT_TIMEOUT_S) as conn:
                async with asyncio.timeout(COMMAND_TIMEOUT_S):
                    return await conn.run(command, check=False)
        except LoginFailed as e:
            if isinstance(e.cause, asyncssh.PermissionDenied) or e.key_changed:
                # A refused key, or a host key other than the pinned one: asking again cannot help
                # until the user fixes the key or re-trusts the host (POST /fleets/{id}/trust).
                raise AuthError(f"{host}: {e}") from None
            raise Transient(f"{host}: {e}") from None
        except (OSError, asyncssh.Error, TimeoutError) as e:
            raise Transient(f"{host}: {type(e).__name__} while running a command") from None

    async def _each(self, fn: Callable[[str], Awaitable[T]]) -> list[tuple[str, T | BaseException]]:
        """`fn(host)` on every host at once; a host's exception is its answer."""
        answers = await asyncio.gather(*(fn(h) for h in self.hosts), return_exceptions=True)
        return list(zip(self.hosts, answers, strict=True))

    async def _claim_of(self, host: str) -> Claim | None:
        return parse_claim(str((await self._run(host, _READ_CLAIM)).stdout or ""))

    async def _retrying(self, host: str, script: str, env: dict[str, str]) -> asyncssh.SSHCompletedProcess:
        """`_run` for reads and teardown: a refused key is worth retrying too (the fleet's key may be
        fixed with PUT /fleets/{id}); giving up would leave the host held."""
        try:
            return await self._run(host, script, env)
        except AuthError as e:
            raise Transient(e.message) from None

    async def _look(self, host: str) -> HostLook:
        return parse_look(host, str((await self._run(host, _LOOK)).stdout or ""))

    def _ref(self, host: str, key: str) -> InstanceRef:
        return InstanceRef(provider=self.id, instance_id=host, key=key, region=REGION)

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        reasons = []
        for host, answer in await self._each(self._claim_of):
            if not isinstance(answer, BaseException):
                return f"{self.user}@{len(self.hosts)} hosts"
            reasons.append(f"{host}: {answer}")
        raise AuthError("no host of the fleet could be logged in to: " + "; ".join(reasons))

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if query.spot is True:
            return []
        out: list[Offer] = []
        busy: list[str] = []
        for host, look in await self._each(self._look):
            if isinstance(look, BaseException):
                busy.append(f"{host} unreachable ({getattr(look, 'message', look)})")
                continue
            if look.gpu is None:
                busy.append(f"{host} has no GPU")
                continue
            free = look.claim is None
            if not free:
                busy.append(f"{host} in use")
            if free or query.include_unavailable:
                out.append(Offer(provider=self.id, instance_type=host, gpu=look.gpu, vcpus=look.vcpus,
                                 memory_gib=look.memory_gib, region=REGION, price_per_hour=0.0,
                                 available=free))
        if not out and busy:
            raise FleetCapacityError("no free GPU host in the fleet: " + "; ".join(busy),
                                     FailureScope(provider=self.id))
        return rank_offers(out, query)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        host = offer.instance_type
        if host not in self.hosts:
            raise InvalidRequest(f"{host!r} is not a host of this fleet")
        lines = [authorized_line(k, spec.key) for k in spec.ssh_public_keys]
        env = {"KEY": spec.key, "INSTALLATION": spec.owner.installation_id,
               "ALLOCATION": spec.owner.allocation_id, "LINES": "\n".join(dict.fromkeys(lines))}
        claimed = await self._run(host, _CLAIM, env)
        if claimed.exit_status == 3:
            raise CapacityError(f"{host} is in use (claimed by another allocation)",
                                FailureScope(provider=self.id, region=REGION, instance_type=host))
        if claimed.exit_status != 0:
            raise Transient(f"{host}: claiming failed (exit {claimed.exit_status}): "
                            f"{str(claimed.stderr or '')[-300:]}")
        # Ours now (or again, on a retry): its key lines in, each once.
        authorized = await self._run(host, _AUTHORIZE, {"KEY": spec.key})
        if authorized.exit_status != 0:
            raise Transient(f"{host}: adding the keys failed (exit {authorized.exit_status}): "
                            f"{str(authorized.stderr or '')[-300:]}")
        return self._ref(host, spec.key)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        claim = parse_claim(str((await self._retrying(ref.instance_id, _READ_CLAIM, {})).stdout or ""))
        if claim is None or claim.key != ref.key:
            return None
        return InstanceStatus(ref=ref, state=InstanceState.RUNNING, host=ref.instance_id, ssh_port=self.port,
                              ssh_user=self.user, instance_type=ref.instance_id, detail="claimed")

    async def terminate(self, ref: InstanceRef) -> None:
        done = await self._retrying(ref.instance_id, _RELEASE, {"KEY": ref.key})
        if done.exit_status != 0:
            raise Transient(f"{ref.instance_id}: freeing the host failed (exit {done.exit_status}): "
                            f"{str(done.stderr or '')[-300:]}")

    async def list_machines(self) -> None:
        # No listing API: reading every host's claim is one SSH login per host, more than `get` per claim.
        return None

    async def list_owned(self) -> list[InstanceRef]:
        # An unreachable host is left out (nothing can be done there now; the next listing asks again).
        return [self._ref(host, claim.key) for host, claim in await self._each(self._claim_of)
                if isinstance(claim, Claim) and claim.installation == self.installation_id]
