"""``requests.get`` (any Session's request) of a listed published file's URL reads the run's file (urls.py).

Caught at the transport, ``HTTPAdapter.send``, under every Session and ``requests.get``: the response is the
file's bytes with status 200, read whole (``.content``) or streamed (``iter_content``, ``.raw``). A URL in the
mirrors' folders that is not listed is refused, naming it; any other URL goes to the real adapter, which the
network guard refuses. Installed wherever a script imports requests.
"""
from __future__ import annotations

import datetime
from typing import Any

from reprokit.kits.served_data.urls import served
from reprokit.kits.training_loop.staged_data import StagedData


def install(named: StagedData) -> list[str]:
    """requests' adapters serve the listed URLs; the shim's declaration."""
    from requests import adapters, models, structures
    real_send = adapters.HTTPAdapter.send

    def send(adapter: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        path = served(named, request.url)
        if path is None:
            return real_send(adapter, request, *args, **kwargs)
        out = models.Response()
        out.status_code, out.reason, out.url, out.request, out.connection = 200, "OK", request.url, request, adapter
        out.headers = structures.CaseInsensitiveDict({"Content-Type": "application/octet-stream",
                                                      "Content-Length": str(path.stat().st_size)})
        out.raw, out.elapsed = path.open("rb"), datetime.timedelta(0)
        return out
    adapters.HTTPAdapter.send = send
    return ["requests' HTTP adapter serves the published files by URL as urllib does (the run's files; other URLs "
            "in their mirrors' folders refused, naming them; any other URL meets the network guard)"]
