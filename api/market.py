"""The API process's side of the cross-cloud offers page (providers/market.py does the asking):
one adapter per connection, built on first use and kept while the connection is unchanged (its
HTTP pool and TLS context serve every later request), and the short per-connection offers cache —
shared with the installation's other API processes through the database."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from activities import metrics
from providers import registry
from providers.base import (
    Capabilities,
    CloudProvider,
    ConnectionOptions,
    InvalidRequest,
    OfferQuery,
    ProviderError,
)
from providers.fleet_addresses import FleetAddresses
from providers.market import (
    DEFAULT_TIMEOUT_S,
    DEFAULT_TTL_S,
    MarketAnswer,
    OfferCache,
    SharedAnswers,
    Source,
    gather_offers,
)
from providers.ssh_fleet import SshFleetProvider
from store import connections, fleets
from store.models import Connection
from store.secrets import SecretBox, SecretError


@dataclass
class Market:
    ttl_s: float = DEFAULT_TTL_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    shared: SharedAnswers | None = None  # the answers every API process finds (store/offer_answers.py)
    cache: OfferCache = field(init=False)
    _adapters: dict[str, tuple[str, CloudProvider]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.cache = OfferCache(ttl_s=self.ttl_s, shared=self.shared)

    def adapter(self, conn: Connection, box: SecretBox, *, installation_id: str,
                allowed_endpoints: Collection[str]) -> CloudProvider:
        """The connection's adapter, rebuilt when its credentials or options changed. Raises
        InvalidRequest when its secret cannot be opened or its cloud refuses the stored settings."""
        fp = connections.fingerprint(conn)
        cached = self._adapters.get(conn.id)
        if cached is not None and cached[0] == fp:
            return cached[1]
        try:
            credentials = connections.credentials_of(box, conn)
        except SecretError as e:
            raise InvalidRequest(f"connection {conn.id}: {e}") from None
        options = ConnectionOptions(endpoint=conn.endpoint, ca_bundle=conn.ca_bundle)
        adapter = metrics.instrument(registry.build(conn.provider, credentials, options=options,
                                                    installation_id=installation_id,
                                                    allowed_endpoints=allowed_endpoints))
        self._adapters[conn.id] = (fp, adapter)
        # The one it replaces may serve a request in flight: it is dropped, not closed (its pool
        # closes when collected).
        return adapter

    def sources(self, conns: Sequence[Connection], box: SecretBox, *, installation_id: str,
                allowed_endpoints: Collection[str]) -> list[Source]:
        def make(conn: Connection) -> Source:
            async def adapter() -> CloudProvider:
                return self.adapter(conn, box, installation_id=installation_id,
                                    allowed_endpoints=allowed_endpoints)
            try:
                caps = registry.capabilities(conn.provider)
            except (ProviderError, ImportError) as e:  # its adapter cannot load in this installation
                reason = e.message if isinstance(e, ProviderError) else f"its adapter cannot load ({e})"

                async def unavailable() -> CloudProvider:
                    raise InvalidRequest(reason)
                return Source(connection_id=conn.id, cloud=conn.provider,
                              capabilities=Capabilities(display_name=conn.provider), adapter=unavailable)
            return Source(connection_id=conn.id, cloud=conn.provider, capabilities=caps, adapter=adapter,
                          fingerprint=connections.fingerprint(conn))
        return [make(c) for c in conns]

    def fleet_sources(self, kind: str, found: Sequence[fleets.SealedFleet], box: SecretBox, *,
                      installation_id: str, addresses: FleetAddresses | None = None) -> list[Source]:
        """Sources for SSH fleets (a fleet kind's adapter over each fleet's hosts), keys opened only
        when an adapter is built, and kept while the fleet is unchanged."""
        caps = registry.capabilities(kind)

        def make(fleet: fleets.SealedFleet) -> Source:
            async def adapter() -> CloudProvider:
                cached = self._adapters.get(fleet.id)
                if cached is not None and cached[0] == fleet.fingerprint:
                    return cached[1]
                try:
                    credentials = fleets.open_fleet(box, fleet)
                except SecretError as e:
                    raise InvalidRequest(f"fleet {fleet.id}: {e}") from None
                built = metrics.instrument(registry.build(kind, credentials, installation_id=installation_id))
                if isinstance(built, SshFleetProvider):
                    built.pin_host_keys(fleet.host_keys, fleet.bastion_host_key)
                    if addresses is not None:  # else the defaults (providers/fleet_addresses.py)
                        built.check_addresses(addresses)
                self._adapters[fleet.id] = (fleet.fingerprint, built)
                return built
            return Source(connection_id=fleet.id, cloud=kind, capabilities=caps, adapter=adapter,
                          fingerprint=fleet.fingerprint)
        return [make(f) for f in found]

    async def offers(self, sources: Sequence[Source], query: OfferQuery) -> MarketAnswer:
        return await gather_offers(sources, query, timeout_s=self.timeout_s,
                                   cache=self.cache if self.ttl_s > 0 else None)

    async def aclose(self) -> None:
        await self.cache.aclose()  # the calls still under way use the adapters closed below
        adapters = [a for _, a in self._adapters.values()]
        self._adapters.clear()
        for adapter in adapters:
            await adapter.aclose()
