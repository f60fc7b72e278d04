#!/usr/bin/python3
"""Golden values for the training tests, computed with PyTorch (run with /usr/bin/python3).

  make_training_golden.py optimizers
      -> tests/golden/training_optimizers.json: weights after each of 6 steps for every optimizer
         configuration, from fixed weights and gradients (tests/training/optimizers_test.cpp).
  make_training_golden.py model MODEL.onnx NAME
      -> tests/golden/training_NAME.json: the loss of the first 20 optimizer steps (MLP: Adam lr
         1e-3; CNN: SGD lr 0.01 momentum 0.9, see model_golden) on the
         first 20 Fashion-MNIST training batches of 64 (in file order, normalized as the examples), starting from MODEL.onnx's
         initial weights (`deepwire export` of the example project; the loss is cross-entropy
         from its logits output), and every
         BatchNormalization running_mean / running_var after those steps
         (tests/training/trainer_test.cpp).

BatchNormalization follows the ONNX spec, not PyTorch's default: running statistics update as
running = running * momentum + batch * (1 - momentum) with the POPULATION variance (divide by N),
so the script tracks them itself instead of relying on torch.nn.BatchNorm2d's unbiased update.
"""
import gzip
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = "/usr/share/datasets/fashion-mnist"


# ---- optimizers ---------------------------------------------------------------------------------

def hf_adamw(params, lr, betas, eps, weight_decay):
    """Hugging Face transformers' AdamW (correct_bias=True), written out."""
    state = {}

    def step(grads):
        with torch.no_grad():
            for p, g in zip(params, grads):
                s = state.setdefault(id(p), {"step": 0, "m": torch.zeros_like(p),
                                             "v": torch.zeros_like(p)})
                s["step"] += 1
                s["m"].mul_(betas[0]).add_(g, alpha=1.0 - betas[0])
                s["v"].mul_(betas[1]).addcmul_(g, g, value=1.0 - betas[1])
                denom = s["v"].sqrt().add_(eps)
                bc1 = 1.0 - betas[0] ** s["step"]
                bc2 = 1.0 - betas[1] ** s["step"]
                step_size = lr * math.sqrt(bc2) / bc1
                p.addcdiv_(s["m"], denom, value=-step_size)
                if weight_decay > 0:
                    p.add_(p, alpha=-lr * weight_decay)
    return step


OPTIMIZER_CASES = [
    ("sgd", {"type": "sgd", "lr": 0.1}),
    ("sgd_momentum", {"type": "sgd", "lr": 0.05, "momentum": 0.9, "dampening": 0.1}),
    ("sgd_nesterov_wd", {"type": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True,
                         "weight_decay": 0.01}),
    ("adam", {"type": "adam", "lr": 0.01}),
    ("adam_wd_amsgrad", {"type": "adam", "lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6,
                         "weight_decay": 0.05, "amsgrad": True}),
    ("adamw_pytorch", {"type": "adamw", "lr": 0.01, "weight_decay": 0.1}),
    ("adamw_huggingface", {"type": "adamw", "lr": 0.01, "weight_decay": 0.1,
                           "adamw_mode": "huggingface"}),
    ("adagrad", {"type": "adagrad", "lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01,
                 "initial_accumulator": 0.1, "eps": 1e-10}),
    ("rmsprop", {"type": "rmsprop", "lr": 0.01, "alpha": 0.9, "eps": 1e-8}),
    ("rmsprop_centered_momentum", {"type": "rmsprop", "lr": 0.01, "alpha": 0.95, "momentum": 0.5,
                                   "centered": True, "weight_decay": 0.01, "eps": 1e-8}),
]


def make_torch_optimizer(cfg, params):
    t = cfg["type"]
    lr = cfg["lr"]
    wd = cfg.get("weight_decay", 0.0)
    eps = cfg.get("eps", 1e-8)
    betas = (cfg.get("beta1", 0.9), cfg.get("beta2", 0.999))
    if t == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.get("momentum", 0.0),
                               dampening=cfg.get("dampening", 0.0),
                               nesterov=cfg.get("nesterov", False), weight_decay=wd)
    if t == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, weight_decay=wd,
                                amsgrad=cfg.get("amsgrad", False))
    if t == "adamw" and cfg.get("adamw_mode", "pytorch") == "pytorch":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    if t == "adamw":
        return hf_adamw(params, lr, betas, eps, wd)
    if t == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, lr_decay=cfg.get("lr_decay", 0.0),
                                   weight_decay=wd,
                                   initial_accumulator_value=cfg.get("initial_accumulator", 0.0),
                                   eps=eps)
    if t == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=cfg.get("alpha", 0.99), eps=eps,
                                   weight_decay=wd, momentum=cfg.get("momentum", 0.0),
                                   centered=cfg.get("centered", False))
    raise ValueError(t)


def optimizers():
    rng = np.random.RandomState(7)
    n, steps = 11, 6
    w0 = rng.uniform(-1, 1, n).astype(np.float32)
    grads = rng.normal(0, 1, (steps, n)).astype(np.float32)
    out = {"w0": w0.tolist(), "grads": grads.tolist(), "cases": []}
    for name, cfg in OPTIMIZER_CASES:
        p = torch.nn.Parameter(torch.tensor(w0))
        opt = make_torch_optimizer(cfg, [p])
        traj = []
        for s in range(steps):
            g = torch.tensor(grads[s])
            if callable(opt):
                opt([g])
            else:
                p.grad = g.clone()
                opt.step()
            traj.append(p.detach().numpy().astype(np.float32).tolist())
        out["cases"].append({"name": name, "config": cfg, "weights": traj})
    # Gradient clipping (torch.nn.utils.clip_grad_norm_) for several norm types.
    clip = []
    for norm_type in [2.0, 1.0, 3.0, float("inf")]:
        gs = [torch.tensor(grads[0][:5]), torch.tensor(grads[1][:7])]
        ps = [torch.nn.Parameter(torch.zeros_like(g)) for g in gs]
        for p, g in zip(ps, gs):
            p.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm=0.5, norm_type=norm_type)
        clip.append({"norm_type": "inf" if math.isinf(norm_type) else norm_type,
                     "max_norm": 0.5, "norm": float(total),
                     "clipped": [p.grad.numpy().tolist() for p in ps]})
    out["clip"] = clip
    path = os.path.join(HERE, "training_optimizers.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print("wrote", path)


# ---- whole models ---------------------------------------------------------------------------

def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


class OnnxTorch:
    """Runs the example models' ONNX graphs in PyTorch, op by op (the small op set they use)."""

    def __init__(self, model):
        from onnx import numpy_helper
        self.graph = model.graph
        self.params = {}
        self.consts = {}
        trainable_skip = set()
        for n in self.graph.node:
            if n.op_type == "BatchNormalization":
                trainable_skip.update(n.input[3:5])
        for init in self.graph.initializer:
            arr = numpy_helper.to_array(init).copy()
            if init.name in trainable_skip or arr.dtype != np.float32:
                self.consts[init.name] = torch.tensor(arr)
            else:
                self.params[init.name] = torch.nn.Parameter(torch.tensor(arr))

    @staticmethod
    def attrs(node):
        from onnx import helper
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def forward(self, feeds, training):
        v = dict(feeds)
        v.update(self.params)
        v.update(self.consts)
        for n in self.graph.node:
            a = self.attrs(n)
            x = [v[i] if i else None for i in n.input]
            op = n.op_type
            if op == "Flatten":
                axis = a.get("axis", 1)
                y = x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)
            elif op == "Gemm":
                A, B = x[0], x[1]
                if a.get("transA", 0):
                    A = A.t()
                if a.get("transB", 0):
                    B = B.t()
                y = a.get("alpha", 1.0) * (A @ B)
                if len(x) > 2 and x[2] is not None:
                    y = y + a.get("beta", 1.0) * x[2]
            elif op == "Relu":
                y = torch.relu(x[0])
            elif op == "Conv":
                pads = a.get("pads", [0, 0, 0, 0])
                assert pads[0] == pads[2] and pads[1] == pads[3]
                y = torch.nn.functional.conv2d(x[0], x[1], x[2] if len(x) > 2 else None,
                                               stride=a.get("strides", [1, 1]),
                                               padding=pads[:2],
                                               dilation=a.get("dilations", [1, 1]),
                                               groups=a.get("group", 1))
            elif op == "MaxPool":
                y = torch.nn.functional.max_pool2d(x[0], a["kernel_shape"],
                                                   stride=a.get("strides", a["kernel_shape"]))
            elif op == "BatchNormalization":
                eps, mom = a.get("epsilon", 1e-5), a.get("momentum", 0.9)
                if training:
                    dims = [0, 2, 3]
                    mean = x[0].mean(dim=dims)
                    var = x[0].var(dim=dims, unbiased=False)
                    y = torch.nn.functional.batch_norm(x[0], None, None, x[1], x[2], True,
                                                       0.0, eps)
                    with torch.no_grad():
                        self.consts[n.input[3]] = self.consts[n.input[3]] * mom + \
                            mean.detach() * (1 - mom)
                        self.consts[n.input[4]] = self.consts[n.input[4]] * mom + \
                            var.detach() * (1 - mom)
                else:
                    y = torch.nn.functional.batch_norm(x[0], x[3], x[4], x[1], x[2], False,
                                                       0.0, eps)
            elif op == "SoftmaxCrossEntropyLoss":
                assert a.get("reduction", "mean") == "mean"
                y = torch.nn.functional.cross_entropy(x[0], x[1])
            elif op == "LogSoftmax":
                y = torch.log_softmax(x[0], dim=a.get("axis", -1))
            elif op == "NegativeLogLikelihoodLoss":
                y = torch.nn.functional.nll_loss(x[0], x[1])
            elif op == "Identity":
                y = x[0]
            else:
                raise NotImplementedError(
                    f"golden script: op {op} ({n.name}) is not mapped; add it to OnnxTorch")
            v[n.output[0]] = y
            for extra in n.output[1:]:
                if extra:
                    v[extra] = None
        return v


def model_golden(onnx_path, name, steps=20, batch=64):
    # The CNN uses SGD with momentum: its conv biases feed BatchNormalization, so their true
    # gradient is zero and what either side computes is rounding noise; Adam divides that noise by
    # its own magnitude and moves the biases by +-lr per step in directions no two
    # implementations share, which shifts the running means. SGD keeps noise-sized updates
    # noise-sized. The MLP uses Adam.
    optimizer = {"type": "sgd", "lr": 0.01, "momentum": 0.9} if name == "cnn" else \
        {"type": "adam", "lr": 1e-3}
    import onnx
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = onnx.load(onnx_path)
    net = OnnxTorch(model)
    images = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
    # The examples' normalization (scripts/make_examples.py): x / 255, then (x - 0.2860) / 0.3530.
    x = images[: steps * batch].astype(np.float64) / 255.0
    x_all = torch.tensor((x - 0.2860) / 0.3530).reshape(-1, 1, 28, 28)
    y_all = torch.tensor(labels[: steps * batch].astype(np.int64))
    # Use float64 so the reference is more exact than the float32 run it checks.
    net.params = {k: torch.nn.Parameter(p.detach().double()) for k, p in net.params.items()}
    net.consts = {k: (c.double() if c.dtype == torch.float32 else c) for k, c in net.consts.items()}
    params = list(net.params.values())
    if optimizer["type"] == "sgd":
        opt = torch.optim.SGD(params, lr=optimizer["lr"], momentum=optimizer["momentum"])
    else:
        opt = torch.optim.Adam(params, lr=optimizer["lr"])
    # The inference export (`deepwire export`): first input the image, first output the logits;
    # the loss is the examples' SparseCategoricalCrossentropy from logits (mean over the batch).
    image = model.graph.input[0].name
    logits = model.graph.output[0].name
    losses = []
    for s in range(steps):
        xb = x_all[s * batch:(s + 1) * batch].double()
        yb = y_all[s * batch:(s + 1) * batch]
        opt.zero_grad()
        v = net.forward({image: xb}, training=True)
        loss = torch.nn.functional.cross_entropy(v[logits], yb)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    stats = {k: net.consts[k].numpy().astype(np.float64).tolist()
             for n in model.graph.node if n.op_type == "BatchNormalization"
             for k in n.input[3:5]}
    out = {"steps": steps, "batch": batch, "optimizer": optimizer, "image_input": image,
           "losses": losses, "running_stats": stats}
    path = os.path.join(HERE, f"training_{name}.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print("wrote", path, "losses", losses[0], "->", losses[-1])


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "optimizers":
        optimizers()
    elif len(sys.argv) == 4 and sys.argv[1] == "model":
        model_golden(sys.argv[2], sys.argv[3])
    else:
        print(__doc__)
        sys.exit(2)
