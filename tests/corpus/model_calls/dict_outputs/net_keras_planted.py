"""The Keras twin with one layer planted apart: its BatchNorm keeps Keras's default epsilon, 1e-3."""
from net_keras import main

if __name__ == "__main__":
    main(bn_epsilon=1e-3)
