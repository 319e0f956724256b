"""The webhook serves a renewed certificate without a restart (a real TLS server on loopback)."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path
from typing import Any

import pytest

from controller import certs, webhook

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def write(directory: Path, cert: certs.ServingCertificate, *, ca: bool = True) -> None:
    (directory / "tls.crt").write_bytes(cert.cert_pem)
    (directory / "tls.key").write_bytes(cert.key_pem)
    if ca:
        (directory / "ca.crt").write_bytes(cert.ca_pem)


async def nothing(kind: str) -> list[Any]:
    return []


async def handshake(port: int, ca_pem: bytes) -> bool:
    """Whether a client trusting only `ca_pem` completes a TLS handshake with the server."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except ssl.SSLError:
        return False
    writer.close()
    return True


@pytest.fixture
def first(tmp_path: Path) -> certs.ServingCertificate:
    cert = certs.generate(["127.0.0.1"], now=NOW - datetime.timedelta(days=1))
    write(tmp_path, cert)
    return cert


async def test_a_renewed_certificate_is_served_from_the_next_handshake(
    tmp_path: Path, first: certs.ServingCertificate
) -> None:
    hook = webhook.WebhookServer(
        nothing, "ns", host="127.0.0.1", port=0, certificate=certs.load_dir(str(tmp_path))
    )
    await hook.start()
    try:
        follower = webhook.CertificateFollower(hook, str(tmp_path))
        assert not follower.check()  # nothing changed
        assert await handshake(hook.port, first.ca_pem)
        renewed = certs.generate(["127.0.0.1"], now=NOW - datetime.timedelta(days=1))
        write(tmp_path, renewed)
        assert follower.check()
        assert await handshake(hook.port, renewed.ca_pem)
        assert not await handshake(hook.port, first.ca_pem)
        assert hook.ca_pem == renewed.ca_pem
    finally:
        await hook.stop()


async def test_a_half_written_renewal_keeps_the_current_certificate(
    tmp_path: Path, first: certs.ServingCertificate
) -> None:
    hook = webhook.WebhookServer(
        nothing, "ns", host="127.0.0.1", port=0, certificate=certs.load_dir(str(tmp_path))
    )
    await hook.start()
    try:
        follower = webhook.CertificateFollower(hook, str(tmp_path))
        renewed = certs.generate(["127.0.0.1"], now=NOW - datetime.timedelta(days=1))
        (tmp_path / "tls.crt").write_bytes(renewed.cert_pem)  # the key not yet
        assert not follower.check()
        assert await handshake(hook.port, first.ca_pem)
        (tmp_path / "tls.key").write_bytes(renewed.key_pem)
        (tmp_path / "ca.crt").write_bytes(renewed.ca_pem)
        assert follower.check()
        assert await handshake(hook.port, renewed.ca_pem)
    finally:
        await hook.stop()


def test_a_secret_without_ca_crt_serves_its_chain(tmp_path: Path) -> None:
    cert = certs.generate(["127.0.0.1"], now=NOW)
    write(tmp_path, cert, ca=False)
    loaded = certs.load_dir(str(tmp_path))
    assert loaded.cert_pem == cert.cert_pem and loaded.ca_pem == cert.cert_pem
