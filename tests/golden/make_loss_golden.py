#!/usr/bin/python3
"""Reference values for every deepwire.losses and deepwire.metrics node (tests/losses/).

Run with /usr/bin/python3 (torch, numpy); writes tests/golden/losses_golden.json. The references
are written here from the Keras definitions, independently of the C++ lowering: torch's own
functions where they compute the same thing (cross-entropies, Huber, MSE, MAE, cosine), numpy
elsewhere. Inputs are float32 values; references are float64, with Keras' float32 constants
(epsilon 1e-7, 1 - epsilon) rounded as the model rounds them.

Each case: kind (loss | metric), type, params, inputs {port: {dtype, shape, data}}, and the
expected value {shape, data}. For metrics the test also splits the batch in two, sums each half's
statistics and finalizes the sums: Keras' stateful accumulation must give the same value.
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "losses_golden.json")
EPS = float(np.float32(1e-7))
ONE_M_EPS = float(np.float32(1.0) - np.float32(1e-7))
rng = np.random.default_rng(1234)
cases = []


def f32(x):
    return np.asarray(x, dtype=np.float32)


def tensor(x, dtype="float"):
    x = np.asarray(x)
    if dtype == "float":
        x = x.astype(np.float32)
        data = [float(str(v)) for v in x.ravel()]  # shortest text that is the same float32
    else:
        x = x.astype(np.int64)
        data = [int(v) for v in x.ravel()]
    return {"dtype": dtype, "shape": list(x.shape), "data": data}


def add(kind, type_, params, inputs, expected, name=""):
    expected = np.asarray(expected, dtype=np.float64)
    cases.append({"kind": kind, "type": type_, "params": params, "name": name or type_,
                  "inputs": inputs, "expected": {"shape": list(expected.shape),
                                                 "data": [float(f"{v:.12g}") for v in expected.ravel()]}})


def probs(n, c):
    z = rng.normal(size=(n, c))
    e = np.exp(z - z.max(-1, keepdims=True))
    return f32(e / e.sum(-1, keepdims=True))


def onehot(labels, c):
    return f32(np.eye(c)[labels])


# --- Loss references (per-sample, float64) -----------------------------------------------------

def mean_last(v):
    return v.mean(-1) if v.ndim >= 2 else v


def ref_mse(p, t, **_):
    return mean_last(F.mse_loss(torch.tensor(p, dtype=torch.float64), torch.tensor(t, dtype=torch.float64), reduction="none").numpy())


def ref_mae(p, t, **_):
    return mean_last(F.l1_loss(torch.tensor(p, dtype=torch.float64), torch.tensor(t, dtype=torch.float64), reduction="none").numpy())


def ref_mape(p, t, **_):
    p, t = p.astype(np.float64), t.astype(np.float64)
    return 100.0 * mean_last(np.abs((t - p) / np.maximum(np.abs(t), EPS)))


def ref_msle(p, t, **_):
    p, t = p.astype(np.float64), t.astype(np.float64)
    return mean_last((np.log(np.maximum(p, EPS) + 1) - np.log(np.maximum(t, EPS) + 1)) ** 2)


def ref_poisson(p, t, **_):
    p, t = p.astype(np.float64), t.astype(np.float64)
    return mean_last(p - t * np.log(p + EPS))


def ref_logcosh(p, t, **_):
    x = p.astype(np.float64) - t.astype(np.float64)
    return mean_last(np.log(np.cosh(x)))


def ref_huber(p, t, delta=1.0, **_):
    v = F.huber_loss(torch.tensor(p, dtype=torch.float64), torch.tensor(t, dtype=torch.float64),
                     reduction="none", delta=delta).numpy()
    return mean_last(v)


def hinge_t(t):
    t = t.astype(np.float64)
    return 2 * t - 1 if np.all((t == 0) | (t == 1)) else t


def ref_hinge(p, t, **_):
    return mean_last(np.maximum(1 - hinge_t(t) * p, 0))


def ref_squared_hinge(p, t, **_):
    return mean_last(np.maximum(1 - hinge_t(t) * p, 0) ** 2)


def ref_categorical_hinge(p, t, **_):
    p, t = p.astype(np.float64), t.astype(np.float64)
    pos = (t * p).sum(-1)
    neg = ((1 - t) * p).max(-1)
    return np.maximum(neg - pos + 1, 0)


def ref_kld(p, t, **_):
    t = np.clip(t.astype(np.float64), EPS, 1)
    p = np.clip(p.astype(np.float64), EPS, 1)
    return (t * np.log(t / p)).sum(-1)


def ref_cosine(p, t, axis=-1, metric=False, **_):
    c = F.cosine_similarity(torch.tensor(p, dtype=torch.float64), torch.tensor(t, dtype=torch.float64), dim=axis).numpy()
    return c if metric else -c


def ref_bce(p, t, from_logits=False, label_smoothing=0.0, **_):
    t = t.astype(np.float64)
    if label_smoothing:
        t = t * (1 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        v = F.binary_cross_entropy_with_logits(torch.tensor(p, dtype=torch.float64), torch.tensor(t),
                                               reduction="none").numpy()
    else:
        q = np.clip(p.astype(np.float64), EPS, ONE_M_EPS)
        v = -(t * np.log(q + EPS) + (1 - t) * np.log(1 - q + EPS))
    return mean_last(v)


def ref_cce(p, t, from_logits=False, label_smoothing=0.0, axis=-1, **_):
    if from_logits:
        x = torch.tensor(np.moveaxis(p, axis, 1), dtype=torch.float64)
        y = torch.tensor(np.moveaxis(t, axis, 1), dtype=torch.float64)
        return F.cross_entropy(x, y, reduction="none", label_smoothing=label_smoothing).numpy()
    t = t.astype(np.float64)
    c = p.shape[axis]
    if label_smoothing:
        t = t * (1 - label_smoothing) + label_smoothing / c
    q = p.astype(np.float64) / p.astype(np.float64).sum(axis, keepdims=True)
    q = np.clip(q, EPS, ONE_M_EPS)
    return -(t * np.log(q)).sum(axis)


def ref_scce(p, t, from_logits=False, **_):
    labels = t.astype(np.int64)
    if labels.ndim == p.ndim:
        labels = labels[..., 0]
    x = torch.tensor(np.moveaxis(p, -1, 1), dtype=torch.float64)
    if from_logits:
        return F.cross_entropy(x, torch.tensor(labels), reduction="none").numpy()
    q = x / x.sum(1, keepdim=True)
    q = torch.clamp(q, EPS, ONE_M_EPS)
    return F.nll_loss(torch.log(q), torch.tensor(labels), reduction="none").numpy()


LOSSES = {
    "MeanSquaredError": ref_mse, "MeanAbsoluteError": ref_mae,
    "MeanAbsolutePercentageError": ref_mape, "MeanSquaredLogarithmicError": ref_msle,
    "Poisson": ref_poisson, "LogCoshError": ref_logcosh, "Huber": ref_huber, "Hinge": ref_hinge,
    "SquaredHinge": ref_squared_hinge, "CategoricalHinge": ref_categorical_hinge,
    "KLDivergence": ref_kld, "CosineSimilarity": ref_cosine, "BinaryCrossentropy": ref_bce,
    "CategoricalCrossentropy": ref_cce, "SparseCategoricalCrossentropy": ref_scce,
}


def align_weight(w, rank):
    w = np.asarray(w, dtype=np.float64)
    if w.ndim == rank + 1:
        w = w[..., 0]
    while w.ndim < rank:
        w = w[..., None]
    return w


def reduce(per, w, reduction):
    v = per * align_weight(w, per.ndim) if w is not None else per
    if reduction == "none":
        return v
    return v.sum() if reduction == "sum" else v.mean()


def loss_case(type_, p, t, params=None, w=None, reduction="mean", target_dtype="float", name=""):
    params = dict(params or {})
    per = LOSSES[type_](p, t, **params)
    inputs = {"prediction": tensor(p), "target": tensor(t, target_dtype)}
    if w is not None:
        inputs["sample_weight"] = tensor(w)
    params["reduction"] = reduction
    add("loss", type_, params, inputs, reduce(per, w, reduction), name)
    # The metric of the same name: the weighted mean of the per-sample values (Keras' Mean).
    mparams = {k: v for k, v in params.items() if k != "reduction"}
    per_m = LOSSES[type_](p, t, metric=True, **mparams) if type_ == "CosineSimilarity" else per
    add("metric", type_, mparams, {k: v for k, v in inputs.items()}, mean_metric(per_m, w), name)


def mean_metric(values, w=None):
    """Keras 3 Mean: per-sample means (non-batch axes averaged), weighted by the sample weights."""
    v = np.asarray(values, dtype=np.float64)
    if w is None:
        per = v.reshape(v.shape[0], -1).mean(1) if v.ndim > 1 else v
        return per.sum() / max(len(per), 1) if v.ndim >= 1 else v
    wb = np.broadcast_to(align_weight(w, v.ndim), v.shape)
    vw = v * wb
    per = vw.reshape(v.shape[0], -1).mean(1) if v.ndim > 1 else vw
    ws = wb.reshape(v.shape[0], -1).mean(1) if v.ndim > 1 else wb
    return per.sum() / ws.sum() if ws.sum() != 0 else 0.0


# --- Losses ------------------------------------------------------------------------------------

N, C = 6, 4
reg_p, reg_t = f32(rng.normal(size=(N, C))), f32(rng.normal(size=(N, C)))
pos_p, pos_t = f32(rng.uniform(0.1, 3, size=(N, C))), f32(rng.uniform(0, 3, size=(N, C)))
weights = f32(rng.uniform(0.2, 2.0, size=(N,)))
for type_ in ["MeanSquaredError", "MeanAbsoluteError", "LogCoshError", "Huber"]:
    loss_case(type_, reg_p, reg_t)
    loss_case(type_, reg_p, reg_t, w=weights, reduction="sum", name=type_ + " weighted sum")
    loss_case(type_, reg_p, reg_t, reduction="none", name=type_ + " none")
    loss_case(type_, reg_t, reg_t, name=type_ + " all correct")
loss_case("Huber", reg_p * 3, reg_t, {"delta": 0.5}, name="Huber delta 0.5")
loss_case("MeanSquaredError", reg_p[:, 0], reg_t[:, 0], w=weights, name="MeanSquaredError rank 1")
loss_case("MeanSquaredError", reg_p, reg_t, w=weights[:, None], name="MeanSquaredError weight N,1")
for type_ in ["MeanAbsolutePercentageError", "MeanSquaredLogarithmicError", "Poisson"]:
    loss_case(type_, pos_p, pos_t)
    loss_case(type_, pos_p, pos_t, w=weights, reduction="sum", name=type_ + " weighted sum")
    loss_case(type_, pos_t, pos_t, name=type_ + " all correct")
loss_case("MeanAbsolutePercentageError", pos_p, f32(np.zeros((N, C))), name="MAPE zero target")

bin_t = f32(rng.integers(0, 2, size=(N, C)))
for type_ in ["Hinge", "SquaredHinge"]:
    loss_case(type_, reg_p, bin_t)
    loss_case(type_, reg_p, bin_t * 2 - 1, name=type_ + " -1/1 targets")
    loss_case(type_, reg_p, bin_t, w=weights, reduction="sum", name=type_ + " weighted sum")
    loss_case(type_, (bin_t * 2 - 1) * 2, bin_t, name=type_ + " all correct")
    loss_case(type_, (1 - bin_t * 2) * 2, bin_t, name=type_ + " all wrong")

labels = rng.integers(0, C, size=(N,))
oh = onehot(labels, C)
p_soft = probs(N, C)
logits = f32(rng.normal(size=(N, C)) * 3)
loss_case("CategoricalHinge", reg_p, oh)
loss_case("CategoricalHinge", oh, oh, name="CategoricalHinge all correct")
loss_case("KLDivergence", p_soft, probs(N, C))
loss_case("KLDivergence", p_soft, p_soft, name="KLDivergence all correct")
loss_case("KLDivergence", p_soft, oh, w=weights, reduction="sum", name="KLDivergence weighted")
loss_case("CosineSimilarity", reg_p, reg_t)
loss_case("CosineSimilarity", reg_p, reg_p * 2, name="CosineSimilarity all correct")
loss_case("CosineSimilarity", f32(rng.normal(size=(3, 4, 2))), f32(rng.normal(size=(3, 4, 2))),
          {"axis": 1}, name="CosineSimilarity axis 1")

loss_case("BinaryCrossentropy", f32(rng.uniform(0.01, 0.99, size=(N, C))), bin_t)
loss_case("BinaryCrossentropy", logits, bin_t, {"from_logits": True}, name="BCE from logits")
loss_case("BinaryCrossentropy", logits, bin_t, {"from_logits": True, "label_smoothing": 0.2},
          w=weights, reduction="sum", name="BCE logits smoothing weighted")
loss_case("BinaryCrossentropy", bin_t, bin_t, name="BCE all correct")
loss_case("BinaryCrossentropy", 1 - bin_t, bin_t, name="BCE all wrong")
loss_case("BinaryCrossentropy", f32([[40.0, -40.0, 0.0]]), f32([[0.0, 1.0, 1.0]]),
          {"from_logits": True}, name="BCE extreme logits")
loss_case("BinaryCrossentropy", f32(rng.uniform(0.01, 0.99, size=(N,))), bin_t[:, 0],
          reduction="none", name="BCE rank 1 none")

loss_case("CategoricalCrossentropy", p_soft, oh)
loss_case("CategoricalCrossentropy", logits, oh, {"from_logits": True}, name="CCE from logits")
loss_case("CategoricalCrossentropy", logits, oh, {"from_logits": True, "label_smoothing": 0.1},
          w=weights, reduction="sum", name="CCE logits smoothing weighted")
loss_case("CategoricalCrossentropy", p_soft, oh, {"label_smoothing": 0.1}, name="CCE smoothing")
loss_case("CategoricalCrossentropy", oh, oh, name="CCE all correct")
loss_case("CategoricalCrossentropy", onehot((labels + 1) % C, C), oh, name="CCE all wrong")
loss_case("CategoricalCrossentropy", f32(rng.normal(size=(2, C, 3))), onehot(rng.integers(0, C, size=(2, 3)), C).transpose(0, 2, 1),
          {"from_logits": True, "axis": 1}, name="CCE logits axis 1")

loss_case("SparseCategoricalCrossentropy", p_soft, labels, target_dtype="int64")
loss_case("SparseCategoricalCrossentropy", logits, labels, {"from_logits": True},
          target_dtype="int64", name="SCCE from logits")
loss_case("SparseCategoricalCrossentropy", logits, labels[:, None], {"from_logits": True},
          w=weights, reduction="sum", target_dtype="int64", name="SCCE logits N,1 weighted")
loss_case("SparseCategoricalCrossentropy", logits, f32(labels), {"from_logits": True},
          name="SCCE float labels")
loss_case("SparseCategoricalCrossentropy", oh, labels, target_dtype="int64", name="SCCE all correct")
loss_case("SparseCategoricalCrossentropy", onehot((labels + 1) % C, C), labels,
          target_dtype="int64", name="SCCE all wrong")
seq_logits = f32(rng.normal(size=(2, 3, C)))
loss_case("SparseCategoricalCrossentropy", seq_logits, rng.integers(0, C, size=(2, 3)),
          {"from_logits": True}, w=f32([1.0, 0.5]), target_dtype="int64", name="SCCE sequence")
loss_case("SparseCategoricalCrossentropy", seq_logits, rng.integers(0, C, size=(2, 3)),
          reduction="none", target_dtype="int64", name="SCCE sequence probs none")

# --- Metrics ------------------------------------------------------------------------------------

def metric(type_, params, inputs, value, name=""):
    add("metric", type_, params, inputs, value, name or type_)


def accuracy_cases():
    p = f32(rng.integers(0, 3, size=(N, 2)))
    t = f32(rng.integers(0, 3, size=(N, 2)))
    metric("Accuracy", {}, {"prediction": tensor(p), "target": tensor(t)}, (p == t).mean())
    metric("Accuracy", {}, {"prediction": tensor(t), "target": tensor(t)}, 1.0, "Accuracy all correct")
    metric("Accuracy", {}, {"prediction": tensor(p, "int64"), "target": tensor(t, "int64"),
                            "sample_weight": tensor(weights)},
           mean_metric((p == t).astype(np.float64), weights), "Accuracy int weighted")

    pb = f32(rng.uniform(size=(N, 3)))
    tb = f32(rng.integers(0, 2, size=(N, 3)))
    eq = (tb == (pb > 0.5)).astype(np.float64)
    metric("BinaryAccuracy", {}, {"prediction": tensor(pb), "target": tensor(tb)}, eq.mean())
    eq7 = (tb == (pb > 0.7)).astype(np.float64)
    metric("BinaryAccuracy", {"threshold": 0.7}, {"prediction": tensor(pb), "target": tensor(tb),
                                                  "sample_weight": tensor(weights)},
           mean_metric(eq7, weights), "BinaryAccuracy threshold weighted")
    metric("BinaryAccuracy", {}, {"prediction": tensor(tb * 0.8 + 0.1), "target": tensor(tb)}, 1.0,
           "BinaryAccuracy all correct")
    metric("BinaryAccuracy", {}, {"prediction": tensor(0.9 - tb * 0.8), "target": tensor(tb)}, 0.0,
           "BinaryAccuracy all wrong")

    lab = rng.integers(0, C, size=(N,))
    hit = (p_soft.argmax(-1) == lab).astype(np.float64)
    metric("CategoricalAccuracy", {}, {"prediction": tensor(p_soft), "target": tensor(onehot(lab, C))}, hit.mean())
    metric("CategoricalAccuracy", {}, {"prediction": tensor(p_soft), "target": tensor(onehot(p_soft.argmax(-1), C))},
           1.0, "CategoricalAccuracy all correct")
    metric("CategoricalAccuracy", {}, {"prediction": tensor(p_soft), "target": tensor(onehot((p_soft.argmax(-1) + 1) % C, C))},
           0.0, "CategoricalAccuracy all wrong")
    metric("SparseCategoricalAccuracy", {}, {"prediction": tensor(p_soft), "target": tensor(lab, "int64")}, hit.mean())
    metric("SparseCategoricalAccuracy", {}, {"prediction": tensor(p_soft), "target": tensor(lab[:, None]),
                                             "sample_weight": tensor(weights)},
           mean_metric(hit, weights), "SparseCategoricalAccuracy float N,1 weighted")
    metric("SparseCategoricalAccuracy", {}, {"prediction": tensor(p_soft), "target": tensor(p_soft.argmax(-1), "int64")},
           1.0, "SparseCategoricalAccuracy all correct")
    metric("SparseCategoricalAccuracy", {}, {"prediction": tensor(p_soft), "target": tensor((p_soft.argmax(-1) + 1) % C, "int64")},
           0.0, "SparseCategoricalAccuracy all wrong")

    top2 = np.argsort(-p_soft, -1)[:, :2]
    hit2 = np.array([lab[i] in top2[i] for i in range(N)], dtype=np.float64)
    metric("TopKCategoricalAccuracy", {"k": 2}, {"prediction": tensor(p_soft), "target": tensor(onehot(lab, C))}, hit2.mean())
    metric("TopKCategoricalAccuracy", {}, {"prediction": tensor(p_soft), "target": tensor(onehot(lab, C))}, 1.0,
           "TopKCategoricalAccuracy k above classes")
    metric("SparseTopKCategoricalAccuracy", {"k": 2}, {"prediction": tensor(p_soft), "target": tensor(lab, "int64"),
                                                       "sample_weight": tensor(weights)},
           mean_metric(hit2, weights), "SparseTopKCategoricalAccuracy weighted")
    worst = np.argsort(p_soft, -1)[:, 0]
    metric("SparseTopKCategoricalAccuracy", {"k": 2}, {"prediction": tensor(p_soft), "target": tensor(worst, "int64")},
           0.0, "SparseTopKCategoricalAccuracy all wrong")


def regression_cases():
    norm = f32(rng.uniform(0.5, 2, size=(N, C)))
    norm[0, 0] = 0
    rel = np.abs(reg_t.astype(np.float64) - reg_p) / np.where(norm == 0, 1, norm)
    rel[norm == 0] = 0
    metric("MeanRelativeError", {}, {"prediction": tensor(reg_p), "target": tensor(reg_t),
                                     "normalizer": tensor(norm)}, mean_metric(rel))
    sq = (reg_p.astype(np.float64) - reg_t) ** 2
    metric("RootMeanSquaredError", {}, {"prediction": tensor(reg_p), "target": tensor(reg_t)},
           np.sqrt(mean_metric(sq)))
    metric("RootMeanSquaredError", {}, {"prediction": tensor(reg_p), "target": tensor(reg_t),
                                        "sample_weight": tensor(weights)},
           np.sqrt(mean_metric(sq, weights)), "RootMeanSquaredError weighted")
    metric("RootMeanSquaredError", {}, {"prediction": tensor(reg_t), "target": tensor(reg_t)}, 0.0,
           "RootMeanSquaredError all correct")
    vals = f32(rng.normal(size=(N,)))
    metric("Mean", {}, {"values": tensor(vals)}, vals.astype(np.float64).mean())
    metric("Mean", {}, {"values": tensor(reg_p), "sample_weight": tensor(weights)},
           mean_metric(reg_p, weights), "Mean rank 2 weighted")
    metric("Mean", {}, {"values": tensor(vals), "sample_weight": tensor(np.zeros(N))}, 0.0,
           "Mean zero weights")
    metric("Sum", {}, {"values": tensor(reg_p)}, reg_p.astype(np.float64).sum())
    metric("Sum", {}, {"values": tensor(reg_p), "sample_weight": tensor(weights)},
           (reg_p.astype(np.float64) * weights[:, None]).sum(), "Sum weighted")
    metric("MeanTensor", {}, {"values": tensor(reg_p)}, reg_p.astype(np.float64))


def confusion(p, t, thresholds, w=None):
    p32 = f32(p).reshape(-1, 1)
    lab = (np.asarray(t).reshape(-1, 1) != 0).astype(np.float64)
    ww = np.ones_like(lab) if w is None else np.broadcast_to(align_weight(w, np.asarray(p).ndim), np.asarray(p).shape).reshape(-1, 1)
    pos = (p32 > f32(thresholds)[None, :]).astype(np.float64)
    tp = (pos * lab * ww).sum(0)
    fp = (pos * (1 - lab) * ww).sum(0)
    tn = ((1 - pos) * (1 - lab) * ww).sum(0)
    fn = ((1 - pos) * lab * ww).sum(0)
    return tp, fp, tn, fn


def div(a, b):
    return np.where(b == 0, 0.0, a / np.where(b == 0, 1, b))


def confusion_cases():
    p = f32(rng.uniform(size=(N, 3)))
    t = f32(rng.integers(0, 2, size=(N, 3)))
    for type_, i in [("TruePositives", 0), ("FalsePositives", 1), ("TrueNegatives", 2), ("FalseNegatives", 3)]:
        metric(type_, {}, {"prediction": tensor(p), "target": tensor(t)}, confusion(p, t, [0.5])[i][0])
        metric(type_, {"thresholds": [0.3, 0.5, 0.7]},
               {"prediction": tensor(p), "target": tensor(t), "sample_weight": tensor(weights)},
               confusion(p, t, [0.3, 0.5, 0.7], weights)[i], type_ + " thresholds weighted")
    tp, fp, tn, fn = confusion(p, t, [0.5])
    for type_, v in [("Precision", div(tp, tp + fp)), ("Recall", div(tp, tp + fn)),
                     ("Specificity", div(tn, tn + fp))]:
        metric(type_, {}, {"prediction": tensor(p), "target": tensor(t)}, v[0])
        metric(type_, {}, {"prediction": tensor(t), "target": tensor(t)}, 1.0, type_ + " all correct")
        metric(type_, {}, {"prediction": tensor(1 - t), "target": tensor(t)}, 0.0, type_ + " all wrong")
    # Empty class: no positive targets (recall has nothing to find) and no positive predictions.
    zeros = f32(np.zeros((N, 3)))
    metric("Recall", {}, {"prediction": tensor(p), "target": tensor(zeros)}, 0.0, "Recall empty class")
    metric("Precision", {}, {"prediction": tensor(zeros), "target": tensor(t)}, 0.0, "Precision empty class")
    # top_k and class_id, as Keras: non-top-k scores become -inf before thresholding.
    pk = f32(rng.uniform(size=(N, C)))
    tk = f32(rng.integers(0, 2, size=(N, C)))
    top = np.argsort(-pk, -1)[:, :2]
    mask = np.zeros_like(pk, dtype=bool)
    for i in range(N):
        mask[i, top[i]] = True
    pf = np.where(mask, pk, -np.inf)
    tp, fp, tn, fn = confusion(pf, tk, [0.5])
    metric("Precision", {"top_k": 2}, {"prediction": tensor(pk), "target": tensor(tk)}, div(tp, tp + fp)[0], "Precision top_k")
    tp, fp, tn, fn = confusion(pf[:, 1], tk[:, 1], [0.5], weights)
    metric("Recall", {"top_k": 2, "class_id": 1},
           {"prediction": tensor(pk), "target": tensor(tk), "sample_weight": tensor(weights)},
           div(tp, tp + fn)[0], "Recall top_k class_id weighted")
    tp, fp, tn, fn = confusion(pk[:, 2], tk[:, 2], [0.3, 0.6])
    metric("Specificity", {"class_id": 2, "thresholds": [0.3, 0.6]},
           {"prediction": tensor(pk), "target": tensor(tk)}, div(tn, tn + fp), "Specificity class_id thresholds")

    def even(n):
        return [0.5] if n == 1 else [0.0] + [(i + 1) * 1.0 / (n - 1) for i in range(n - 2)] + [1.0]

    def at(constrained, dependent, value, p, t, n=200, w=None):
        tp, fp, tn, fn = confusion(p, t, even(n), w)
        rates = {"recall": div(tp, tp + fn), "precision": div(tp, tp + fp), "specificity": div(tn, tn + fp)}
        feasible = rates[constrained] >= f32(value)
        return rates[dependent][feasible].max() if feasible.any() else 0.0

    pa = f32(rng.uniform(size=(16,)))
    ta = f32((rng.uniform(size=(16,)) < pa).astype(np.float32))
    for type_, key, c, d in [("PrecisionAtRecall", "recall", "recall", "precision"),
                             ("RecallAtPrecision", "precision", "precision", "recall"),
                             ("SensitivityAtSpecificity", "specificity", "specificity", "recall"),
                             ("SpecificityAtSensitivity", "sensitivity", "recall", "specificity")]:
        metric(type_, {key: 0.7}, {"prediction": tensor(pa), "target": tensor(ta)}, at(c, d, 0.7, pa, ta))
        w16 = f32(rng.uniform(0.2, 2, size=(16,)))
        metric(type_, {key: 0.6, "num_thresholds": 7},
               {"prediction": tensor(pa), "target": tensor(ta), "sample_weight": tensor(w16)},
               at(c, d, 0.6, pa, ta, 7, w16), type_ + " 7 thresholds weighted")
        metric(type_, {key: 0.5}, {"prediction": tensor(ta), "target": tensor(ta)}, 1.0, type_ + " all correct")
        pm = f32(rng.uniform(size=(8, 3)))
        tm = f32(rng.integers(0, 2, size=(8, 3)))
        metric(type_, {key: 0.5, "class_id": 1}, {"prediction": tensor(pm), "target": tensor(tm)},
               at(c, d, 0.5, pm[:, 1], tm[:, 1]), type_ + " class_id")
    # No threshold reaches the constraint: the value is 0.
    metric("PrecisionAtRecall", {"recall": 1.0, "num_thresholds": 3},
           {"prediction": tensor(f32([0.2, 0.9])), "target": tensor(f32([0.0, 0.0]))}, 0.0,
           "PrecisionAtRecall infeasible")


def iou_value(t, p, classes, ids=None, w=None):
    cm = np.zeros((classes, classes))
    t = np.asarray(t).reshape(-1)
    p = np.asarray(p).reshape(-1)
    ww = np.ones(len(t)) if w is None else np.asarray(w, np.float64).reshape(-1)
    for a, b, x in zip(t, p, ww):
        if 0 <= a < classes and 0 <= b < classes:
            cm[a, b] += x
    tp = np.diag(cm)
    denom = cm.sum(0) + cm.sum(1) - tp
    ids = list(range(classes)) if ids is None else ids
    tp, denom = tp[ids], denom[ids]
    valid = (denom > 1e-9).sum()
    return div(tp, denom).sum() / valid if valid else 0.0


def iou_cases():
    k = 3
    t = rng.integers(0, k, size=(N, 2))
    p = rng.integers(0, k, size=(N, 2))
    metric("IoU", {"num_classes": k, "target_class_ids": [0, 2]},
           {"prediction": tensor(p, "int64"), "target": tensor(t, "int64")}, iou_value(t, p, k, [0, 2]))
    metric("MeanIoU", {"num_classes": k}, {"prediction": tensor(p, "int64"), "target": tensor(t, "int64")},
           iou_value(t, p, k))
    metric("MeanIoU", {"num_classes": k}, {"prediction": tensor(t, "int64"), "target": tensor(t, "int64")},
           1.0, "MeanIoU all correct")
    metric("MeanIoU", {"num_classes": 2}, {"prediction": tensor(np.ones(N), "int64"), "target": tensor(np.zeros(N), "int64")},
           0.0, "MeanIoU all wrong")
    # Class 3 never occurs: it is left out of the mean.
    metric("MeanIoU", {"num_classes": 4}, {"prediction": tensor(p, "int64"), "target": tensor(t, "int64"),
                                           "sample_weight": tensor(weights)},
           iou_value(t, p, 4, None, np.repeat(weights[:, None], 2, 1)), "MeanIoU empty class weighted")
    keep = t != 1
    metric("MeanIoU", {"num_classes": k, "ignore_class": [1]},
           {"prediction": tensor(p, "int64"), "target": tensor(t, "int64")},
           iou_value(t[keep], p[keep], k), "MeanIoU ignore_class")
    scores_t = f32(rng.normal(size=(N, k)))
    scores_p = f32(rng.normal(size=(N, k)))
    metric("IoU", {"num_classes": k, "target_class_ids": [1], "sparse_y_true": False, "sparse_y_pred": False},
           {"prediction": tensor(scores_p), "target": tensor(scores_t)},
           iou_value(scores_t.argmax(-1), scores_p.argmax(-1), k, [1]), "IoU dense")
    metric("OneHotIoU", {"num_classes": k, "target_class_ids": [0, 1]},
           {"prediction": tensor(scores_p), "target": tensor(onehot(t[:, 0], k))},
           iou_value(t[:, 0], scores_p.argmax(-1), k, [0, 1]))
    metric("OneHotMeanIoU", {"num_classes": k},
           {"prediction": tensor(scores_p), "target": tensor(onehot(t[:, 0], k))},
           iou_value(t[:, 0], scores_p.argmax(-1), k))
    pb = f32(rng.uniform(size=(N, 3)))
    tb = rng.integers(0, 2, size=(N, 3))
    metric("BinaryIoU", {}, {"prediction": tensor(pb), "target": tensor(tb)},
           iou_value(tb, (pb >= 0.5).astype(np.int64), 2, [0, 1]))
    metric("BinaryIoU", {"target_class_ids": [1], "threshold": 0.3},
           {"prediction": tensor(pb), "target": tensor(tb)},
           iou_value(tb, (pb >= f32(0.3)).astype(np.int64), 2, [1]), "BinaryIoU class 1 threshold")


accuracy_cases()
regression_cases()
confusion_cases()
iou_cases()

with open(OUT, "w") as f:
    json.dump({"generator": "tests/golden/make_loss_golden.py", "cases": cases}, f, separators=(",", ":"))
    f.write("\n")
print(f"{len(cases)} cases -> {OUT} ({os.path.getsize(OUT)} bytes)")
