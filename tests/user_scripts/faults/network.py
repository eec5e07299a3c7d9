"""Reaches for the network, as a script that downloads its data does."""
import urllib.request

urllib.request.urlopen("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", timeout=5)
