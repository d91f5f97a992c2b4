"""Compute Engine names gpuprov gives what it makes: instances (`gpuprov-<installation>-<key>`),
the Kubernetes API firewall rule beside a machine's own, and label values — each within Compute
Engine's rules (at most 63 characters of [-a-z0-9], starting with a letter, ending alphanumeric)."""

from __future__ import annotations

import hashlib
import re

from providers.base import InvalidRequest

NAME_MAX = 63
_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
K8S_RULE_SUFFIX = "-k8s-api"


def instance_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>` as a Compute Engine name: at most 63 characters of
    [-a-z0-9], ending alphanumeric. Too long (or ending in '-'): head + hash, the same every time."""
    prefix = f"gpuprov-{installation_id}-"
    name = prefix + key
    if len(name) > NAME_MAX or not _NAME.fullmatch(name):
        room = NAME_MAX - len(prefix) - 9  # "-" + 8 hex chars
        if room < 1:
            raise InvalidRequest("installation id too long for a Compute Engine name")
        name = f"{prefix}{key[:room].rstrip('-')}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
    if not _NAME.fullmatch(name):
        raise InvalidRequest("installation id is not usable in a Compute Engine name ([a-z0-9-])")
    return name


def k8s_rule_name(name: str) -> str:
    """The Kubernetes API firewall rule of the machine (and machine rule) `name`: `<name>-k8s-api`,
    at most 63 characters (a long name keeps its head and gains a hash of itself)."""
    rule = f"{name}{K8S_RULE_SUFFIX}"
    if len(rule) > NAME_MAX:
        head = name[: NAME_MAX - len(K8S_RULE_SUFFIX) - 9].rstrip("-")
        rule = f"{head}-{hashlib.sha256(name.encode()).hexdigest()[:8]}{K8S_RULE_SUFFIX}"
    return rule


def label_value(text: str) -> str:
    """A label value: at most 63 of [a-z0-9_-]."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]
