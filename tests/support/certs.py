"""Test certificates made with `cryptography`: a CA, a server certificate for
127.0.0.1/localhost, and client certificates (mutual TLS), written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    """A CA that signs server and client certificates into `directory`."""

    directory: Path
    name: str
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @property
    def cert(self) -> Path:
        return self.directory / f"{self.name}.crt"

    @classmethod
    def create(cls, directory: Path, name: str = "ca") -> Authority:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"m3grpc test {name}")])
        certificate = (
            _builder(subject, subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        authority = cls(directory, name, key, certificate)
        authority.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return authority

    def server(self, name: str = "server") -> Pair:
        """A server certificate for 127.0.0.1, ::1 and localhost."""
        names = x509.SubjectAlternativeName(
            [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1")),
            ]
        )
        return self._issue(name, "localhost", ExtendedKeyUsageOID.SERVER_AUTH, names)

    def client(self, common_name: str) -> Pair:
        """A client certificate whose subject common name is `common_name`."""
        return self._issue(f"client-{common_name}", common_name, ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(
        self,
        name: str,
        common_name: str,
        usage: x509.ObjectIdentifier,
        alternative: x509.SubjectAlternativeName | None = None,
    ) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        builder = _builder(subject, self.certificate.subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if alternative is not None:
            builder = builder.add_extension(alternative, critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        pair = Pair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        pair.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return pair


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
    )
