"""Throwaway certificates for TLS tests, made with the ``openssl`` CLI.

``make_certs(d)`` writes, as ``<name>.pem`` and ``<name>.key``:

- ``ca``: the CA the embedder and its clients trust;
- ``server``: signed by ``ca`` for ``localhost`` and ``127.0.0.1``;
- ``named``: signed by ``ca`` for ``localhost`` only (``127.0.0.1`` does not match it);
- ``client``: a client certificate signed by ``ca``;
- ``other``: a second CA, and ``rogue``: a client certificate it signed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_EXTENSIONS = {
    "server": "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    "named": "subjectAltName=DNS:localhost\n",
    "client": "extendedKeyUsage=clientAuth\n",
    "rogue": "extendedKeyUsage=clientAuth\n",
}
_ISSUERS = {"server": "ca", "named": "ca", "client": "ca", "rogue": "other"}


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d: Path) -> Path:
    for ca in ("ca", "other"):
        openssl("req", "-x509", *_EC, "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
                "-days", "2", "-subj", f"/CN=thatch test {ca}", cwd=d)  # fmt: skip
    for name, extension in _EXTENSIONS.items():
        issuer = _ISSUERS[name]
        (d / f"{name}.ext").write_text(extension)
        openssl("req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem",
                "-CAkey", f"{issuer}.key", "-CAcreateserial", "-out", f"{name}.pem",
                "-days", "2", "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
    return d
