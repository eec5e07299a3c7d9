# The examples of a library's repository, a package: run from the repository's root as
# `python -m examples.mnist_classifier`.
