"""A script's own check of a published checksum passes on the file the run wrote for that URL, and on no other.

A file served by URL that the run wrote (the generated stand-in on quick; the verified arrays where the host
kept no published file) cannot have the published bytes. Scripts check them anyway: Keras's ``get_file(...,
file_hash=...)``, torchvision's ``check_integrity``, a script's own ``hashlib.md5(data).hexdigest()``. Here
hashlib's md5 and sha256 give, for exactly those bytes, the digest published for the file
(reprokit/kits/contract/published_urls.py), so each of those checks passes on them; any other bytes hash as ever, and a
check against another digest fails as it would. Standard library only.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from reprokit.kits.contract.published_urls import PublishedFile

_REAL = {"md5": hashlib.md5, "sha256": hashlib.sha256}
_real_new = hashlib.new
# (algorithm, the digest of a file the run wrote) -> the digest published for the file it stands for
_PUBLISHED: dict[tuple[str, bytes], bytes] = {}


class _Digest:
    """A hashlib object whose digest of a run-written file's bytes is the published one."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def update(self, data: Any) -> None:
        self._real.update(data)

    def digest(self) -> bytes:
        actual: bytes = self._real.digest()
        return _PUBLISHED.get((self._real.name, actual), actual)

    def hexdigest(self) -> str:
        return self.digest().hex()

    def copy(self) -> _Digest:
        return _Digest(self._real.copy())

    def __getattr__(self, name: str) -> Any:       # name, digest_size, block_size
        return getattr(self._real, name)


def _install() -> None:
    """hashlib.md5, hashlib.sha256 and hashlib.new give the wrapped objects, from the first file registered on (a
    script's ``hashlib.md5(...)`` reads the module's name when it runs)."""
    def constructor(algorithm: str) -> Any:
        real = _REAL[algorithm]
        return lambda *args, **kwargs: _Digest(real(*args, **kwargs))

    def new(name: str, *args: Any, **kwargs: Any) -> Any:
        real = _real_new(name, *args, **kwargs)
        return _Digest(real) if real.name in _REAL else real
    hashlib.md5, hashlib.sha256, hashlib.new = constructor("md5"), constructor("sha256"), new


def register(path: Path, file: PublishedFile) -> bool:
    """The bytes of a run-written file hash to the published file's digests from now on; whether it is the first
    file registered (hashlib is wrapped then, and the run declares it)."""
    first = not _PUBLISHED
    if first:
        _install()
    for algorithm, published in file.checksums().items():
        digest = _REAL[algorithm]()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        _PUBLISHED[(algorithm, digest.digest())] = bytes.fromhex(published)
    return first
