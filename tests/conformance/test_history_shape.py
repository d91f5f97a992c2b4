"""No UI copy in a workflow history: the capabilities validation returns (and every allocation's history
records) are behaviour only, and a history recorded before the split — its capabilities carrying the
catalog's tagline and how-to text — still decodes to the same behaviour."""

from __future__ import annotations

import json

from cryptography.fernet import Fernet
from temporalio.api.common.v1 import Payload

from messages.activities import ValidateResult
from providers import listing, registry
from providers.base import Capabilities
from workflows.converter import data_converter

KEY = Fernet.generate_key()  # a key of the secret store's shape
UI_FIELDS = ("tagline", "connect_name", "how_to_connect")


def _validated() -> ValidateResult:
    """What validate_allocation returns when every cloud can serve the request."""
    return ValidateResult(capabilities={c: registry.capabilities(c) for c in registry.placeable()},
                          skipped=[])


def _copy_of_every_cloud() -> list[str]:
    texts = []
    for cloud in registry.placeable():
        card = listing.of(registry.adapter_class(cloud))
        texts += [t for t in (card.tagline, card.how_to_connect) if t]  # (a connect_name is in the name)
    assert len(texts) >= 2 * len(registry.known()), "every cloud has a tagline and a how-to text"
    return texts


async def test_a_validate_result_as_recorded_carries_no_listing_copy() -> None:
    converter = data_converter([KEY])
    [sealed] = await converter.encode([_validated()])
    assert converter.payload_codec is not None
    [recorded] = await converter.payload_codec.decode([sealed])  # the JSON the history holds, unsealed
    text = recorded.data.decode()
    body = json.loads(text)
    assert set(body["capabilities"]) == set(registry.placeable())
    for cloud, caps in body["capabilities"].items():
        assert not set(UI_FIELDS) & set(caps), cloud
        assert caps["display_name"] == registry.capabilities(cloud).display_name  # refusals' name stays
    assert [t for t in _copy_of_every_cloud() if t in text] == []



async def test_an_old_history_with_the_copy_inside_still_decodes_to_the_same_behaviour() -> None:
    old = {"capabilities": {c: {**registry.capabilities(c).model_dump(mode="json"),
                                "tagline": "Old words", "connect_name": "Old", "how_to_connect": "Old how-to"}
                            for c in registry.placeable()},
           "skipped": []}
    payload = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(old).encode())
    [decoded] = data_converter([KEY]).payload_converter.from_payloads([payload], [ValidateResult])
    assert decoded == _validated()
    assert Capabilities.model_config.get("extra", "ignore") == "ignore"
