"""Only a fleet's latest probe records answers: an older one finishing late changes nothing."""

from __future__ import annotations

import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session

from messages.fleet import HostProbe
from store import fleets, ids
from store.secrets import SecretBox


def test_an_older_probe_never_overwrites_the_latest(engine: sa.Engine) -> None:
    box = SecretBox(Fernet.generate_key())
    with Session(engine) as s:
        kw = dict(fleet_id="f1", project="default", name="rack", user="ubuntu", port=22, hosts=["10.0.0.1"],
                  bastion=None, new_host_id=ids.new_id)
        fleets.save_fleet(s, box, private_key="k", probe_id="p1", **kw)  # type: ignore[arg-type]
        fleets.save_fleet(s, box, private_key=None, probe_id="p2", **kw)  # type: ignore[arg-type]
        [host] = fleets.hosts_of(s, "f1")
        latest = HostProbe(host_id=host.id, reachable=True, gpu_count=1, gpu_summary="1× A10 (22GB)")
        assert fleets.record_probe(s, latest, "p2")
        stale = HostProbe(host_id=host.id, reachable=False, reason="timed out")
        assert not fleets.record_probe(s, stale, "p1")
        [host] = fleets.hosts_of(s, "f1")
        assert host.reachable is True and host.gpu_summary == "1× A10 (22GB)" and host.reason is None


def test_an_edit_without_the_bastions_key_keeps_it_for_the_same_bastion_only(engine: sa.Engine) -> None:
    """The console's edit form never shows a saved key: saving it blank must not drop the bastion's
    own key (it did: the bastion then fell back to the fleet's key and stopped admitting it)."""
    box = SecretBox(Fernet.generate_key())
    with Session(engine) as s:
        kw = dict(fleet_id="f1", project="default", name="rack", user="ubuntu", port=22, hosts=["10.0.0.1"],
                  new_host_id=ids.new_id)
        fleets.save_fleet(s, box, private_key="k", bastion=fleets.Bastion("jump", 22, "ops", "bastion-key"),
                          **kw)  # type: ignore[arg-type]
        fleets.save_fleet(s, box, private_key=None, bastion=fleets.Bastion("jump", 22, "admin", None),
                          **kw)  # type: ignore[arg-type]
        row = fleets.get_fleet(s, "default", "f1")
        assert row is not None and row.bastion_user == "admin" and row.bastion_secret is not None
        assert box.open_text(row.bastion_secret) == "bastion-key"
        fleets.save_fleet(s, box, private_key=None, bastion=fleets.Bastion("other", 22, "admin", None),
                          **kw)  # type: ignore[arg-type]
        row = fleets.get_fleet(s, "default", "f1")
        assert row is not None and row.bastion_host == "other"
        assert row.bastion_secret is None  # another bastion: the fleet's key
