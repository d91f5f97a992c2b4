"""A country region plans (issue 17, 9a): `--region FI`, the clouds page's country form, finds Verda's
FIN-0x offers in the merged market answer the planner and the offers page use, as `FIN-01` does. The
merge used to re-filter by region equality and dropped every offer of a country."""

from __future__ import annotations

from providers.base import CloudProvider, OfferQuery
from providers.market import Source, gather_offers
from providers.verda import COUNTRIES, VerdaProvider


def _source(verda: VerdaProvider) -> Source:
    async def made() -> CloudProvider:
        return verda
    return Source(connection_id="verda-1", cloud="verda", capabilities=VerdaProvider.capabilities,
                  adapter=made)


async def test_a_country_region_finds_the_offers_of_its_locations(verda: VerdaProvider) -> None:
    by_country = await gather_offers([_source(verda)], OfferQuery(region="FI", gpu="h100"))
    assert [c.status for c in by_country.clouds] == ["answered"]
    assert by_country.offers and {o.region for o in by_country.offers} <= set(COUNTRIES["FI"])
    by_location = await gather_offers([_source(verda)], OfferQuery(region="FIN-01", gpu="h100"))
    assert by_location.offers and {o.region for o in by_location.offers} == {"FIN-01"}
    fin01 = {(o.instance_type, o.spot) for o in by_country.offers if o.region == "FIN-01"}
    assert fin01 == {(o.instance_type, o.spot) for o in by_location.offers}
    # Another country's locations stay out: the cloud applied the region.
    iceland = await gather_offers([_source(verda)], OfferQuery(region="IS"))
    assert {o.region for o in iceland.offers} <= set(COUNTRIES["IS"])
