"""The named datasets' published files by URL: ``urllib.request.urlopen`` and ``urlretrieve`` of a listed URL read
the run's file, as JAX's examples fetch MNIST.

The list is closed (reprokit/kits/contract/published_urls.py): MNIST's and Fashion-MNIST's idx files on the mirrors
torchvision, JAX's examples, TFDS and Keras use, Keras's ``mnist.npz`` and the CIFAR tarballs. Each is the run's
file of the dataset in the file's published format (StagedData.published: the generated stand-in on quick, the
staged published file checked against its checksum otherwise), and a script's own check of the published checksum
passes on a file the run wrote (digests.py). A URL in those mirrors' folders that is not listed is refused, naming
it and the list; any other URL goes to the real client, which the network guard refuses, naming the address. The
other clients' layers (requests_session.py, keras_datasets.py) serve through ``served``. Standard library only.
"""
from __future__ import annotations

import email.message
import urllib.request
import urllib.response
from pathlib import Path
from typing import Any

from reprokit.kits.contract import published_urls
from reprokit.kits.served_data import digests
from reprokit.kits.training_loop.staged_data import NotProvided, StagedData


def served(named: StagedData, url: str) -> Path | None:
    """The run's file for a listed URL; None for a URL outside the mirrors' folders; refused for one inside them
    that the list does not hold."""
    file = published_urls.published(url)
    if file is None:
        if published_urls.in_listed_folder(url):
            raise NotProvided(published_urls.not_listed(url))
        return None
    path = named.published(file)
    if named.written(path) and digests.register(path, file):
        named.declared.append("hashlib's md5 and sha256 of a file the run wrote for a listed URL give the published "
                              "file's digests, so a script's own check of them (get_file's file_hash, an md5 of the "
                              "bytes) passes on it; other bytes hash as ever, and staged published files are checked "
                              "against their published checksums")
    return path


def response(path: Path, url: str) -> urllib.response.addinfourl:
    """What urlopen returns for the file: its bytes, its length, status 200."""
    headers = email.message.Message()
    headers["Content-Type"] = "application/octet-stream"
    headers["Content-Length"] = str(path.stat().st_size)
    return urllib.response.addinfourl(path.open("rb"), headers, url, code=200)


def retrieve(named: StagedData, url: str, filename: Any, real: Any, *args: Any, **kwargs: Any) -> Any:
    """urlretrieve through ``real`` (the stdlib's, which reads through urlopen), a served file written outside the
    run's folders set aside for the end of the script."""
    if filename is not None and published_urls.published(url) and named.outside(filename):
        named.set_aside(filename)
        said = (f"the published files the script fetches into {Path(filename).resolve().parent}, outside the run's "
                f"folders, are removed when the script ends (what was there is put back)")
        if said not in named.declared:
            named.declared.append(said)
    return real(url, filename, *args, **kwargs)


def install(named: StagedData) -> list[str]:
    """urllib.request's urlopen and urlretrieve serve the listed URLs; the shims' declarations."""
    real_urlopen, real_urlretrieve = urllib.request.urlopen, urllib.request.urlretrieve

    def urlopen(url: Any, *args: Any, **kwargs: Any) -> Any:
        address = url.full_url if isinstance(url, urllib.request.Request) else str(url)
        path = served(named, address)
        return real_urlopen(url, *args, **kwargs) if path is None else response(path, address)

    def urlretrieve(url: Any, filename: Any = None, *args: Any, **kwargs: Any) -> Any:
        return retrieve(named, str(url), filename, real_urlretrieve, *args, **kwargs)
    urllib.request.urlopen, urllib.request.urlretrieve = urlopen, urlretrieve   # the stdlib's urlretrieve calls ours
    return [f"urllib.request's urlopen and urlretrieve of the published files by URL ({published_urls.LIST}) read "
            f"the run's files in their published formats; other URLs in those mirrors' folders are refused, naming "
            f"them, and any other URL meets the network guard"]
