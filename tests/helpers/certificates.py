"""A self-signed TLS certificate for 127.0.0.1, made with the openssl command, for tests of TLS serving: the one
maker of test certificates (the session fixture ``certificate`` in tests/conftest.py is built on it)."""
import shutil
import subprocess

import pytest


def make_certificate(folder) -> tuple[str, str]:
    """(certificate, key) PEM files in ``folder`` for 127.0.0.1 and localhost; skips the test without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH, so there is no certificate to test TLS with")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost", "-days", "1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    return cert, key
