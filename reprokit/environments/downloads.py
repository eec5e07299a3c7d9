"""A published file fetched onto the host, and its digest: what datasets.py and published_files.py check a
download by (the md5 or sha256 its publisher lists)."""
from __future__ import annotations

import hashlib
import http.client
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from reprokit.console import duration
from reprokit.errors import UserError
from reprokit.kits.contract.files import atomic_file

DOWNLOAD_TIMEOUT_S = 60
_CHUNK = 1 << 20


def download(url: str, path: Path, log: Callable[[str], object] = print) -> None:
    """Fetch url to path (atomically), saying how far it got about every 10% or 10 s."""
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, atomic_file(path, "wb") as fh:
            total = int(response.headers.get("Content-Length") or 0)
            log(f"downloading {url} ({total / 2**20:,.0f} MiB)" if total else f"downloading {url}")
            done, t0, shown = 0, time.monotonic(), (0.0, 0)
            while chunk := response.read(_CHUNK):
                fh.write(chunk)
                done += len(chunk)
                now = time.monotonic()
                if (total and done * 10 // total > shown[1]) or now - shown[0] >= 10:
                    shown = (now, done * 10 // total if total else 0)
                    rate = done / max(now - t0, 1e-6)
                    left = f", {duration((total - done) / rate)} left" if total else ""
                    share = f" ({done / total:.0%})" if total else ""
                    log(f"  {done / 2**20:,.0f} MiB{share} at {rate / 2**20:,.1f} MiB/s{left}")
    # URLError, HTTPError and timeouts are OSErrors; a cut connection is an HTTPException.
    except (OSError, http.client.HTTPException) as exc:
        raise UserError(f"Downloading {url} failed ({exc}): download it by other means "
                        f"and place it at {path}, then re-run.") from exc


def file_digest(path: Path, algorithm: str) -> str:
    # usedforsecurity=False keeps md5 available on FIPS-restricted hosts.
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
