#!/usr/bin/python3
"""Exports the zoo's models for bench/zoo/run: torchvision's resnet18, mobilenet_v2 and
efficientnet_b0 (random weights, batch normalization calibrated on random inputs), a 4-layer transformer encoder
(d=256) and a 2-layer LSTM (64 -> 128, 50 steps), each at batch 1 and 8, with torch.onnx at
opset 17. Next to each MODEL.onnx go its input (MODEL.input.npy) and torch's output
(MODEL.torch.npy), so the run can check every runtime's answer.

With `--models wide` (or a list naming them) it also exports a wider set of torchvision
classifiers whose graphs take other paths: SqueezeNet's and GoogLeNet's channel
concatenations and poolings, DenseNet's normalization before each convolution, ShuffleNet's
channel shuffle, MNASNet, MobileNet V3, RegNet's grouped convolutions and ResNet-50.

Usage: /usr/bin/python3 bench/zoo/make_models.py OUT_DIR [--models a,b,...|wide]
(bench/zoo/gpu_compare.py imports the models from here.)
"""
import os
import sys

import numpy as np
import torch
import torchvision


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024,
                                                 batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


class Lstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


WIDE = ["squeezenet1_1", "googlenet", "densenet121", "shufflenet_v2_x1_0", "mnasnet1_0",
        "mobilenet_v3_large", "regnet_x_400mf", "resnet50"]


def wide_model(name):
    kw = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    return getattr(torchvision.models, name)(weights=None, **kw)


def models(extra=()):
    for name in extra:
        yield name, wide_model(name), lambda b: torch.randn(b, 3, 224, 224)
    yield "resnet18", torchvision.models.resnet18(), lambda b: torch.randn(b, 3, 224, 224)
    yield "mobilenet_v2", torchvision.models.mobilenet_v2(), lambda b: torch.randn(b, 3, 224, 224)
    yield ("efficientnet_b0", torchvision.models.efficientnet_b0(),
           lambda b: torch.randn(b, 3, 224, 224))
    yield "transformer", Encoder(), lambda b: torch.randn(b, 128, 256)
    yield "lstm", Lstm(), lambda b: torch.randn(b, 50, 64)


def calibrate(model, make_input):
    """Gives batch normalization the statistics of its inputs, as training would. With the
    initial running statistics (mean 0, variance 1) a random efficientnet_b0's output shrinks to
    about 1e-13, and any answer passes a 1e-4 absolute check."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a plain average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(make_input(8))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "zoo_models"
    asked = []
    if "--models" in sys.argv[:-1]:
        asked = sys.argv[sys.argv.index("--models") + 1].split(",")
    extra = WIDE if asked == ["wide"] else [m for m in asked if m in WIDE]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    for name, model, make_input in models(extra):
        calibrate(model, make_input)
        model.eval()
        for batch in (1, 8):
            path = os.path.join(out, f"{name}_b{batch}")
            if os.path.exists(path + ".onnx"):
                continue
            x = make_input(batch)
            with torch.no_grad():
                y = model(x)
            # Traced with gradients on: torch 1.13's fused transformer path, which has no ONNX
            # export, runs only without them.
            torch.onnx.export(model, (x,), path + ".onnx", opset_version=17,
                              input_names=["input"], output_names=["output"],
                              do_constant_folding=True)
            np.save(path + ".input.npy", x.numpy().astype(np.float32))
            np.save(path + ".torch.npy", y.numpy().astype(np.float32))
            print(f"{path}.onnx", flush=True)


if __name__ == "__main__":
    main()
