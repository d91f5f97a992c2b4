"""Which API endpoints a connection may point an adapter at.

A connection's `endpoint` makes the server send requests (with the cloud's credentials) wherever it
says, so it is a server-side request forgery unless bounded. An endpoint is allowed when it is
`https` on one of the cloud's documented API hosts (`CloudProvider.api_hosts`, default port), or
when it lies under one of the prefixes the administrator allows (`GPUPROV_ALLOWED_ENDPOINTS`;
`make run` sets it to exactly the simulated clouds it serves). Never "any loopback port": the API,
Temporal and PostgreSQL listen on loopback too.

Messages name the field and the rule, never the URL (its userinfo or path may hold a secret).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from providers.base import CloudProvider, InvalidRequest

SETTING = "GPUPROV_ALLOWED_ENDPOINTS"
_DEFAULT_PORTS = {"http": 80, "https": 443}


class EndpointError(ValueError):
    """The URL is malformed or breaks a rule every endpoint must keep (no userinfo, query, ...)."""


@dataclass(frozen=True)
class Endpoint:
    """A URL reduced to what the allow rules compare: scheme, host, effective port, path."""

    scheme: str
    host: str
    port: int
    path: str  # without a trailing "/" ("" for the root)

    def under(self, prefix: Endpoint) -> bool:
        """Same scheme, host and port, and the path is the prefix's or below it (whole segments:
        `/lambda` does not cover `/lambdax`)."""
        return ((self.scheme, self.host, self.port) == (prefix.scheme, prefix.host, prefix.port)
                and (self.path == prefix.path or self.path.startswith(prefix.path + "/")))

    def __str__(self) -> str:
        port = "" if _DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
        return f"{self.scheme}://{host}{port}{self.path}"


def parse(url: str) -> Endpoint:
    """The URL's parts, or EndpointError saying which rule it breaks (never quoting it)."""
    if not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        raise EndpointError("must be a plain ASCII URL without spaces or control characters")
    if "?" in url or "#" in url:
        raise EndpointError("may not have a query (?...) or fragment (#...)")
    if "\\" in url:
        raise EndpointError("may not contain backslashes")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise EndpointError("is not a valid URL (bad host or port)") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise EndpointError("must start with https:// (or http:// for an allowed prefix)")
    if "@" in parts.netloc:
        raise EndpointError("may not contain a user name or password (user:pass@); "
                            "credentials go in the connection's credentials")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise EndpointError("has no host")
    if port == 0:
        raise EndpointError("is not a valid URL (bad host or port)")
    segments = parts.path.split("/")
    if any(s in (".", "..") or "%" in s for s in segments):
        raise EndpointError("may not contain '.', '..' or percent-encoded path segments")
    return Endpoint(scheme=scheme, host=host, port=_DEFAULT_PORTS[scheme] if port is None else port,
                    path=parts.path.rstrip("/"))


def parse_prefixes(text: str | Iterable[str]) -> tuple[str, ...]:
    """The allowed prefixes of the setting (comma-separated), each checked like an endpoint:
    a bad one stops the process at start rather than being silently ignored."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            out.append(str(parse(item)))
        except EndpointError as e:
            raise ValueError(f"{SETTING}: an entry {e}") from None
    return tuple(out)


def documented(cloud: type[CloudProvider]) -> list[str]:
    return [f"https://{h}" for h in cloud.api_hosts]


def check(cloud: type[CloudProvider], url: str | None, allowed: Collection[str]) -> None:
    """InvalidRequest (naming `endpoint`, the rule and the cloud's documented hosts) unless `url`
    is None (the adapter's own default), https on a documented host, or under an allowed prefix."""
    if url is None:
        return
    name = cloud.capabilities.display_name
    try:
        ep = parse(url)
    except EndpointError as e:
        raise InvalidRequest(f"endpoint {e}") from None
    if ep.scheme == "https" and ep.port == 443 and ep.host in {h.lower() for h in cloud.api_hosts}:
        return
    if any(ep.under(parse(p)) for p in allowed):
        return
    hosts = ", ".join(documented(cloud)) or "none (it has no public API)"
    extra = f"{len(allowed)} prefix(es) the administrator allows" if allowed else "no other prefixes"
    raise InvalidRequest(f"endpoint is not allowed for {name}: it must be https on one of its documented "
                         f"API hosts ({hosts}), or lie under a prefix in {SETTING} ({extra})")


# --------------------------------------------------------------------------- webhooks

WEBHOOK_SETTING = "GPUPROV_WEBHOOK_ALLOWLIST"


def split_query(url: str) -> tuple[str, str]:
    """(the URL without its query, the query): a webhook's query may carry its token."""
    base, _, query = url.partition("?")
    return base, query


def webhook_shown(url: str) -> str:
    """The webhook URL as logs and records may show it: never its query (it may hold a token)."""
    base, query = split_query(url)
    try:
        shown = str(parse(base))
    except EndpointError:
        shown = "(an invalid URL)"
    return shown + ("?…" if query else "")


def check_webhook(url: str, allowed: Collection[str]) -> None:
    """EndpointError (naming the rule, never quoting the URL) unless `url` — its query aside — is a
    plain http(s) URL under one of the `allowed` prefixes (GPUPROV_WEBHOOK_ALLOWLIST)."""
    base, query = split_query(url)
    if "#" in query:
        raise EndpointError("may not have a fragment (#...)")
    ep = parse(base)
    if not any(ep.under(parse(p)) for p in allowed):
        extra = f"{len(allowed)} prefix(es) the administrator allows" if allowed else "none is set"
        raise EndpointError(f"is not under a prefix in {WEBHOOK_SETTING} ({extra})")
