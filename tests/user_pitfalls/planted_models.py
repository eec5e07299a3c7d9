"""The user's own small CNN in both frameworks; "softmax" in options["plant"] ends the PyTorch one in a
softmax that CrossEntropyLoss does not expect."""


def torch_model(options, input_size, num_classes):
    from torch import nn
    width = options["width"]
    layers = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
              nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
              nn.Flatten(), nn.Linear(width, num_classes)]
    if "softmax" in options["plant"]:
        layers.append(nn.Softmax(dim=1))
    return nn.Sequential(*layers)


def keras_model(options, input_size, num_classes):
    import keras
    from keras import layers
    width = options["width"]
    inputs = keras.Input((input_size, input_size, 3))
    x = layers.Conv2D(width, 3, padding="same", activation="relu")(inputs)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Conv2D(width, 3, padding="same", activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x))
