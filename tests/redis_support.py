"""A real ``redis-server`` for tests: loopback, a free port, a temporary directory, no persistence.

``RedisServer(tmp).start()`` runs Debian's redis-server (``scripts/ensure_redis.sh`` installs it)
with ``--save ''`` and ``--appendonly no``; :meth:`RedisServer.kill` is ``kill -9`` and
:meth:`RedisServer.start` again brings it back on the same port (empty). Options: a password
(``requirepass``), extra arguments (ACL users), TLS with a throwaway CA (:func:`make_tls`).

:class:`LostReplyProxy` forwards a client's commands to the server but drops the connection before
the first reply reaches the client: the command ran, the client saw a failure (the at-least-once
case of every queue).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REDIS_SERVER = shutil.which("redis-server")
MISSING = (
    "redis-server is not installed: scripts/ensure_redis.sh installs Debian's redis-server "
    "(LOOPENGINE_INSTALL_REDIS=1, as root; .ci/run requires it)"
)


def require_redis_server() -> str:
    """The binary, or skip the test with the reason (visible in pytest's skip summary)."""
    if REDIS_SERVER is None:
        pytest.skip(MISSING)
    return REDIS_SERVER


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Tls:
    """A CA and a server certificate for 127.0.0.1 / localhost signed by it (PEM files)."""

    ca: Path
    cert: Path
    key: Path


def make_tls(folder: Path) -> Tls:
    """A throwaway CA and a server certificate for ``127.0.0.1`` and ``localhost``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder(subject_name=name("test CA"), issuer_name=name("test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert = (
        x509.CertificateBuilder(subject_name=name("localhost"), issuer_name=ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(alt, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    tls = Tls(folder / "ca.pem", folder / "server.pem", folder / "server.key")
    tls.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return tls


class RedisServer:
    """One redis-server process in ``folder`` (see the module docstring)."""

    def __init__(
        self, folder: Path, *, password: str | None = None, tls: Tls | None = None, args: tuple[str, ...] = ()
    ) -> None:
        self.binary = require_redis_server()
        self.folder, self.password, self.tls, self.args = folder, password, tls, args
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, password: str | None = None, user: str = "") -> str:
        """``redis://`` (``rediss://`` with TLS) to this server, with ``password`` if given."""
        scheme = "rediss" if self.tls else "redis"
        secret = f"{user}:{password}@" if password is not None else ""
        return f"{scheme}://{secret}127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        log = self.folder / "redis.log"
        base = [self.binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        base += ["--dir", str(self.folder), "--logfile", str(log), "--daemonize", "no"]
        if self.tls:
            base += ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            base += ["--tls-cert-file", str(self.tls.cert), "--tls-key-file", str(self.tls.key)]
            base += ["--tls-ca-cert-file", str(self.tls.ca)]
        else:
            base += ["--port", str(self.port)]
        if self.password is not None:
            base += ["--requirepass", self.password]
        return base + list(self.args)

    def start(self, same_port: bool = False) -> RedisServer:
        """Start; wait until it accepts connections. A port taken meanwhile is replaced (not on restart)."""
        for _attempt in range(5):
            log = self.folder / "redis.log"
            log.write_text("")
            self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if "Ready to accept connections" in log.read_text():
                    return self
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
            else:
                self.kill()
                raise RuntimeError(f"redis-server did not come up: {log.read_text()}")
            text = log.read_text()
            self.proc = None
            if "Address already in use" not in text:
                raise RuntimeError(f"redis-server exited: {text}")
            if not same_port:
                self.port = free_port()
            time.sleep(0.2)
        raise RuntimeError("redis-server could not listen")

    def kill(self) -> None:
        """``kill -9``: the data is gone with it (no persistence)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class LostReplyProxy:
    """Forwards to ``port``; the first connection's reply never arrives (the connection is cut)."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.cut = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target))
        drop = self.cut == 0
        pushed = threading.Event()

        def client_to_server() -> None:
            with contextlib.suppress(OSError):
                while data := conn.recv(65536):
                    if drop and b"RPUSH" in data.upper():
                        pushed.set()  # before the server can answer it
                    upstream.sendall(data)
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)

        threading.Thread(target=client_to_server, daemon=True).start()
        with conn, upstream, contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if pushed.is_set():
                    self.cut += 1
                    return  # the server ran it; the client never hears back
                conn.sendall(data)

    def close(self) -> None:
        self.listener.close()
