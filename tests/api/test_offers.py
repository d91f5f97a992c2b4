from __future__ import annotations

import httpx

from providers.base import AuthError, RateLimited, Transient
from tests.api.conftest import FakeCloud, connect_fake

URL = "/api/compute/backends/fakecloud/offers"


async def test_offers_need_a_connection(client: httpx.AsyncClient) -> None:
    r = await client.get(URL)
    assert r.status_code == 409 and "connect fakecloud first" in r.json()["detail"]
    r = await client.get("/api/compute/backends/nimbus/offers")
    assert r.status_code == 422 and "known:" in r.text and "fakecloud" in r.text


async def test_offers_are_filtered_and_cheapest_first(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    r = await client.get(URL)
    assert r.status_code == 200
    assert [o["instance_type"] for o in r.json()["items"]] == ["gpu.a10", "gpu.h100"]
    assert r.json()["next_cursor"] is None
    r = await client.get(URL, params={"gpu": "h100", "region": "r2"})
    assert [o["instance_type"] for o in r.json()["items"]] == ["gpu.h100"]
    # a query no offer of the cloud can match is refused with the reason, as planning across clouds
    # skips it with that reason: a region it does not have, spot where it sells none
    for params, reason in [({"spot": "true"}, "Fake Cloud sells no spot instances"),
                           ({"region": "r9"}, "Fake Cloud has no region 'r9'"),
                           ({"region": "r9 \u202e"},
                            "Fake Cloud has no region (value not shown: not an id)")]:
        r = await client.get(URL, params=params)
        assert (r.status_code, r.json()["detail"]) == (422, reason)
    assert (await client.get(URL, params={"spot": "maybe"})).status_code == 422


async def test_provider_errors_map_to_http_with_the_reason(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    FakeCloud.FAIL = RateLimited("slow down", retry_after=7)
    r = await client.get(URL)
    assert r.status_code == 429 and r.headers["retry-after"] == "7" and "slow down" in r.json()["detail"]
    FakeCloud.FAIL = Transient("upstream 503")
    r = await client.get(URL)
    assert r.status_code == 502 and "upstream 503" in r.json()["detail"]
    FakeCloud.FAIL = AuthError("key revoked")
    r = await client.get(URL)
    assert r.status_code == 409 and "key revoked" in r.json()["detail"]


ALL = "/api/compute/offers"


async def test_cross_cloud_offers_need_a_connection(client: httpx.AsyncClient) -> None:
    r = await client.get(ALL)
    assert r.status_code == 409 and "no cloud connected" in r.json()["detail"]


async def test_cross_cloud_offers_name_their_connection_and_every_clouds_answer(
        client: httpx.AsyncClient) -> None:
    conn = await connect_fake(client)
    r = await client.get(ALL, params={"gpu": "h100"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [(o["provider"], o["instance_type"], o["connection_id"]) for o in body["items"]] == [
        ("fakecloud", "gpu.h100", conn["id"])]
    assert body["clouds"] == [{"cloud": "fakecloud", "connection_id": conn["id"], "status": "answered",
                               "offers": 1, "reason": None, "error": None, "retryable": None,
                               "retry_after": None, "cached": False,
                               "seconds": body["clouds"][0]["seconds"]}]
    # Within the cache's lifetime the same connection is not asked again, whatever the GPU filter.
    FakeCloud.FAIL = Transient("would fail if asked")
    again = (await client.get(ALL)).json()
    assert again["clouds"][0]["cached"] and len(again["items"]) == 2


async def test_a_failing_cloud_is_an_answer_not_an_error(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    FakeCloud.FAIL = AuthError("key revoked")
    r = await client.get(ALL)
    assert r.status_code == 200
    assert r.json()["items"] == []
    assert r.json()["clouds"][0]["status"] == "failed" and "key revoked" in r.json()["clouds"][0]["reason"]


async def test_a_region_no_cloud_has_is_a_skip_that_does_not_echo_odd_text(client: httpx.AsyncClient) -> None:
    """The cross-cloud page says why each cloud was not asked; a region that is not an id (a pasted
    line, terminal controls) is not quoted back into the reason the console and CLI print."""
    await connect_fake(client)
    for region, said in [("r9", "'r9'"), ("r9\x1b[2J\u202e", "(value not shown: not an id)")]:
        r = await client.get(ALL, params={"region": region})
        assert r.status_code == 200, r.text
        [answer] = r.json()["clouds"]
        assert (answer["status"], answer["reason"]) == ("skipped", f"Fake Cloud has no region {said}")
