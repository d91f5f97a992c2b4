"""A key rotation reseals fleet keys (the fleet's and its bastion's) with the current key."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session

from store import fleets, ids
from store.models import Fleet
from store.rekey import reseal_all
from store.secrets import SecretBox, SecretError


def test_reseal_moves_fleet_keys_to_the_current_key(engine: sa.Engine) -> None:
    old, new = Fernet.generate_key(), Fernet.generate_key()
    with Session(engine) as s:
        fleets.save_fleet(s, SecretBox(old), fleet_id="f1", project="default", name="rack", user="ubuntu",
                          port=22, hosts=["10.0.0.1"], private_key="fleet-key-text",
                          bastion=fleets.Bastion(host="10.0.0.9", port=22, user="jump",
                                                 private_key="bastion-key-text"),
                          new_host_id=ids.new_id)
    assert reseal_all(engine, SecretBox.from_ring([new, old])) == 1
    with Session(engine) as s:
        row = s.get(Fleet, "f1")
        assert row is not None and row.bastion_secret is not None
        assert SecretBox(new).open_text(row.secret) == "fleet-key-text"
        assert SecretBox(new).open_text(row.bastion_secret) == "bastion-key-text"
        with pytest.raises(SecretError):
            SecretBox(old).open_text(row.secret)
