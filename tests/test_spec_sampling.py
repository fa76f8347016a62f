"""Speculative sampling is lossless: the rejection rule (`_core.Sampler.verify`, what the engine
calls for every drafted token when temperature > 0) returns tokens distributed exactly as plain
sampling's target distribution p, for a fixed row of logits under every sampler setting at once
(logit bias, repeat / frequency / presence penalties with a history, top-k, top-p, min-p,
temperature) and a fixed proposal distribution q. p is computed here independently with numpy
from the settings' definitions (llama.cpp's chain); the check is a chi-square test over
60,000 draws at p > 0.01. The same test rejects a deliberately wrong rule (on rejection,
resampling from p instead of norm(max(0, p - q)))."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from localllm import _core

N_DRAWS = 60_000
LOGITS = np.array([2.0, 1.6, 1.5, 1.2, 0.9, 0.7, 0.3, -0.2, -0.5, -1.5, -3.0, -6.0], np.float32)
SETTINGS = dict(temperature=0.8, top_k=9, top_p=0.97, min_p=0.03, repeat_penalty=1.3,
                frequency_penalty=0.1, presence_penalty=0.2, penalty_last_n=8, logit_bias={4: 0.8, 0: -0.4})
HISTORY = [1, 1, 5, 2]           # accepted tokens the penalties act on


def expected_p(settings: dict, logits: np.ndarray, history: list[int]) -> np.ndarray:
    """The target distribution by the chain's definition: bias, penalties, top-k, top-p (mass at
    temperature 1 over the top-k survivors), min-p (relative to the best), then temperature."""
    x = logits.astype(np.float64).copy()
    for t, b in settings["logit_bias"].items():
        x[t] += b
    for t in set(history[-settings["penalty_last_n"]:]):
        count = history[-settings["penalty_last_n"]:].count(t)
        x[t] = x[t] * settings["repeat_penalty"] if x[t] <= 0 else x[t] / settings["repeat_penalty"]
        x[t] -= count * settings["frequency_penalty"] + settings["presence_penalty"]
    order = sorted(range(len(x)), key=lambda i: (-x[i], i))[:settings["top_k"]]
    w = np.exp(x[order] - x[order[0]])
    keep = int(np.searchsorted(np.cumsum(w), settings["top_p"] * w.sum()) + 1)
    order = order[:keep]
    order = [i for j, i in enumerate(order) if j == 0 or x[i] >= x[order[0]] + np.log(settings["min_p"])]
    p = np.zeros(len(x))
    p[order] = np.exp((x[order] - x[order[0]]) / settings["temperature"])
    return p / p.sum()


def sampler(seed: int) -> _core.Sampler:
    s = _core.Sampler(n_vocab=len(LOGITS), seed=seed, n_logprobs=-1, **SETTINGS)
    for t in HISTORY:
        s.accept(t)
    return s


def chi_square_p(tokens: np.ndarray, p: np.ndarray) -> float:
    counts = np.bincount(tokens, minlength=len(p))
    support = p > 0
    assert counts[~support].sum() == 0, f"tokens outside p's support were returned: {np.nonzero(counts[~support])}"
    return chisquare(counts[support], p[support] * len(tokens)).pvalue


@pytest.fixture(scope="module")
def target_p() -> np.ndarray:
    p = expected_p(SETTINGS, LOGITS, HISTORY)
    tokens, probs = sampler(0).distribution(LOGITS)
    got = np.zeros(len(LOGITS))
    got[tokens] = probs
    np.testing.assert_allclose(got, p, atol=1e-6)     # the sampler's p is the chain's p
    assert (p > 0).sum() >= 4
    return p


def test_point_mass_proposal_keeps_the_target_distribution(target_p):
    """A deterministic proposer (n-gram lookup, a greedy draft model): q is a point mass on the
    drafted token; accepted or resampled, the token must still be distributed as p."""
    s = sampler(1)
    for draft in (int(np.argmax(target_p)), 3, 11):      # likely, less likely, outside the support
        out = np.array([s.verify(LOGITS, draft)[0] for _ in range(N_DRAWS)])
        assert chi_square_p(out, target_p) > 0.01, f"draft {draft}"


def test_random_proposal_keeps_the_target_distribution(target_p):
    rng = np.random.default_rng(5)
    q = rng.dirichlet(np.ones(len(LOGITS)) * 0.7)                # far from p, covers every token
    q_dict = {i: float(v) for i, v in enumerate(q)}
    s = sampler(2)
    drafts = rng.choice(len(LOGITS), size=N_DRAWS, p=q / q.sum())
    out, accepted = np.empty(N_DRAWS, np.int64), 0
    for i, d in enumerate(drafts):
        out[i], ok = s.verify(LOGITS, int(d), q_dict)
        accepted += ok
    assert chi_square_p(out, target_p) > 0.01
    # The acceptance rate of the rule is sum_x min(p(x), q(x)).
    assert abs(accepted / N_DRAWS - np.minimum(target_p, q).sum()) < 0.01

    # A wrong rule, same proposals: on rejection draw from p rather than the residual.
    wrong_rng = np.random.default_rng(6)
    wrong = np.empty(N_DRAWS, np.int64)
    for i, d in enumerate(drafts):
        keep = wrong_rng.random() < min(1.0, target_p[d] / q[d])
        wrong[i] = d if keep else wrong_rng.choice(len(LOGITS), p=target_p)
    assert chi_square_p(wrong, target_p) < 0.01, "the chi-square test cannot tell a wrong rule apart"


def test_verify_rejects_bad_proposals():
    s = sampler(3)
    with pytest.raises(ValueError, match="drafted token"):
        s.verify(LOGITS, len(LOGITS))
    with pytest.raises(ValueError, match="proposal"):
        s.verify(LOGITS, 2, {3: 1.0})            # q gives the drafted token no mass
    with pytest.raises(ValueError, match="proposal"):
        s.verify(LOGITS, 2, {2: 0.9, 3: 0.9})    # q sums past 1
    with pytest.raises(ValueError, match="logits"):
        s.verify(LOGITS[:5], 2)


def test_greedy_verify_is_argmax():
    s = _core.Sampler(n_vocab=len(LOGITS), temperature=0.0, seed=0)
    assert s.verify(LOGITS, 0) == (0, True)
    assert s.verify(LOGITS, 3) == (0, False)
