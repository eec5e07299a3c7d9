"""The user's own small CNN in both frameworks. options["plant"] can plant, in the PyTorch one:

- "softmax": it ends in a softmax that CrossEntropyLoss does not expect;
- "keep-activations": forward hooks keep every batch's first feature maps, before and after their ReLU,
  to plot them later.
"""


def torch_model(options, input_size, num_classes):
    from torch import nn
    width = options["width"]
    layers = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
              nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
              nn.Flatten(), nn.Linear(width, num_classes)]
    if "softmax" in options["plant"]:
        layers.append(nn.Softmax(dim=1))
    model = nn.Sequential(*layers)
    if "keep-activations" in options["plant"]:
        kept = []
        for layer in model[:2]:
            layer.register_forward_hook(lambda module, args, out: kept.append(out.detach().clone()))
    return model


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
