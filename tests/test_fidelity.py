"""Same file, same tokens: our logits and greedy outputs against llama.cpp's (tests/data/reference)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import CORPUS, REFERENCE, f16_perplexity_rows, greedy_rows, llm_for

# Fast numerics (the default). Teacher-forced top-1 agreement with llama.cpp, per model: the
# target of 0.995 is met by numerics="llama.cpp" (bit-identical logits, tested below); the fast
# kernels compute the same quantized math in another rounding order and measure 0.971-0.991.
# 20-30 layers amplify one-ulp differences until an int8 activation rounds the other way:
# llama.cpp itself agrees with an exact float64 forward of the same weights on only ~98% of
# positions (docs/fidelity.md). Positions that flip are near-ties (asserted: llama.cpp's own
# top-1 beats its logit of our token by at most TOP1_FLIP_GAP, where a bug would flip clear
# winners); the KL bound below is the tight check.
TOP1_MIN = 0.96
TOP1_FLIP_GAP = 1.0
KL_MAX = 0.005          # mean KL(llama.cpp || ours) restricted to llama.cpp's top 64, per model
# Of the 6 prompts per model, identical 48-token greedy continuations. The target is 5 (met, 6/6,
# by the llama.cpp numerics); for the reason above the fast numerics' continuations part where
# llama.cpp's top two are nearly tied, so we require 2 identical and that every divergence starts
# at such a near-tie.
GREEDY_MIN_EXACT = 2
NEAR_TIE = 0.5          # logits: llama.cpp's own top-1 minus its logit of the token we chose (~3x our
                        # mean logit deviation from llama.cpp on gemma3, the noisiest of the three)
PPL_REL_TOL = 0.005     # perplexity within 0.5% of llama-perplexity's


def _kl_top64(ref_ids, ref_logits, ref_lse, ours):
    """KL over llama.cpp's top 64 at each position, p from llama.cpp's full-row log-sum-exp."""
    ours = ours.astype(np.float64)
    mx = ours.max(axis=1, keepdims=True)
    our_lse = mx[:, 0] + np.log(np.exp(ours - mx).sum(axis=1))
    logp = ref_logits.astype(np.float64) - ref_lse[:, None]
    logq = np.take_along_axis(ours, ref_ids.astype(np.int64), axis=1) - our_lse[:, None]
    return (np.exp(logp) * (logp - logq)).sum(axis=1)


def _kl_full(ref_row, our_row):
    """KL(llama.cpp || ours) over the whole vocabulary (llama.cpp's row is stored as float16)."""
    def log_softmax(x):
        x = x.astype(np.float64)
        return x - (x.max() + np.log(np.exp(x - x.max()).sum()))
    logp, logq = log_softmax(ref_row), log_softmax(our_row)
    return float((np.exp(logp) * (logp - logq)).sum())


@pytest.mark.parametrize("model", ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"])
def test_teacher_forced_logits(model):
    llm = llm_for(model)
    ref = np.load(REFERENCE / f"logits_{model}.npz")
    agree = total = 0
    kls = []
    for row in greedy_rows(model):
        name = row["prompt"]["name"]
        ids = row["prompt_ids"] + row["greedy_ids"][:-1]
        ours = llm.logits(ids)
        top_ids = ref[f"{name}__top_ids"]
        assert ours.shape == (len(ids), llm.n_vocab) and top_ids.shape[0] == len(ids)
        agree += int((ours.argmax(axis=1) == top_ids[:, 0]).sum())
        total += len(ids)
        top_logits = ref[f"{name}__top_logits"]
        for pos in np.nonzero(ours.argmax(axis=1) != top_ids[:, 0])[0]:
            mine = int(ours[pos].argmax())
            hit = np.nonzero(top_ids[pos] == mine)[0]
            gap = float(top_logits[pos, 0] - top_logits[pos, hit[0]]) if len(hit) else float("inf")
            assert gap <= TOP1_FLIP_GAP, f"{name} @{pos}: our top-1 {mine} trails llama.cpp's by {gap:.3f}"
        kls.append(_kl_top64(top_ids, ref[f"{name}__top_logits"], ref[f"{name}__logsumexp"], ours))
        full_kl = _kl_full(ref[f"{name}__last_prompt_logits"], ours[len(row["prompt_ids"]) - 1])
        assert full_kl <= 10 * KL_MAX, f"{name}: KL over the whole vocabulary at the last prompt token {full_kl}"
    mean_kl = float(np.concatenate(kls).mean())
    print(f"{model}: top-1 agreement {agree}/{total} = {agree / total:.4f}, mean KL(top64) {mean_kl:.5f}")
    assert agree / total >= TOP1_MIN
    assert mean_kl <= KL_MAX


def _greedy_report(llm, model: str) -> tuple[int, list[tuple[float, str]]]:
    """Runs the 6 greedy prompts; returns how many continuations are identical to llama.cpp's
    and, for each other one, (llama.cpp's own margin at the first difference, a description)."""
    ref = np.load(REFERENCE / f"logits_{model}.npz")
    exact, report = 0, []
    for row in greedy_rows(model):
        want, name = row["greedy_ids"], row["prompt"]["name"]
        res = llm.generate(row["prompt_ids"], max_tokens=len(want), temperature=0.0)
        got = list(res.token_ids)
        if res.finish_reason == "stop" and len(got) < len(want) and want[len(got)] in llm.tokenizer.eot_ids:
            got.append(want[len(got)])          # llama.cpp lists the end-of-generation token it sampled
        if got == want:
            exact += 1
            continue
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        pos = len(row["prompt_ids"]) - 1 + first
        top_ids, top_logits = ref[f"{name}__top_ids"][pos], ref[f"{name}__top_logits"][pos]
        ours = got[first] if first < len(got) else next(iter(llm.tokenizer.eot_ids & set(top_ids.tolist())), -1)
        gap = float(top_logits[0] - top_logits[list(top_ids).index(ours)]) if ours in top_ids else float("inf")
        report.append((gap, f"{model}/{name}: first difference at {first}: ours {got[first:first + 5]} "
                            f"llama.cpp {want[first:first + 5]}; llama.cpp's own margin there {gap:.4f}"))
    print("\n".join(r for _, r in report) or f"{model}: all greedy continuations identical")
    print(f"{model}: {exact}/{len(greedy_rows(model))} identical")
    return exact, report


@pytest.mark.parametrize("model", ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"])
def test_greedy_continuations(model):
    """Greedy 48-token continuations: identical to llama.cpp's, or diverging only where
    llama.cpp itself was at a near-tie (its own top-1 vs our token within NEAR_TIE logits,
    read from its teacher-forced logits at that position)."""
    exact, report = _greedy_report(llm_for(model), model)
    assert exact >= GREEDY_MIN_EXACT, "\n".join(r for _, r in report)
    assert all(gap <= NEAR_TIE for gap, _ in report), "\n".join(r for _, r in report)


# numerics="llama.cpp": every op in llama.cpp's own float order (docs/fidelity.md). For the models
# listed here every weight type has such a kernel, and the logits are llama.cpp's to the bit.
BIT_EXACT = {"smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"}


@pytest.mark.parametrize("model", ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"])
def test_llamacpp_numerics_logits(model):
    """The fidelity targets in llama.cpp numerics: top-1 agreement >= 99.5% and, where every op
    is covered, all 64 of llama.cpp's top logits identical at every position."""
    llm = llm_for(model, numerics="llama.cpp")
    ref = np.load(REFERENCE / f"logits_{model}.npz")
    agree = total = exact = 0
    for row in greedy_rows(model):
        name = row["prompt"]["name"]
        ours = llm.logits(row["prompt_ids"] + row["greedy_ids"][:-1])
        top_ids, top_logits = ref[f"{name}__top_ids"].astype(np.int64), ref[f"{name}__top_logits"]
        agree += int((ours.argmax(axis=1) == top_ids[:, 0]).sum())
        exact += int((np.take_along_axis(ours, top_ids, axis=1) == top_logits).all(axis=1).sum())
        total += len(top_ids)
    print(f"{model} (llama.cpp numerics): top-1 {agree}/{total}, positions bit-identical {exact}/{total}")
    assert agree / total >= 0.995
    if model in BIT_EXACT:
        assert exact == total


@pytest.mark.parametrize("model", ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"])
def test_llamacpp_numerics_greedy(model):
    """The fidelity target in llama.cpp numerics: at least 5 of 6 greedy continuations identical
    (all 6 where every op is covered)."""
    exact, report = _greedy_report(llm_for(model, numerics="llama.cpp"), model)
    assert exact >= (6 if model in BIT_EXACT else 5), "\n".join(r for _, r in report)


def _perplexity_rows():
    return [(r["model"], r["n_ctx"], r["ppl"]) for r in f16_perplexity_rows()]


@pytest.mark.parametrize("model,n_ctx,ref_ppl", _perplexity_rows())
def test_perplexity_matches_llamacpp(model, n_ctx, ref_ppl):
    from localllm.perplexity import perplexity
    llm = llm_for(model, n_ctx=max(4096, n_ctx))
    text = CORPUS.read_text(encoding="utf-8")
    res = perplexity(llm, text, n_ctx)
    print(f"{model} n_ctx={n_ctx}: PPL {res.ppl:.4f} +/- {res.stderr:.4f} (llama.cpp {ref_ppl}), "
          f"{res.n_chunks} chunks")
    assert math.isclose(res.ppl, ref_ppl, rel_tol=PPL_REL_TOL)


def test_llamacpp_numerics_perplexity_past_gemma3s_window():
    """numerics="llama.cpp" on Gemma3 with 2048-token chunks, four times its 512-token sliding
    window, against llama-perplexity: measured 14.5385 against its 14.5064 (+0.22%; the fast
    numerics give 14.5145). 14.5385 is llama.cpp's own figure when each 2048-token chunk is one
    batch over a full sliding-window cache (tests/data/regenerate.py); llama-perplexity splits it
    into four 512-token batches over a pruned window cache, which rounds differently."""
    from localllm.perplexity import perplexity
    ref_ppl = next(p for m, n, p in _perplexity_rows() if m == "gemma3-270m-q4_k_m" and n == 2048)
    llm = llm_for("gemma3-270m-q4_k_m", n_ctx=4096, numerics="llama.cpp")
    res = perplexity(llm, CORPUS.read_text(encoding="utf-8"), 2048)
    print(f"gemma3 llama.cpp numerics n_ctx=2048: PPL {res.ppl:.4f} (llama.cpp {ref_ppl}), {res.n_chunks} chunks")
    assert math.isclose(res.ppl, ref_ppl, rel_tol=PPL_REL_TOL)
