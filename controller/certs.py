"""A private CA and a serving certificate for the admission webhook.

The apiserver only calls webhooks over HTTPS and checks the server against the `caBundle` of the
ValidatingWebhookConfiguration. When no certificate is mounted, the controller mints its own CA
and serving certificate at start-up and publishes the CA PEM, which is all a `caBundle` needs; the
CA key is thrown away, so nothing else can ever be signed by it. The clock is a parameter so that
tests can mint certificates for any moment.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALIDITY = datetime.timedelta(days=365)
# Clocks of the apiserver and of this host may disagree a little.
BACKDATE = datetime.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class ServingCertificate:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes = field(repr=False)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _subject_alternative_names(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def generate(
    hosts: Sequence[str],
    *,
    now: datetime.datetime,
    validity: datetime.timedelta = DEFAULT_VALIDITY,
    common_name: str = "ironlb-webhook",
) -> ServingCertificate:
    """A fresh CA and a certificate it signed, valid for `hosts` (DNS names or IP addresses)."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name or address")
    not_before, not_after = now - BACKDATE, now + validity

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{common_name}-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_subject_alternative_names(hosts), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def server_context(cert: ServingCertificate) -> ssl.SSLContext:
    """A TLS server context for `cert`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    use(context, cert)
    return context


def use(context: ssl.SSLContext, cert: ServingCertificate) -> None:
    """Serve `cert` from now on: handshakes after this call present it, connections already
    made keep theirs (ssl can only load a key from a file: a private temp one)."""
    with tempfile.TemporaryDirectory(prefix="ironlb-webhook-") as directory:
        path = os.path.join(directory, "tls.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(cert.cert_pem + cert.key_pem)
        # Into a scratch context first: OpenSSL takes the certificate before it checks the key,
        # so a pair that does not match would leave the live context serving nothing.
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(path)
        context.load_cert_chain(path)


CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"


def load(cert_file: str, key_file: str, ca_file: str | None = None) -> ServingCertificate:
    """A certificate mounted from a Secret (cert-manager, Helm); the CA defaults to the chain,
    also when `ca_file` does not exist (issuers that write no `ca.crt`)."""
    with open(cert_file, "rb") as f:
        cert_pem = f.read()
    with open(key_file, "rb") as f:
        key_pem = f.read()
    ca_pem = cert_pem
    if ca_file and os.path.exists(ca_file):
        with open(ca_file, "rb") as f:
            ca_pem = f.read()
    return ServingCertificate(ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem)


def load_dir(directory: str) -> ServingCertificate:
    """The certificate of a mounted Secret's directory (`tls.crt`, `tls.key`, `ca.crt`)."""
    return load(
        os.path.join(directory, CERT_FILE),
        os.path.join(directory, KEY_FILE),
        os.path.join(directory, CA_FILE),
    )


def fingerprint(directory: str) -> tuple[tuple[str, int, int], ...]:
    """What changes when a mounted Secret is renewed: each file's inode change time and size.
    The kubelet swaps the `..data` link, cert-manager rewrites the Secret: either changes it."""
    found = []
    for name in (CERT_FILE, KEY_FILE, CA_FILE):
        try:
            st = os.stat(os.path.join(directory, name))
        except OSError:
            continue
        found.append((name, st.st_ctime_ns, st.st_size))
    return tuple(found)
