"""The PyTorch twin with one layer planted apart: a LeakyReLU where the Keras model has a ReLU."""
from torch import nn

from fashion_torch import main

if __name__ == "__main__":
    main(activation=lambda: nn.LeakyReLU(0.1))
