"""Pure helpers: nvidia-smi parsing, idempotency keys, failover scopes, error mapping."""

from __future__ import annotations

import pytest

from activities.errors import to_application_error
from activities.ssh import parse_nvidia_smi
from messages.ids import attempt_key
from providers.base import (
    AuthError,
    CapacityError,
    FailureScope,
    LaunchSpec,
    Offer,
    Ownership,
    RateLimited,
    Transient,
)
from workflows.search_attributes import dev_server_args


def test_nvidia_smi_parsing_maps_unsupported_fields_to_none() -> None:
    out = ("0, NVIDIA H100 80GB HBM3, 81559, GPU-abc, 550.54.15\n"
           "1, NVIDIA H100 80GB HBM3, [N/A], [Not Supported], N/A\n\n")
    gpus = parse_nvidia_smi(out)
    assert [(g.index, g.memory_mib, g.uuid, g.driver_version) for g in gpus] == [
        (0, 81559, "GPU-abc", "550.54.15"), (1, None, None, None)]
    assert parse_nvidia_smi("") == []
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_nvidia_smi("garbage")


def test_attempt_keys_are_valid_stable_and_distinct_per_attempt() -> None:
    k1, k2 = attempt_key("Al_123/XY", 1), attempt_key("Al_123/XY", 2)
    assert k1 == attempt_key("Al_123/XY", 1) and k1 != k2
    for key in (k1, attempt_key("x" * 200, 999), attempt_key("___", 1)):
        LaunchSpec(key=key, owner=Ownership(installation_id="i", allocation_id="a"), ssh_public_keys=["k"])


def test_a_structured_scope_blocks_only_what_it_names() -> None:
    def offer(**kw: object) -> Offer:
        fields: dict[str, object] = dict(provider="aws", instance_type="p5", vcpus=1, memory_gib=1,
                                         region="us-east-1", zone="us-east-1a", price_per_hour=1,
                                         connection_id="c1")
        return Offer.model_validate({**fields, **kw})

    p5_east = FailureScope(provider="aws", region="us-east-1", instance_type="p5")
    assert p5_east.covers(offer()) and p5_east.covers(offer(zone="us-east-1b"))
    assert not p5_east.covers(offer(instance_type="g5"))  # another type in that region is still tried
    assert not p5_east.covers(offer(region="us-west-2"))
    on_c1 = FailureScope(provider="aws", connection_id="c1")
    assert on_c1.covers(offer()) and not on_c1.covers(offer(connection_id="c2"))  # a second account
    assert FailureScope.parse("aws/us-east-1/us-east-1a").covers(offer())
    assert not FailureScope.parse("aws/us-east-1/us-east-1b").covers(offer())
    assert str(p5_east) == "aws/us-east-1/p5"



def test_provider_errors_map_to_retry_decisions() -> None:
    cap = to_application_error(CapacityError("none left", scope="aws/us-east-1"))
    assert cap.type == "CapacityError" and cap.non_retryable
    named = FailureScope.model_validate(cap.details[0]["scope"])
    assert named == FailureScope(provider="aws", region="us-east-1")
    assert to_application_error(AuthError("bad key")).non_retryable
    assert not to_application_error(Transient("503")).non_retryable
    rl = to_application_error(RateLimited("slow down", retry_after=7))
    assert not rl.non_retryable and rl.next_retry_delay is not None
    assert rl.next_retry_delay.total_seconds() == 7


def test_dev_server_args_register_every_attribute_as_keyword() -> None:
    args = dev_server_args()
    assert args.count("--search-attribute") == 4 and "GpuprovPhase=Keyword" in args
