"""Image classification on CIFAR-10 with Hugging Face Accelerate, in the shape of Accelerate's cv_example.

Run with:  accelerate launch --multi_gpu --num_processes 2 cv_example.py --cpu

The same script runs on one CPU, one GPU or several: `accelerate launch` starts the processes and the Accelerator
prepares the model, optimizer, loaders and scheduler for them. Each process trains on its own shard of the
training set; the evaluation's predictions are gathered from every process (gather_for_metrics drops the
samples the last batch repeats) before the accuracy is computed. `--cpu` keeps every process on the CPU (with
--multi_gpu on a machine without GPUs, the processes join a gloo group).
"""
import argparse

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.optim.lr_scheduler import OneCycleLR
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


class SmallCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(32 * 8 * 8, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def training_function(config, args):
    # Initialize accelerator
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)

    # Sample hyper-parameters for learning rate, batch size, seed and a few other HPs
    lr = config["lr"]
    num_epochs = int(config["num_epochs"])
    seed = int(config["seed"])
    batch_size = int(config["batch_size"])
    set_seed(seed)

    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    train_tfm = transforms.Compose([transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                    transforms.Normalize(mean, std)])
    eval_tfm = transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean, std)])
    # the main process downloads first, the others then read the files
    with accelerator.main_process_first():
        train_dataset = datasets.CIFAR10(args.data_dir, train=True, download=True, transform=train_tfm)
        eval_dataset = datasets.CIFAR10(args.data_dir, train=False, download=True, transform=eval_tfm)

    train_dataloader = DataLoader(train_dataset, shuffle=True, batch_size=batch_size, num_workers=1)
    eval_dataloader = DataLoader(eval_dataset, shuffle=False, batch_size=batch_size, num_workers=1)

    model = SmallCNN()
    optimizer = torch.optim.Adam(params=model.parameters(), lr=lr / 25)
    lr_scheduler = OneCycleLR(optimizer=optimizer, max_lr=lr, epochs=num_epochs,
                              steps_per_epoch=len(train_dataloader))

    # Prepare everything: there is no specific order to remember, just unpack the objects in the same order
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )

    for epoch in range(num_epochs):
        model.train()
        for step, (inputs, labels) in enumerate(train_dataloader):
            outputs = model(inputs)
            loss = F.cross_entropy(outputs, labels)
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()

        model.eval()
        accurate = 0
        num_elems = 0
        for step, (inputs, labels) in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(inputs)
            predictions = outputs.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, labels))
            accurate_preds = predictions == references
            num_elems += accurate_preds.shape[0]
            accurate += accurate_preds.long().sum()

        eval_metric = accurate.item() / num_elems
        accelerator.print(f"epoch {epoch}: {100 * eval_metric:.2f}")

    accelerator.wait_for_everyone()
    accelerator.save_model(model, args.output_dir)


def main():
    parser = argparse.ArgumentParser(description="Simple example of a training script.")
    parser.add_argument("--data_dir", default="data", help="The data folder; CIFAR-10 is downloaded there.")
    parser.add_argument("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16", "fp8"],
                        help="Whether to use mixed precision.")
    parser.add_argument("--cpu", action="store_true", help="If passed, will train on the CPU.")
    parser.add_argument("--output_dir", type=str, default="cifar10_cnn", help="Where the trained model is saved.")
    parser.add_argument("--num_epochs", type=int, default=3)
    args = parser.parse_args()
    config = {"lr": 3e-2, "num_epochs": args.num_epochs, "seed": 42, "batch_size": 64}
    training_function(config, args)


if __name__ == "__main__":
    main()
