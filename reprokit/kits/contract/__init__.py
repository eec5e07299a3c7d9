"""What host and kits agree on: the spec types, names, pitfalls, settings keys, the result's head, the
files' layout. Standard library only, and nothing else of reprokit/kits/: the host imports it.
"""
