# The source checkout's version, ahead of any release.
__version__ = "0.99.0.dev0"
_minimum_jaxlib_version = "0.99.0"
