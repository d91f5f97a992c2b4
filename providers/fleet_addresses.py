"""Which addresses an SSH fleet's host (or bastion) may be: a fleet is the user's own servers, not a
way to make this installation connect wherever a project token points it (a port scanner).

Refused, unless an administrator allows a network that holds the address (GPUPROV_FLEET_ALLOWED_NETWORKS,
comma-separated CIDRs):
- loopback (127.0.0.0/8, ::1) and the unspecified address (0.0.0.0, ::, which reach this machine);
- link-local (169.254.0.0/16, fe80::/10) and the clouds' metadata services (169.254.169.254,
  fd00:ec2::254, 100.100.100.200, ... and names such as metadata.google.internal);
- multicast, broadcast and reserved addresses;
- an IPv4 address in a non-standard form (`0177.0.0.1`, `2130706433`): resolvers read them as octal
  or as one number.
Always refused, allowed network or not: this installation's own services — the API's, Temporal's
and the database's host:port from the settings (on any loopback address when they are on one).
Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7) are where users' servers are: allowed.

A name is resolved once (`resolve`) and every address it gives is checked; the caller connects to
the address checked (`Checked.address`), never to the name again, so an answer that changes
between the check and the connection (DNS rebinding) reaches nothing unchecked. A host behind a
bastion is reached by the bastion, which resolves its name itself: only its literal address and
its name are checked here.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from providers.ssh_login import HostLogin

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str], Sequence[str]]  # a name -> its addresses; LookupError: it does not resolve

METADATA_ADDRESSES: frozenset[IP] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, DigitalOcean, Oracle, OpenStack...
    "169.254.170.2",  # AWS ECS task metadata
    "169.254.169.253",  # AWS DNS
    "fd00:ec2::254",  # AWS over IPv6
    "fd00:ec2::253",
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",  # Oracle Cloud (classic)
))
METADATA_NAMES = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "metadata.azure.internal",
    "instance-data", "instance-data.ec2.internal", "metadata.tencentyun.com", "metadata.platformequinix.com",
    "metadata.packet.net",
})


class AddressRefused(ValueError):
    """The address (or name) may not be a fleet host; the message says why (no peer was contacted)."""


def system_resolver(name: str) -> list[str]:
    """The name's addresses as the system resolves it (A and AAAA), in its order."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise LookupError(name) from None
    seen: list[str] = []
    for *_, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in seen:
            seen.append(address)
    return seen


def _plain(ip: IP) -> IP:
    """An IPv4-mapped IPv6 address (::ffff:127.0.0.1) is the IPv4 address it carries."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def _loopbackish(ip: IP) -> bool:
    """This machine: loopback, or the unspecified address (0.0.0.0/8, ::), which Linux connects
    to loopback."""
    return ip.is_loopback or ip.is_unspecified or (ip.version == 4 and ip in _THIS_NETWORK)


def _odd_ipv4(name: str) -> bool:
    """`name` reads as an IPv4 address in a form other than dotted decimal (inet_aton accepts
    octal, hex and fewer than four parts): never a host name."""
    try:
        socket.inet_aton(name)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Service:
    """One of this installation's own listening addresses."""

    what: str  # "the API", "Temporal", "the database"
    host: str
    port: int


@dataclass(frozen=True)
class Checked:
    host: str  # as given
    address: str  # what to connect to: the checked address (the host itself behind a bastion, a name there)


def parse_networks(text: str) -> tuple[Network, ...]:
    """Comma-separated CIDRs (`127.0.0.0/8, fd00::/8`); ValueError naming a bad one."""
    nets = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            try:
                nets.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise ValueError(f"not a network (CIDR): {part!r}") from None
    return tuple(nets)


def services_of(api_url: str, temporal_address: str, database_url: str | None) -> list[Service]:
    """The installation's own services from its settings: API, Temporal, database (no secret of
    the database URL is kept: only its host and port)."""
    found = []
    api = urlsplit(api_url)
    if api.hostname:
        try:
            port = api.port or (443 if api.scheme == "https" else 80)
        except ValueError:
            port = None
        if port:
            found.append(Service("the API", api.hostname, port))
    host, _, port_text = temporal_address.rpartition(":")
    if host and port_text.isdigit():
        found.append(Service("Temporal", host.strip("[]"), int(port_text)))
    if database_url:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(database_url)
        except (ArgumentError, ValueError):
            url = None
        if url is not None and url.host:
            default = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}.get(url.get_backend_name())
            if url.port or default:
                found.append(Service("the database", url.host, int(url.port or default or 0)))
    return found


@dataclass
class FleetAddresses:
    """The check, with this installation's allowed networks and its own services."""

    allowed: tuple[Network, ...] = ()
    services: Sequence[Service] = ()
    resolver: Resolver | None = field(default=None, repr=False)  # None: system_resolver (looked up per call)
    _service_ips: dict[Service, frozenset[IP]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_settings(cls, s: object, resolver: Resolver | None = None) -> FleetAddresses:
        """From a settings.Settings (GPUPROV_FLEET_ALLOWED_NETWORKS, _API_URL, _TEMPORAL_ADDRESS,
        _DATABASE_URL)."""
        allowed = parse_networks(str(getattr(s, "fleet_allowed_networks", "") or ""))
        services = services_of(str(getattr(s, "api_url", "")), str(getattr(s, "temporal_address", "")),
                               getattr(s, "database_url", None))
        return cls(allowed=allowed, services=services, resolver=resolver)

    # ------------------------------------------------------------------ the rules

    def resolve(self, name: str) -> Sequence[str]:
        return (self.resolver or system_resolver)(name)

    def _ips_of(self, service: Service) -> frozenset[IP]:
        """A service's addresses (resolved once and kept; a name that does not resolve now is
        asked again next time)."""
        if service in self._service_ips:
            return self._service_ips[service]
        try:
            ips = frozenset({_plain(ipaddress.ip_address(service.host))})
        except ValueError:
            try:
                ips = frozenset(_plain(ipaddress.ip_address(a)) for a in self.resolve(service.host))
            except (LookupError, ValueError):
                return frozenset()
        self._service_ips[service] = ips
        return ips

    def _own_service(self, ip: IP, port: int) -> Service | None:
        for service in self.services:
            if service.port != port:
                continue
            ips = self._ips_of(service)
            # A service on loopback (or on every address) answers on every loopback address.
            if ip in ips or (_loopbackish(ip) and any(_loopbackish(i) for i in ips)):
                return service
        return None

    def _allowed(self, ip: IP) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allowed)

    def check_ip(self, ip: IP, port: int, shown: str) -> None:
        """AddressRefused naming `shown` (the host as given) and why."""
        ip = _plain(ip)
        service = self._own_service(ip, port)
        if service is not None:
            raise AddressRefused(f"{shown} port {port} is {service.what} of this installation: "
                                 "not a fleet host")
        if self._allowed(ip):
            return
        why = None
        if ip in METADATA_ADDRESSES:
            why = "a cloud metadata service"
        elif _loopbackish(ip):
            why = "this machine (loopback)" if ip.is_loopback else "this machine (the unspecified address)"
        elif ip.is_link_local:
            why = "link-local"
        elif ip.is_multicast:
            why = "multicast"
        elif isinstance(ip, ipaddress.IPv4Address) and (ip.is_reserved or ip == ipaddress.IPv4Address(
                "255.255.255.255")):
            why = "a reserved address"
        if why is not None:
            resolved = "" if shown == str(ip) else f" (resolves to {ip})"
            raise AddressRefused(f"{shown}{resolved} is {why}: not a fleet host unless an administrator "
                                 "allows its network (GPUPROV_FLEET_ALLOWED_NETWORKS)")

    def _check_name(self, name: str, port: int) -> None:
        lowered = name.lower().rstrip(".")
        if lowered in METADATA_NAMES or lowered.endswith((".metadata.google.internal", ".metadata.goog")):
            raise AddressRefused(f"{name} is a cloud metadata service: not a fleet host")
        if lowered == "localhost" or lowered.endswith(".localhost"):
            # Always this machine (RFC 6761), whatever a resolver says.
            self.check_ip(ipaddress.IPv4Address("127.0.0.1"), port, name)
        if _odd_ipv4(name):
            raise AddressRefused(f"{name} reads as an IPv4 address in a non-standard form: "
                                 "write it in dotted decimal (a.b.c.d)")
        for service in self.services:  # behind a bastion the name is all there is to compare
            if service.port == port and service.host.lower() == lowered:
                raise AddressRefused(f"{name} port {port} is {service.what} of this installation: "
                                     "not a fleet host")

    def check(self, host: str, port: int, *, resolve: bool = True) -> Checked:
        """Check `host` (a parsed host name or IP address) at `port`. A name is resolved (when
        `resolve`: a host reached directly) and every address it gives must pass; the first is the
        one to connect to. AddressRefused says why, before anything is dialled."""
        try:
            ip = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            ip = None
        if ip is not None:
            self.check_ip(ip, port, host)
            return Checked(host=host, address=str(_plain(ip)))
        self._check_name(host, port)
        if not resolve:
            return Checked(host=host, address=host)
        try:
            addresses = [ipaddress.ip_address(a) for a in self.resolve(host)]
        except (LookupError, ValueError):
            addresses = []
        if not addresses:
            raise AddressRefused(f"{host} does not resolve")
        for each in addresses:
            self.check_ip(each, port, host)
        return Checked(host=host, address=str(_plain(addresses[0])))

    def check_all(self, hosts: Iterable[str], port: int, *, resolve: bool = True) -> list[Checked]:
        return [self.check(h, port, resolve=resolve) for h in hosts]


def checked_login(addresses: FleetAddresses, t: HostLogin) -> HostLogin:
    """`t` aimed at the checked addresses: the bastion's (resolved here) and the host's (resolved
    here when reached directly; behind a bastion its name goes to the bastion, checked as a name).
    AddressRefused before anything is dialled. Blocking (a name is resolved): run it off the loop."""
    bastion = t.bastion
    if bastion is not None:
        bastion = replace(bastion, host=addresses.check(bastion.host, bastion.port).address)
    host = addresses.check(t.host, t.port, resolve=bastion is None).address
    return replace(t, host=host, bastion=bastion)
