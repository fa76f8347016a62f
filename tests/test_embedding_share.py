"""FairShare: how many embedding tokens a generation step carries (engine/embedding_jobs.py)."""
from __future__ import annotations

from localllm.engine.embedding_jobs import FairShare


def test_share_gives_embeddings_about_the_time_of_the_generation() -> None:
    share = FairShare(initial=8, limit=512)
    assert share.tokens() == 8                       # nothing measured yet
    share.observe(0.020, generation=True, embedding_tokens=0)    # a decode step alone: 20 ms
    assert share.tokens() == 8                       # the cost of an embedding token is unknown
    share.observe(0.100, generation=False, embedding_tokens=50)  # embeddings alone: 2 ms a token
    assert share.tokens() == 10                      # 10 tokens take the 20 ms of the decode step
    for _ in range(50):                              # mixed steps: 30 ms for 20 ms + 5 tokens
        share.observe(0.030, generation=True, embedding_tokens=5)
        share.observe(0.020, generation=True, embedding_tokens=0)
    assert share.tokens() == 10                      # the marginal 2 ms a token, measured beside
    big = FairShare(initial=8, limit=64)
    big.observe(1.0, generation=True, embedding_tokens=0)
    big.observe(0.001, generation=False, embedding_tokens=1)
    assert big.tokens() == 64                        # never more than the step budget


def test_every_sixteenth_generation_step_runs_alone_to_keep_measuring_it() -> None:
    share = FairShare(initial=8, limit=512)
    share.observe(0.020, generation=True, embedding_tokens=0)
    share.observe(0.002, generation=False, embedding_tokens=1)
    granted = []
    for _ in range(40):
        n = share.tokens()
        granted.append(n)
        share.observe(0.020 + 0.002 * n, generation=True, embedding_tokens=n)
    assert granted.count(0) == 2 and granted[16] == 0 and granted[33] == 0
    assert set(granted) - {0} == {10}
    share.observe(0.060, generation=True, embedding_tokens=0)    # generation got slower (more sequences)
    assert share.tokens() > 10
