"""Certificates for a TLS-only throwaway server, made with the ``openssl`` CLI: a CA and the
server's certificate (ECDSA P-256, PEM, keys PKCS#8 and mode 0600; SAN localhost, 127.0.0.1,
::1; its key usage allows a client's too, as cluster nodes present it to each other). CertMaker is the
tool; the tests' certificates (lmcache_resp_testing.certs in the repository: expired, wrong
host, client ones) are made with it too, and are ServerCerts with more files.
"""

from __future__ import annotations

import fcntl
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lmcache_resp_servers.errors import EXIT_MISSING, LaunchError

__all__ = ["CertMaker", "ServerCerts", "certs_for", "make_once", "make_server_certs"]

MISSING_OPENSSL = "openssl not found: install Debian's package 'openssl' (apt-get install -y openssl)"
SAN_LOCAL = "DNS:localhost, IP:127.0.0.1, IP:::1"
# `openssl ca` takes the config below: one database for every CA of a directory (it only records
# what was issued), extension sections per kind of certificate (CertMaker adds more).
_OPENSSL_CONFIG = f"""\
[req]
distinguished_name = subject
prompt = no
[subject]
CN = unused

[ca]
default_ca = test_ca
[test_ca]
database = ca-db/index.txt
new_certs_dir = ca-db
serial = ca-db/serial
default_md = sha256
policy = any_name
unique_subject = no
copy_extensions = none
[any_name]
commonName = supplied

[ca_cert]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
# clientAuth too: cluster nodes and replicas present the server certificate as clients of each other.
[server_cert]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = {SAN_LOCAL}
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True)
class ServerCerts:
    """A TLS server's certificates (ECDSA P-256, PEM; keys PKCS#8, mode 0600): ``ca`` signs
    ``server_cert`` (SAN localhost, 127.0.0.1, ::1), which the server presents, and the
    ``client_cert`` a client presents where the server asks for one (None: no client
    certificate was made, as for the benchmark's ``--tls``)."""

    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path | None = None
    client_key: Path | None = None

    def client_context(self, *, client_cert: bool = True, verify: bool = True) -> ssl.SSLContext:
        """A stdlib TLS client context trusting ``ca`` only (host names checked), presenting
        ``client_cert`` where there is one unless told not to (a server not asking for one never
        sees it). ``verify=False``: no check of the server's certificate at all."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if verify:
            context.load_verify_locations(cafile=str(self.ca))
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if client_cert and self.client_cert is not None and self.client_key is not None:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context

    def cli_args(self) -> list[str]:
        """redis-cli's TLS options: trust the CA, and present the client certificate where there
        is one (a server that does not ask for one never sees it)."""
        args = ["--tls", "--cacert", str(self.ca)]
        if self.client_cert is not None and self.client_key is not None:
            args += ["--cert", str(self.client_cert), "--key", str(self.client_key)]
        return args


class CertMaker:
    """Makes certificates in ``directory`` with the ``openssl`` CLI: ``ca`` a CA, ``leaf`` a
    certificate it signs for chosen dates and extensions (``config_sections`` adds sections to
    the openssl config). Keys are private from the moment they exist (umask 077)."""

    def __init__(self, directory: Path, config_sections: str = "") -> None:
        if shutil.which("openssl") is None:
            raise LaunchError(MISSING_OPENSSL, EXIT_MISSING)
        self.directory = directory
        shutil.rmtree(directory / "ca-db", ignore_errors=True)
        (directory / "ca-db").mkdir(mode=0o700)
        (directory / "ca-db" / "index.txt").write_text("")
        self.config = directory / "openssl.cnf"
        self.config.write_text(_OPENSSL_CONFIG + config_sections)
        now = time.time()
        # Backdated a day: a clock a little behind another's still finds them valid.
        self.valid = (_openssl_time(now - 86400), _openssl_time(now + 3650 * 86400))

    def run(self, *args: str, env: dict[str, str] | None = None) -> None:
        # umask 077: every key is private from the moment it exists; certificates are chmod'ed open after.
        result = subprocess.run(
            ["openssl", *args], cwd=self.directory, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            env=env, umask=0o077, check=False,
        )
        if result.returncode != 0:
            raise LaunchError(f"openssl {args[0]} failed ({result.returncode}):\n{result.stdout}{result.stderr}")

    def key(self, path: Path) -> None:
        self.run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))

    def ca(self, cert: Path, name: str) -> Path:
        """A self-signed CA certificate; returns its key (``cert`` with the suffix .key)."""
        ca_key = cert.with_suffix(".key")
        self.key(ca_key)
        self.run("req", "-config", str(self.config), "-x509", "-new", "-key", str(ca_key), "-out", str(cert),
                 "-days", "3650", "-subj", f"/CN={name}", "-extensions", "ca_cert")
        cert.chmod(0o644)
        return ca_key

    def leaf(self, cert: Path, key: Path, name: str, extensions: str, issuer: Path, issuer_key: Path,
             dates: tuple[str, str] | None = None) -> None:
        """``cert`` and its new ``key``, signed by ``issuer``, valid for ``dates`` (openssl's
        YYYYMMDDHHMMSSZ; default ``valid``: from yesterday for ten years)."""
        not_before, not_after = dates or self.valid
        self.key(key)
        request = cert.with_suffix(".csr")
        self.run("req", "-config", str(self.config), "-new", "-key", str(key), "-out", str(request),
                 "-subj", f"/CN={name}")
        # `openssl ca`, not `x509 -req`: only it takes both dates (OpenSSL 3.0's x509 has no
        # -not_before), and `x509 -req -days -1` makes notAfter precede notBefore, which webpki
        # (rustls) rejects as InvalidCertValidity before it ever checks for expiry.
        self.run("ca", "-batch", "-config", str(self.config), "-cert", str(issuer), "-keyfile", str(issuer_key),
                 "-in", str(request), "-out", str(cert), "-notext", "-rand_serial", "-extensions", extensions,
                 "-startdate", not_before, "-enddate", not_after)
        request.unlink()
        cert.chmod(0o644)


def _openssl_time(when: float) -> str:
    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(when))


def make_once(directory: Path, marker: str, make: Callable[[Path], None]) -> None:
    """Runs ``make(directory)`` unless ``marker`` is there already (written last, so a directory
    holding it has every file, however many processes raced to fill it: a lock orders them)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / marker).exists():
            make(directory)
            (directory / marker).write_text("")


def make_server_certs(directory: Path) -> ServerCerts:
    """A CA and a server certificate in ``directory`` (ca.crt, server.crt, server.key), made
    unless a complete set is there already."""
    directory = Path(directory).absolute()
    certs = ServerCerts(directory, ca=directory / "ca.crt", server_cert=directory / "server.crt",
                        server_key=directory / "server.key")

    def make(d: Path) -> None:
        maker = CertMaker(d)
        ca_key = maker.ca(certs.ca, "lmcache-resp throwaway CA")
        maker.leaf(certs.server_cert, certs.server_key, "localhost", "server_cert", certs.ca, ca_key)

    make_once(directory, ".complete-server-certs", make)
    return certs


def certs_for(tls: bool | ServerCerts, directory: Path) -> ServerCerts | None:
    """What a ``tls`` option means: a ServerCerts, those; True, certificates made in
    ``directory`` (make_server_certs); False, none (plaintext)."""
    if isinstance(tls, ServerCerts):
        return tls
    return make_server_certs(directory) if tls else None
