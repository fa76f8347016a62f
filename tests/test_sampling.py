"""The native sampler against an independent float64 numpy model of llama.cpp's chain
(logit bias -> penalties -> top-k -> top-p -> min-p -> temperature -> draw), plus
SamplingParams validation and StopMatcher."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from conftest import REFERENCE
from localllm import _core
from localllm.sampling import SamplingParams, StopMatcher, make_sampler

OFF = dict(top_k=0, top_p=1.0, min_p=0.0)  # no truncation


# ---------------------------------------------------------------- numpy reference of the chain

def softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def reference_support(logits: np.ndarray, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """Token ids surviving top-k, then top-p, then min-p (definitions as in llama.cpp)."""
    x = np.asarray(logits, dtype=np.float64)
    order = np.lexsort((np.arange(len(x)), -x))  # descending logit, ties -> lower id
    if top_k > 0:
        order = order[:top_k]
    if top_p < 1.0:
        cumulative = np.cumsum(softmax(x[order]))
        order = order[: int(np.searchsorted(cumulative, top_p)) + 1]  # first prefix reaching top_p
    if min_p > 0.0:
        order = order[x[order] >= x[order].max() + math.log(min_p)]
    return order


def reference_distribution(logits, temperature, top_k=0, top_p=1.0, min_p=0.0) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    support = reference_support(x, top_k, top_p, min_p)
    p = np.zeros(len(x))
    p[support] = softmax(x[support] / temperature)
    return p


def draw_counts(sampler, logits: np.ndarray, n: int) -> np.ndarray:
    counts = np.zeros(len(logits), dtype=np.int64)
    for _ in range(n):
        counts[sampler.sample(logits)] += 1
    return counts


def assert_matches_distribution(counts: np.ndarray, expected: np.ndarray) -> None:
    """Every frequency within 5 binomial standard deviations (+ a small floor) of expected,
    and tokens of probability 0 never drawn."""
    n = counts.sum()
    freq = counts / n
    sigma = np.sqrt(expected * (1 - expected) / n)
    assert np.all(counts[expected == 0] == 0), np.nonzero((expected == 0) & (counts > 0))
    bad = np.abs(freq - expected) > 5 * sigma + 2e-3
    assert not bad.any(), (np.nonzero(bad), freq[bad], expected[bad])


def random_logits(n: int, seed: int, scale: float = 2.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


# ---------------------------------------------------------------- greedy and determinism

def test_greedy_is_argmax():
    for seed in range(20):
        logits = random_logits(5000, seed)
        sampler = _core.Sampler(n_vocab=5000, temperature=0.0, seed=seed)
        assert sampler.sample(logits) == int(np.argmax(logits))


def test_greedy_ties_pick_lowest_id_and_ignore_truncation():
    logits = np.zeros(100, dtype=np.float32)
    logits[[70, 30, 55]] = 4.0
    for temperature in (0.0, -1.0):
        sampler = _core.Sampler(n_vocab=100, temperature=temperature, top_k=1, top_p=0.01, min_p=1.0)
        assert sampler.sample(logits) == 30


def test_top_k_1_is_greedy():
    sampler = _core.Sampler(n_vocab=3000, temperature=1.5, top_k=1, top_p=1.0, min_p=0.0, seed=3)
    for seed in range(30):
        logits = random_logits(3000, 100 + seed, scale=0.5)
        assert sampler.sample(logits) == int(np.argmax(logits))


def sample_sequence(seed: int, rows: list[np.ndarray], **kwargs) -> list[int]:
    sampler = _core.Sampler(n_vocab=len(rows[0]), seed=seed, **kwargs)
    return [sampler.sample(row) for row in rows]


@pytest.mark.parametrize("kwargs", [{}, OFF, dict(top_k=0, min_p=0.0)], ids=["defaults", "off", "top_p"])
def test_same_seed_same_sequence(kwargs):
    rows = [random_logits(4000, s, scale=1.0) for s in range(200)]
    a = sample_sequence(1234, rows, temperature=1.0, **kwargs)
    assert a == sample_sequence(1234, rows, temperature=1.0, **kwargs)
    assert a != sample_sequence(1235, rows, temperature=1.0, **kwargs)


def test_reset_restarts_the_random_stream_and_history():
    rows = [random_logits(500, s, scale=1.0) for s in range(50)]
    sampler = _core.Sampler(n_vocab=500, temperature=1.0, seed=77, repeat_penalty=1.3)
    first = []
    for row in rows:
        first.append(sampler.sample(row))
        sampler.accept(first[-1])
    sampler.reset()
    second = []
    for row in rows:
        second.append(sampler.sample(row))
        sampler.accept(second[-1])
    assert first == second


def test_random_seed_when_none():
    a = _core.Sampler(n_vocab=10)
    b = _core.Sampler(n_vocab=10)
    assert a.seed != b.seed  # 2**-64 chance of a false failure
    assert 0 <= a.seed < 2**64


# ---------------------------------------------------------------- distributions and support

@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_distribution_matches_softmax(temperature):
    logits = random_logits(24, 5, scale=1.0)
    sampler = _core.Sampler(n_vocab=24, temperature=temperature, seed=11, **OFF)
    counts = draw_counts(sampler, logits, 20000)
    assert_matches_distribution(counts, softmax(logits.astype(np.float64) / temperature))


def midpoint_top_p(logits: np.ndarray, top_k: int, keep: int) -> float:
    """A top_p that keeps exactly `keep` tokens (halfway between the neighbouring cumsums)."""
    x = np.sort(logits.astype(np.float64))[::-1]
    if top_k > 0:
        x = x[:top_k]
    c = np.cumsum(softmax(x))
    return float((c[keep - 2] + c[keep - 1]) / 2) if keep > 1 else float(c[0] / 2)


def midpoint_min_p(logits: np.ndarray, keep: int) -> float:
    """A min_p that keeps exactly `keep` tokens (threshold halfway between two logits)."""
    x = np.sort(logits.astype(np.float64))[::-1]
    return float(math.exp((x[keep - 1] + x[keep]) / 2 - x[0]))


@pytest.mark.parametrize("top_k,keep_p,keep_m", [
    (5, None, None), (0, 7, None), (0, None, 6), (0, 9, 5), (12, 8, None), (12, 10, 6)])
def test_truncated_distribution(top_k, keep_p, keep_m):
    logits = random_logits(40, 8, scale=1.5)
    top_p = midpoint_top_p(logits, top_k, keep_p) if keep_p else 1.0
    min_p = midpoint_min_p(logits, keep_m) if keep_m else 0.0
    sampler = _core.Sampler(n_vocab=40, temperature=0.8, top_k=top_k, top_p=top_p, min_p=min_p, seed=5)
    counts = draw_counts(sampler, logits, 20000)
    expected = reference_distribution(logits, 0.8, top_k, top_p, min_p)
    assert np.count_nonzero(expected) == min(k for k in (top_k or 99, keep_p or 99, keep_m or 99))
    assert_matches_distribution(counts, expected)


def planted_logits(n: int, n_high: int, seed: int) -> np.ndarray:
    """A large vocabulary of N(0,1) logits with n_high tokens planted well above the rest."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(n).astype(np.float32)
    high = rng.choice(n, size=n_high, replace=False)
    logits[high] = (12.0 + np.sort(rng.uniform(0, 3, n_high))[::-1]).astype(np.float32)
    return logits


@pytest.mark.parametrize("config", ["top_k", "top_p", "min_p", "top_p+min_p", "all"])
def test_support_is_exact_on_large_vocab(config):
    n = 150_000
    logits = planted_logits(n, 40, seed=21)
    top_k, top_p, min_p = 0, 1.0, 0.0
    if config in ("top_k", "all"):
        top_k = 30 if config == "top_k" else 25
    if config in ("top_p", "top_p+min_p", "all"):
        top_p = midpoint_top_p(logits, top_k, 18 if config != "top_p+min_p" else 16)
    if config in ("min_p", "top_p+min_p", "all"):
        min_p = midpoint_min_p(logits, 20 if config != "all" else 12)
    support = set(reference_support(logits, top_k, top_p, min_p).tolist())
    assert 10 <= len(support) <= 30
    # a high temperature flattens the survivors so that every one of them shows up
    sampler = _core.Sampler(n_vocab=n, temperature=8.0, top_k=top_k, top_p=top_p, min_p=min_p, seed=9)
    drawn = {sampler.sample(logits) for _ in range(1500)}
    assert drawn == support


def test_top_p_alone_with_a_wide_nucleus():
    """Nucleus of thousands of tokens (the histogram path): draws never leave it, and the
    frequency of landing in its low half matches the reference mass there."""
    n = 100_000
    logits = random_logits(n, 31, scale=1.0)
    support = reference_support(logits, 0, 0.5, 0.0)
    assert len(support) > 5000
    expected = reference_distribution(logits, 1.0, 0, 0.5, 0.0)
    low_half = support[len(support) // 2:]
    sampler = _core.Sampler(n_vocab=n, temperature=1.0, top_k=0, top_p=0.5, min_p=0.0, seed=4)
    draws = np.array([sampler.sample(logits) for _ in range(4000)])
    assert np.isin(draws, support).all()
    p_low = expected[low_half].sum()
    freq_low = np.isin(draws, low_half).mean()
    assert abs(freq_low - p_low) < 5 * math.sqrt(p_low * (1 - p_low) / len(draws))


# ---------------------------------------------------------------- penalties and bias

def greedy_after(history: list[int], logits, **kwargs) -> int:
    sampler = _core.Sampler(n_vocab=len(logits), temperature=0.0, **kwargs)
    for token in history:
        sampler.accept(token)
    return sampler.sample(np.asarray(logits, dtype=np.float32))


@pytest.mark.parametrize("a,b", [(2.0, 1.5), (-1.0, -1.2), (0.5, -0.1)])
@pytest.mark.parametrize("penalty", [1.1, 1.25, 1.4, 1.6, 0.8])
def test_repeat_penalty_flips_argmax_exactly_when_it_should(a, b, penalty):
    a32, b32, p32 = np.float32(a), np.float32(b), np.float32(penalty)
    penalized = a32 / p32 if a32 > 0 else a32 * p32  # token 0 was seen, token 1 was not
    expected = 0 if penalized >= b32 else 1
    assert greedy_after([0], [a, b, -5.0], repeat_penalty=penalty) == expected


def test_penalty_window_and_unbounded_history():
    logits = [2.0, 1.9, -5.0, -5.0, -5.0]
    assert greedy_after([0], logits, repeat_penalty=1.5) == 1
    # token 0 slid out of a 3-token window
    assert greedy_after([0, 2, 3, 4], logits, repeat_penalty=1.5, penalty_last_n=3) == 0
    assert greedy_after([0, 2, 3, 4], logits, repeat_penalty=1.5, penalty_last_n=4) == 1
    assert greedy_after([0] + [2, 3, 4] * 50, logits, repeat_penalty=1.5, penalty_last_n=-1) == 1
    assert greedy_after([0], logits, repeat_penalty=1.5, penalty_last_n=0) == 0


def test_frequency_and_presence_penalties_shift_the_distribution():
    """Two-token vocabulary at temperature 1: P(token 0) = sigmoid(a' - b) with
    a' = a - count * frequency - presence (OpenAI's definition)."""
    a, b = 1.0, 0.0
    history = [0, 0, 0, 1]  # token 0 three times, token 1 once
    freq, pres = 0.2, 0.3
    sampler = _core.Sampler(n_vocab=2, temperature=1.0, seed=8, frequency_penalty=freq,
                            presence_penalty=pres, **OFF)
    for token in history:
        sampler.accept(token)
    counts = draw_counts(sampler, np.array([a, b], dtype=np.float32), 20000)
    expected = softmax([a - 3 * freq - pres, b - 1 * freq - pres])
    assert_matches_distribution(counts, expected)


def test_logit_bias():
    logits = np.array([3.0, 2.0, 1.0, 0.0], dtype=np.float32)
    assert greedy_after([], logits, logit_bias={3: 3.5}) == 3
    assert greedy_after([], logits, logit_bias=[(0, -math.inf)]) == 1
    sampler = _core.Sampler(n_vocab=4, temperature=1.0, seed=2, logit_bias={0: -math.inf, 2: 1.5}, **OFF)
    counts = draw_counts(sampler, logits, 20000)
    assert_matches_distribution(counts, softmax(logits + np.array([-np.inf, 0, 1.5, 0])))
    banned = _core.Sampler(n_vocab=4, logit_bias={i: -math.inf for i in range(4)})
    with pytest.raises(RuntimeError, match="-inf"):
        banned.sample(logits)


# ---------------------------------------------------------------- logprobs

def test_logprobs_are_log_softmax_of_biased_logits():
    n = 32000
    logits = random_logits(n, 41, scale=3.0)
    bias = {7: 5.0, 99: -2.0}
    biased = logits.astype(np.float64)
    for token, value in bias.items():
        biased[token] += value
    expected = log_softmax(biased)
    # penalties change the draw but not the reported logprobs
    sampler = _core.Sampler(n_vocab=n, temperature=0.9, seed=6, n_logprobs=5, logit_bias=bias,
                            repeat_penalty=1.3, frequency_penalty=0.5)
    sampler.accept(int(np.argmax(biased)))
    for _ in range(5):
        token = sampler.sample(logits)
        chosen, top = sampler.last_logprobs()
        assert chosen == pytest.approx(expected[token], abs=1e-4)
        top_ids = np.argsort(-expected, kind="stable")[:5]
        assert [t for t, _ in top] == top_ids.tolist()
        np.testing.assert_allclose([lp for _, lp in top], expected[top_ids], atol=1e-4)


def test_logprobs_of_chosen_only_and_disabled():
    logits = random_logits(100, 3)
    sampler = _core.Sampler(n_vocab=100, temperature=0.0)  # n_logprobs=0: chosen token only
    token = sampler.sample(logits)
    chosen, top = sampler.last_logprobs()
    assert top == [] and chosen == pytest.approx(log_softmax(logits)[token], abs=1e-5)
    silent = _core.Sampler(n_vocab=100, n_logprobs=-1)
    silent.sample(logits)
    with pytest.raises(RuntimeError, match="no logprobs"):
        silent.last_logprobs()


# ---------------------------------------------------------------- invalid input

@pytest.mark.parametrize("kwargs,name", [
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(top_p=math.nan), "top_p"),
    (dict(min_p=-0.1), "min_p"), (dict(min_p=1.01), "min_p"), (dict(top_k=-1), "top_k"),
    (dict(penalty_last_n=-2), "penalty_last_n"), (dict(repeat_penalty=0.0), "repeat_penalty"),
    (dict(repeat_penalty=math.nan), "repeat_penalty"), (dict(temperature=math.nan), "temperature"),
    (dict(temperature=math.inf), "temperature"), (dict(presence_penalty=math.nan), "presence_penalty"),
    (dict(frequency_penalty=math.inf), "frequency_penalty"), (dict(logit_bias={10: 1.0}), "logit_bias"),
    (dict(logit_bias={-1: 1.0}), "logit_bias"), (dict(logit_bias={1: math.nan}), "logit_bias"),
    (dict(logit_bias={1: math.inf}), "logit_bias"), (dict(logit_bias="x"), "logit_bias"),
    (dict(seed=-1), "seed"), (dict(seed=2**64), "seed"), (dict(n_logprobs=-2), "n_logprobs"),
    (dict(n_vocab=0), "n_vocab"),
])
def test_invalid_parameters_raise_value_error_naming_them(kwargs, name):
    args = dict(n_vocab=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        _core.Sampler(**args)


def test_invalid_logits_and_tokens():
    sampler = _core.Sampler(n_vocab=10)
    with pytest.raises(ValueError, match="n_vocab"):
        sampler.sample(np.zeros(9, dtype=np.float32))
    with pytest.raises(ValueError, match="n_vocab"):
        sampler.sample(np.zeros((2, 10), dtype=np.float32))
    bad = np.zeros(10, dtype=np.float32)
    bad[4] = np.nan
    with pytest.raises(RuntimeError, match="NaN"):
        sampler.sample(bad)
    bad[4] = np.inf
    with pytest.raises(RuntimeError, match=r"\+inf"):
        sampler.sample(bad)
    for token in (-1, 10):
        with pytest.raises(ValueError, match="outside the vocabulary"):
            sampler.accept(token)


# ---------------------------------------------------------------- speed (printed, not asserted)

def test_sample_timing_262k_vocab(capsys):
    path = REFERENCE / "logits_gemma3-270m-q4_k_m.npz"
    rows = {"synthetic N(0,9)": random_logits(262144, 0, scale=3.0)}
    if path.exists():
        with np.load(path) as z:
            rows["gemma3 'story' row"] = z["story__last_prompt_logits"].astype(np.float32)
    configs = {"defaults": {}, "greedy": dict(temperature=0.0), "top_k=0": dict(top_k=0),
               "top_p only": dict(top_k=0, min_p=0.0), "no truncation": OFF,
               "defaults + 5 logprobs": dict(n_logprobs=5)}
    lines = []
    for row_name, row in rows.items():
        for name, kwargs in configs.items():
            sampler = _core.Sampler(n_vocab=len(row), seed=1, **kwargs)
            times = []
            for _ in range(60):
                start = time.perf_counter()
                sampler.sample(row)
                times.append(time.perf_counter() - start)
            lines.append(f"  {row_name:20s} {name:22s} median {np.median(times) * 1e6:7.0f} us  "
                         f"min {min(times) * 1e6:7.0f} us")
    with capsys.disabled():
        print("\nSampler.sample, vocab 262144:\n" + "\n".join(lines))


# ---------------------------------------------------------------- SamplingParams / make_sampler

@pytest.mark.parametrize("field,value", [
    ("temperature", math.nan), ("temperature", "hot"), ("top_k", -3), ("top_k", 2.5), ("top_p", 0.0),
    ("min_p", 2.0), ("repeat_penalty", -1.0), ("penalty_last_n", -5), ("max_tokens", 0),
    ("seed", -4), ("stop", ["ok", ""]), ("stop", [1]), ("logprobs", -1), ("logit_bias", {"a": 1.0}),
    ("logit_bias", {5: math.nan}), ("presence_penalty", math.inf)])
def test_sampling_params_validate_names_the_field(field, value):
    params = SamplingParams(**{field: value})
    with pytest.raises(ValueError, match=field):
        params.validate(n_vocab=100)


def test_sampling_params_token_range_and_make_sampler():
    with pytest.raises(ValueError, match="logit_bias"):
        SamplingParams(logit_bias={100: 1.0}).validate(n_vocab=100)
    assert SamplingParams(stop="###").stop == ["###"]
    logits = random_logits(100, 12)
    sampler = make_sampler(SamplingParams(temperature=0.0, logprobs=3), 100)
    assert sampler.sample(logits) == int(np.argmax(logits))
    assert len(sampler.last_logprobs()[1]) == 3
    quiet = make_sampler(SamplingParams(seed=5), 100)
    assert quiet.seed == 5 and quiet.n_logprobs == -1
    with pytest.raises(ValueError, match="top_p"):
        make_sampler(SamplingParams(top_p=2.0), 100)


# ---------------------------------------------------------------- StopMatcher

def run_stops(stops: list[str], pieces: list[str]) -> tuple[list[str], bool, str]:
    matcher = StopMatcher(stops)
    emitted, stopped = [], False
    for piece in pieces:
        text, stopped = matcher.feed(piece)
        emitted.append(text)
        if stopped:
            break
    tail = matcher.flush()
    return emitted, stopped, "".join(emitted) + tail


def test_stop_string_split_across_pieces():
    emitted, stopped, text = run_stops(["</end>"], ["Hello </", "en", "d> ignored"])
    assert stopped and text == "Hello "
    assert emitted == ["Hello ", "", ""]  # "</" and "</en" were held back, never emitted


def test_partial_prefix_that_is_not_a_stop_is_released():
    emitted, stopped, text = run_stops(["</end>"], ["a </", "div>", " b <", "/e"])
    assert not stopped and text == "a </div> b </e"
    assert emitted == ["a ", "</div>", " b ", ""]


def test_multiple_stops_earliest_wins():
    _, stopped, text = run_stops(["STOP", "\n\n"], ["one\n", "\ntwo STOP"])
    assert stopped and text == "one"
    _, stopped, text = run_stops(["\n\n", "wo S"], ["one two", " STOP\n\n"])
    assert stopped and text == "one t"


def test_stop_at_start_and_after_stop_nothing_more():
    matcher = StopMatcher(["<|im_end|>"])
    assert matcher.feed("<|im_end|>more") == ("", True)
    assert matcher.feed("later") == ("", True)
    assert matcher.flush() == "" and matcher.matched == "<|im_end|>"


def test_stop_matcher_overlapping_prefixes_and_no_stops():
    # the stop begins inside text that was held back one piece earlier
    _, stopped, text = run_stops(["abc"], ["xa", "a", "b", "c"])
    assert stopped and text == "xa"
    _, stopped, text = run_stops([], ["plain ", "text"])
    assert not stopped and text == "plain text"
    with pytest.raises(ValueError):
        StopMatcher(["ok", ""])


def test_greedy_without_copy_matches_the_general_path():
    """Plain greedy decoding skips the copy of the row (sampling.cpp, greedy_without_copy); it must
    pick the general path's token (asking for logprobs forces that path) on ties, bans, positive
    and repeated biases, biased tokens at the maximum, and -inf / NaN rows (same errors)."""
    rng = np.random.default_rng(11)
    n = 3000
    cases = []
    for _ in range(200):
        logits = np.round(rng.standard_normal(n) * 3, 1).astype(np.float32)   # many exact ties
        k = int(rng.integers(0, 6))
        toks = rng.integers(0, n, k).tolist()
        if rng.random() < 0.3:
            toks.append(int(np.argmax(logits)))                               # a biased maximum
        bias = [(t, float(rng.choice([-np.inf, -2.0, 0.0, 0.5, 3.0]))) for t in toks]
        cases.append((logits, bias))
    cases.append((np.full(n, -np.inf, np.float32), []))
    nan_row = np.zeros(n, np.float32)
    nan_row[7] = np.nan
    cases.append((nan_row, []))
    for logits, bias in cases:
        outcomes = []
        for n_logprobs in (-1, 0):
            s = _core.Sampler(n_vocab=n, temperature=0.0, logit_bias=bias, n_logprobs=n_logprobs)
            try:
                outcomes.append(s.sample(logits))
            except RuntimeError as e:
                outcomes.append(type(e))
        assert outcomes[0] == outcomes[1], (bias, outcomes)
