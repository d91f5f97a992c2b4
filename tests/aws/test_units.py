"""The AWS adapter's pieces that need no cloud."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from providers import endpoints
from providers.aws import AwsProvider, user_data
from providers.base import ConnectionOptions, InvalidRequest

ROOT = Path(__file__).resolve().parent.parent.parent
GOOD = {"access_key_id": "AKIAIOSFODNN7EXAMPLE",
        "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}


def test_importing_the_adapter_does_not_import_boto3() -> None:
    code = "import sys, providers.aws; assert 'boto3' not in sys.modules and 'botocore' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})


def test_credentials_are_the_connect_forms_two_fields_and_errors_never_echo_them() -> None:
    assert [f["name"] for f in AwsProvider.credentials_model.form()] == ["access_key_id", "secret_access_key"]
    assert [f["kind"] for f in AwsProvider.credentials_model.form()] == ["text", "secret"]
    with pytest.raises(InvalidRequest) as bad:
        AwsProvider.parse_credentials({**GOOD, "access_key_id": "not a key id!"})
    assert "access_key_id" in bad.value.message and "not a key id" not in bad.value.message
    with pytest.raises(InvalidRequest, match="secret_access_key"):
        AwsProvider.parse_credentials({"access_key_id": GOOD["access_key_id"]})


def test_user_data_authorizes_every_key_as_yaml_strings_and_keeps_the_callers() -> None:
    keys = ["ssh-ed25519 AAAA one", "ssh-ed25519 BBBB two\nruncmd: [reboot]"]
    plain = user_data(keys, None)
    assert plain.startswith("#cloud-config\n")
    assert yaml.safe_load(plain) == {"ssh_authorized_keys": ["ssh-ed25519 AAAA one",
                                                             "ssh-ed25519 BBBB two\nruncmd: [reboot]"]}
    mixed = user_data(keys[:1], "#!/bin/sh\necho hi\n")
    assert "multipart/mixed" in mixed and "text/x-shellscript" in mixed and "text/cloud-config" in mixed


def test_documented_hosts_are_allowed_endpoints_and_others_are_not() -> None:
    endpoints.check(AwsProvider, "https://ec2.us-east-1.amazonaws.com", [])
    endpoints.check(AwsProvider, "https://sts.amazonaws.com", [])
    with pytest.raises(InvalidRequest):
        endpoints.check(AwsProvider, "https://ec2.us-east-1.amazonaws.com.evil.example", [])


def test_a_ca_bundle_is_trusted_besides_the_default_ones() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
    p = AwsProvider(AwsProvider.parse_credentials(GOOD), installation_id="unit0001",
                    options=ConnectionOptions(endpoint="https://ec2.us-east-1.amazonaws.com", ca_bundle=pem))
    p._client("ec2", "us-east-1")
    assert p._ca_file is not None
    text = Path(p._ca_file).read_text()
    assert text.endswith(pem) and text.count("BEGIN CERTIFICATE") > 10  # the default roots stay
    path = p._ca_file
    asyncio.run(p.aclose())
    assert not Path(path).exists()
