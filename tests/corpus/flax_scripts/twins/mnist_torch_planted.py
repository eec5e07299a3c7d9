"""The PyTorch twin with one layer planted apart: its BatchNorm's epsilon is 1e-3, where Flax's is 1e-5."""
from mnist_torch import main

if __name__ == "__main__":
    main(bn_eps=1e-3)
