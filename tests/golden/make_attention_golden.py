#!/usr/bin/python3
"""Reference values for the Attention op (opset 23): tests/engine/attention_test.cpp reads
tests/golden/attention_golden.json.

Run with /usr/bin/python3 (torch). Each case gives Q, K, V, the optional mask and caches, the
node's attributes and the outputs, computed here in float64 with torch from the ONNX definition:
heads split from packed [B, S, heads * size] inputs, the caches joined before K and V, key/value
head h // (Hq / Hkv) for query head h, scores (q . k) * scale (default 1 / sqrt(size)), the
softcap c * tanh(s / c), a bool mask blocking where false or a float one added, is_causal
blocking keys after i + past, the softmax and the weighted sum of V. A query whose every key is
blocked gets zeros (what ONNX Runtime 1.30 gives). qk_matmul_output is taken after the scale (0),
the softcap (1), the mask (2) or the softmax (3).
"""
import json
import math
import os

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_golden.json")
torch.manual_seed(7)


def attention(q, k, v, mask=None, past=None, scale=None, softcap=0.0, is_causal=False,
              q_heads=None, kv_heads=None, mode=0):
    packed = q.dim() == 3
    if packed:
        def split(x, h):
            b, s, hidden = x.shape
            return x.reshape(b, s, h, hidden // h).transpose(1, 2)
        q, k, v = split(q, q_heads), split(k, kv_heads), split(v, kv_heads)
    if past is not None:
        k = torch.cat([past[0], k], dim=2)
        v = torch.cat([past[1], v], dim=2)
    present_k, present_v = k, v
    hq, hkv = q.shape[1], k.shape[1]
    k = k.repeat_interleave(hq // hkv, dim=1)
    v = v.repeat_interleave(hq // hkv, dim=1)
    sq, t = q.shape[2], k.shape[2]
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else scale
    s = q @ k.transpose(2, 3) * scale
    qk = {0: s}
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qk[1] = s
    bias = torch.zeros(sq, t, dtype=torch.float64)
    if mask is not None:
        if mask.dtype == torch.bool:
            bias = torch.where(mask, 0.0, -math.inf).double() + bias
        else:
            bias = mask + bias
    if is_causal:
        p = 0 if past is None else past[0].shape[2]
        i = torch.arange(sq).reshape(-1, 1)
        j = torch.arange(t).reshape(1, -1)
        bias = bias + torch.where(j > i + p, -math.inf, 0.0).double()
    s = s + bias
    qk[2] = s
    top = s.max(dim=-1, keepdim=True).values
    blocked = torch.isinf(top) & (top < 0)
    w = torch.exp(s - torch.where(blocked, 0.0, top.double()))
    w = torch.where(blocked, 0.0, w / w.sum(dim=-1, keepdim=True))
    qk[3] = w
    y = w @ v
    if packed:
        y = y.transpose(1, 2).reshape(y.shape[0], sq, -1)
    return y, present_k, present_v, qk[mode]


def rnd(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def flat(t):
    return [float(f"{x:.12g}") if isinstance(x, float) else x for x in t.reshape(-1).tolist()]


cases = []


def add(name, q, k, v, mask=None, past=None, attrs=None, outputs=1):
    attrs = attrs or {}
    y, pk, pv, qk = attention(q, k, v, mask, past, scale=attrs.get("scale"),
                              softcap=attrs.get("softcap", 0.0),
                              is_causal=bool(attrs.get("is_causal", 0)),
                              q_heads=attrs.get("q_num_heads"), kv_heads=attrs.get("kv_num_heads"),
                              mode=attrs.get("qk_matmul_output_mode", 0))
    inputs = {"Q": q, "K": k, "V": v}
    if mask is not None:
        inputs["attn_mask"] = mask
    if past is not None:
        inputs["past_key"], inputs["past_value"] = past
    case = {"name": name, "attrs": attrs,
            "inputs": {n: {"shape": list(t.shape), "bool": t.dtype == torch.bool,
                           "values": flat(t)} for n, t in inputs.items()},
            "outputs": {}}
    for o, t in list(zip(["Y", "present_key", "present_value", "qk_matmul_output"],
                         [y, pk, pv, qk]))[:outputs]:
        case["outputs"][o] = {"shape": list(t.shape), "values": flat(t)}
    cases.append(case)


add("basic_4d", rnd(2, 4, 5, 8), rnd(2, 4, 6, 8), rnd(2, 4, 6, 3))
add("grouped_query_packed_bool_mask", rnd(2, 5, 16), rnd(2, 6, 8), rnd(2, 6, 6),
    mask=torch.rand(5, 6) > 0.3, attrs={"q_num_heads": 4, "kv_num_heads": 2})
add("causal_with_past_and_float_mask", rnd(1, 2, 3, 4), rnd(1, 2, 3, 4), rnd(1, 2, 3, 4),
    mask=rnd(1, 1, 3, 6), past=(rnd(1, 2, 3, 4), rnd(1, 2, 3, 4)), attrs={"is_causal": 1},
    outputs=3)
for mode in range(4):
    add(f"scale_softcap_qk_mode_{mode}", rnd(1, 2, 4, 4), rnd(1, 2, 4, 4), rnd(1, 2, 4, 4),
        mask=rnd(4, 4), attrs={"scale": 0.3, "softcap": 1.5, "qk_matmul_output_mode": mode},
        outputs=4)
add("fully_blocked_query", rnd(1, 1, 2, 4), rnd(1, 1, 3, 4), rnd(1, 1, 3, 4),
    mask=torch.tensor([[True, False, True], [False, False, False]]))

with open(OUT, "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")
print(f"wrote {len(cases)} cases to {OUT}")
