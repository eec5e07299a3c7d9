"""Default hyperparameter configuration for the MNIST example."""
import ml_collections


def get_config():
    """Get the default hyperparameter configuration."""
    config = ml_collections.ConfigDict()
    config.data_dir = "data/mnist"     # mnist.npz: x_train, y_train, x_test, y_test
    config.learning_rate = 0.1
    config.momentum = 0.9
    config.batch_size = 32
    config.num_epochs = 2
    config.seed = 0
    return config
