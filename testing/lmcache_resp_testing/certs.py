"""The test certificates, bad ones included: what the TLS tests of every suite trust, present
and refuse.

make_test_certs(DIR) makes them with the ``openssl`` CLI (ECDSA P-256, PEM, keys PKCS#8 and mode
0600), unless DIR holds a complete set already: ca.crt (the test CA) signs server.crt/.key (SAN
localhost, 127.0.0.1, ::1; also a client certificate, as cluster nodes present it to each
other), client.crt/.key, expired.crt/.key (same SAN, valid only in January 2020) and
wrong-host.crt/.key (valid only for wrong.example); other-ca.crt, which no server trusts, signs
other-client.crt/.key; client-encrypted.key is client.key as encrypted PKCS#8, its passphrase in
client-encrypted.pass. The Rust tests read the same files (``python -m lmcache_resp_testing
certs DIR``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lmcache_resp_servers.certs import CertMaker, ServerCerts, make_once

__all__ = ["TEST_KEY_PASSPHRASE", "TestCerts", "make_test_certs"]

# The passphrase of TestCerts.encrypted_client_key: a test secret, also in DIR/client-encrypted.pass
# for harnesses in other languages.
TEST_KEY_PASSPHRASE = "lmcache-resp test key passphrase"
# Written last: a directory holding it has every file, however many processes raced to fill it.
_COMPLETE = ".complete"
# The kinds of certificate beside the CA's and the server's (CertMaker's openssl config has those).
_CONFIG_SECTIONS = """
[wrong_host_cert]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:wrong.example
authorityKeyIdentifier = keyid
[client_cert]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""
_EXPIRED = ("20200101000000Z", "20200201000000Z")


@dataclass(frozen=True, kw_only=True)
class TestCerts(ServerCerts):
    """The files make_test_certs writes: ServerCerts (what the launcher takes, its client
    certificate too) with the bad ones beside. The good ones: ``ca`` signs ``server_cert`` (SAN
    localhost, 127.0.0.1, ::1) and ``client_cert``. The bad ones: ``expired_cert`` (same SAN,
    by the same CA, valid only in January 2020), ``wrong_host_cert`` (by the same CA, valid only
    for wrong.example), ``other_client_cert`` (by ``other_ca``, which no server trusts),
    ``encrypted_client_key`` (``client_key`` encrypted with ``passphrase``)."""

    __test__ = False  # not a pytest test class, whatever its name

    # ServerCerts' own, made here for every set: no longer optional (field(): no default).
    client_cert: Path = field()
    client_key: Path = field()
    expired_cert: Path
    expired_key: Path
    wrong_host_cert: Path
    wrong_host_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path
    encrypted_client_key: Path
    passphrase: str = field(default=TEST_KEY_PASSPHRASE, repr=False)

    @classmethod
    def in_directory(cls, directory: Path) -> TestCerts:
        """The paths make_test_certs uses in ``directory`` (whether or not the files exist)."""
        d = Path(directory).absolute()
        return cls(
            d, ca=d / "ca.crt", server_cert=d / "server.crt", server_key=d / "server.key",
            client_cert=d / "client.crt", client_key=d / "client.key",
            expired_cert=d / "expired.crt", expired_key=d / "expired.key",
            wrong_host_cert=d / "wrong-host.crt", wrong_host_key=d / "wrong-host.key",
            other_ca=d / "other-ca.crt", other_client_cert=d / "other-client.crt",
            other_client_key=d / "other-client.key", encrypted_client_key=d / "client-encrypted.key",
        )


def make_test_certs(directory: Path) -> TestCerts:
    """TestCerts in ``directory``, generated with the ``openssl`` CLI unless a complete set is
    there already (so concurrent callers share one set: a lock file orders them)."""
    certs = TestCerts.in_directory(directory)
    make_once(certs.directory, _COMPLETE, lambda _: _generate(certs))
    return certs


def _generate(certs: TestCerts) -> None:
    maker = CertMaker(certs.directory, _CONFIG_SECTIONS)
    ca_key = maker.ca(certs.ca, "lmcache-resp test CA")
    maker.leaf(certs.server_cert, certs.server_key, "localhost", "server_cert", certs.ca, ca_key)
    maker.leaf(certs.client_cert, certs.client_key, "lmcache-resp test client", "client_cert", certs.ca, ca_key)
    maker.leaf(certs.expired_cert, certs.expired_key, "localhost", "server_cert", certs.ca, ca_key, _EXPIRED)
    maker.leaf(certs.wrong_host_cert, certs.wrong_host_key, "wrong.example", "wrong_host_cert", certs.ca, ca_key)
    other_ca_key = maker.ca(certs.other_ca, "lmcache-resp untrusted CA")
    maker.leaf(certs.other_client_cert, certs.other_client_key, "lmcache-resp untrusted client", "client_cert",
               certs.other_ca, other_ca_key)
    # The passphrase reaches openssl through its environment, never its command line.
    maker.run("pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(certs.client_key),
              "-out", str(certs.encrypted_client_key), "-passout", "env:LMCACHE_RESP_TEST_KEY_PASSPHRASE",
              env=dict(os.environ, LMCACHE_RESP_TEST_KEY_PASSPHRASE=certs.passphrase))
    passphrase_file = certs.encrypted_client_key.with_suffix(".pass")
    fd = os.open(passphrase_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(certs.passphrase)
