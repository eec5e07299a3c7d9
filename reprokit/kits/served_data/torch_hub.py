"""torch.hub's downloads (pretrained weights: ``torchvision.models.resnet18(weights=...)``, ``torch.hub.load``)
refused where they would fetch a file not in its cache, naming the file. Installed wherever a script imports torch.
"""
from __future__ import annotations

import os
import urllib.parse

from reprokit.kits.contract.named_datasets import not_provided
from reprokit.kits.training_loop.staged_data import NotProvided


def install() -> list[str]:
    """torch.hub fetches what is not in its cache: refused, naming the file; the shim's declaration."""
    import torch.hub

    def download_url_to_file(url, dst, *args, **kwargs):
        raise NotProvided(not_provided(os.path.basename(urllib.parse.urlparse(url).path), url))
    torch.hub.download_url_to_file = download_url_to_file
    return ["torch.hub's downloads (pretrained weights) are refused, naming the file (the run has no network)"]
