"""Reaches for the network, as a script that downloads data the kit does not serve (fast.ai's Imagenette)."""
import urllib.request

urllib.request.urlopen("https://s3.amazonaws.com/fast-ai-imageclas/imagenette2-160.tgz", timeout=5)
