"""ptdp's router against Hugging Face's DeepSeek gates (transformers 5.25, the reference venv).

Usage: test_router_deepseek.py ROUTER_PROBE VENV

The gates alone, on random logits (the router weight the identity, so the gates' logits are the
given ones exactly): DeepseekV3TopkRouter (noaux_tc: sigmoid scores, e_score_correction_bias for
the selection only, each group scored by its top-2 biased scores, the topk_group best groups,
weights the unbiased scores normalised and times routed_scaling_factor) and DeepseekV2TopkRouter
(greedy and group_limited_greedy: softmax over all experts, a group scored by its maximum, the
weights the softmax times routed_scaling_factor, never normalised). Each HF config is given to
ptdp's router as the importer maps it:

  V3     sigmoid, expert bias, num_groups n_group, group_topk topk_group, group_score_topk 2,
         topk_scaling_factor routed_scaling_factor (norm_topk_prob true: ptdp normalises k > 1)
  V2     softmax with pre_softmax, scaling routed_scaling_factor; group_limited_greedy adds
         num_groups n_group, group_topk topk_group, group_score_topk 1

The experts chosen must be the same sets and their weights equal to fp32 rounding (HF returns
them unsorted: both sides are compared by expert). Where Megatron's group score (the top
k / group_topk) differs from the HF one, the test also checks that it changes some token's
experts, so group_score_topk is what makes the cases pass. Device-limited routing is checked the
same way, with the devices' groups, and no token may reach more devices than its limit. Exits
77 (skipped) with the reason when the venv is missing.
"""
import json
import os
import subprocess
import sys
import tempfile

PROBE, VENV = sys.argv[1], sys.argv[2]
python = os.path.join(VENV, "bin", "python")
if not os.path.exists(python):
    print(f"SKIP: {VENV} is missing; scripts/install-deps.sh makes it")
    sys.exit(77)
if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
    os.execv(python, [python] + sys.argv)

import torch  # noqa: E402
from transformers.models.deepseek_v2 import configuration_deepseek_v2 as c2  # noqa: E402
from transformers.models.deepseek_v2 import modeling_deepseek_v2 as m2  # noqa: E402
from transformers.models.deepseek_v3 import configuration_deepseek_v3 as c3  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m3  # noqa: E402

TOKENS = 96
failures = []


def hf_route(router, logits, bias=None):
    """The HF gate's (indices, weights) for `logits` [tokens, E]: weight = identity."""
    E = logits.shape[1]
    with torch.no_grad():
        router.weight.copy_(torch.eye(E))
        if bias is not None:
            router.e_score_correction_bias.copy_(bias)
        _, weights, indices = router(logits)
    return indices.tolist(), weights.tolist()


def v3(E, k, n_group, topk_group, scale):
    cfg = c3.DeepseekV3Config(hidden_size=E, num_attention_heads=1, num_key_value_heads=1, n_routed_experts=E,
                              num_experts_per_tok=k, n_group=n_group, topk_group=topk_group, norm_topk_prob=True,
                              routed_scaling_factor=scale)
    ptdp = dict(experts=E, topk=k, score="sigmoid", num_groups=n_group, group_topk=topk_group, group_score_topk=2,
                scaling_factor=scale)
    return m3.DeepseekV3TopkRouter(cfg), ptdp


def v2(E, k, method, n_group, topk_group, scale):
    cfg = c2.DeepseekV2Config(hidden_size=E, num_attention_heads=1, num_key_value_heads=1, n_routed_experts=E,
                              num_experts_per_tok=k, n_group=n_group, topk_group=topk_group, topk_method=method,
                              routed_scaling_factor=scale)
    ptdp = dict(experts=E, topk=k, score="softmax", pre_softmax=True, scaling_factor=scale)
    if method == "group_limited_greedy":
        ptdp.update(num_groups=n_group, group_topk=topk_group, group_score_topk=1)
    return m2.DeepseekV2TopkRouter(cfg), ptdp


def cases():
    g = torch.Generator().manual_seed(40)
    out = []
    # DeepSeek-V3's own shape scaled down (256 experts, 8 groups, 4 kept, k 8, scale 2.5): k /
    # topk_group = 2 is the top-2 as well; then k 6 over 2 groups (Megatron would sum the top 3).
    for name, (E, k, ng, tg, scale) in {"V3 (k 8, 4 of 8 groups)": (64, 8, 8, 4, 2.5),
                                        "V3 (k 6, 2 of 4 groups)": (32, 6, 4, 2, 1.5),
                                        "V3 (k 3, 1 of 4 groups)": (16, 3, 4, 1, 2.5)}.items():
        router, ptdp = v3(E, k, ng, tg, scale)
        logits = torch.randn(TOKENS, E, generator=g) * 2
        bias = torch.rand(E, generator=g) * 0.2 - 0.1
        out.append((name, router, ptdp, logits, bias))
    # DeepSeek-V2-Lite (greedy, 64 experts, k 6, scale 1) and DeepSeek-V2 (group_limited_greedy:
    # 160 experts, 8 groups, 3 kept, k 6, scale 16) scaled down.
    for name, (E, k, method, ng, tg, scale) in {
            "V2-Lite greedy": (64, 6, "greedy", 1, 1, 1.0),
            "V2 group_limited_greedy": (32, 6, "group_limited_greedy", 8, 3, 16.0),
            "V2 group_limited_greedy (k 4, 3 of 8)": (16, 4, "group_limited_greedy", 8, 3, 16.0)}.items():
        router, ptdp = v2(E, k, method, ng, tg, scale)
        out.append((name, router, ptdp, torch.randn(TOKENS, E, generator=g) * 2, None))
    # Device-limited routing (--moe-router-topk-limited-devices 2 over the 4 devices of e = 4, 4
    # experts each): group-limited routing with the groups of the ranks; its reference is V3's gate
    # with n_group the devices, and every token's experts lie on at most 2 devices.
    router, ptdp = v3(16, 4, 4, 2, 1.0)
    ptdp["group_score_topk"] = 0  # Megatron's k / M = 2, V3's top-2 here
    out.append(("device-limited (M 2 of e 4)", router, ptdp, torch.randn(TOKENS, 16, generator=g) * 2,
                torch.rand(16, generator=g) * 0.2 - 0.1))
    return out


def probe(payload):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(payload, f)
    try:
        lines = subprocess.run([PROBE, f.name], check=True, capture_output=True, text=True).stdout.splitlines()
    finally:
        os.unlink(f.name)
    return [json.loads(line) for line in lines]


def by_expert(indices, weights):
    return sorted(zip(indices, weights))


all_cases = cases()
payload, megatron = [], []
for name, router, ptdp, logits, bias in all_cases:
    case = dict(ptdp, logits=logits.tolist(), bias=bias.tolist() if bias is not None else None)
    payload.append(case)
    megatron.append(dict(case, group_score_topk=0) if ptdp.get("group_score_topk") else None)
got = probe(payload)
mega_payload = [m for m in megatron if m is not None]
mega_got = iter(probe(mega_payload)) if mega_payload else iter(())

for (name, router, ptdp, logits, bias), out, mega in zip(all_cases, got, megatron):
    want_i, want_w = hf_route(router, logits, bias)
    if "error" in out:
        failures.append(f"{name}: ptdp refused the router: {out['error']}")
        continue
    bad = 0
    for t in range(TOKENS):
        a, b = by_expert(out["indices"][t], out["probs"][t]), by_expert(want_i[t], want_w[t])
        if [e for e, _ in a] != [e for e, _ in b]:
            bad += 1
            if bad <= 3:
                failures.append(f"{name}: token {t}: experts {[e for e, _ in a]}, HF {[e for e, _ in b]}")
            continue
        for (e, w), (_, hw) in zip(a, b):
            if abs(w - hw) > 1e-6 + 2e-6 * abs(hw):
                failures.append(f"{name}: token {t} expert {e}: weight {w}, HF {hw}")
    print(f"{name}: {TOKENS - bad}/{TOKENS} tokens route as HF's")
    if name.startswith("device-limited"):
        per = ptdp["experts"] // ptdp["num_groups"]
        spread = max(len({e // per for e in row}) for row in out["indices"])
        print(f"  at most {spread} devices per token")
        if spread > ptdp["group_topk"]:
            failures.append(f"{name}: a token reaches {spread} devices, above the limit {ptdp['group_topk']}")
    if mega is None:
        continue
    m_out = next(mega_got)
    k, gt = ptdp["topk"], ptdp["group_topk"]
    if "error" in m_out:
        print(f"  Megatron's group score (top k / group_topk) refuses this router: {m_out['error']}")
        continue
    differs = sum(sorted(m_out["indices"][t]) != sorted(want_i[t]) for t in range(TOKENS))
    megatron_m = k // gt
    same_score = megatron_m == ptdp["group_score_topk"]
    print(f"  Megatron's group score (top {megatron_m}): {differs} tokens differ from HF's")
    if same_score and differs:
        failures.append(f"{name}: Megatron's group score is HF's here, yet {differs} tokens differ")
    if not same_score and not differs:
        failures.append(f"{name}: the group score's size changes no token: the case proves nothing")

for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
