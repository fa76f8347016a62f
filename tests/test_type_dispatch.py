"""The block-type traits table (csrc/backends/cpu/quants/type_registry.cpp) is what every dispatch
reads: a type the registry lists must be served by each dispatch it claims. These fail when a
type is added to the table but left out of a dispatch (an activation quantizer, a kernel set or
tile, a block-sequential kernel file's switch), or claimed by a dispatch the table does not know."""
import numpy as np

from localllm import _core, _harness


def test_every_registered_type_is_served_by_every_dispatch_it_claims():
    assert _harness.type_dispatch_failures() == []


def test_each_weight_types_activation_type_is_registered():
    by_id = {t["id"]: t for t in _core.types()}
    for t in by_id.values():
        act = by_id.get(t["vec_dot_type"])
        assert act is not None, t["name"]
        if t["kernels"]:
            assert act["block_elems"] >= 1


def test_conversions_follow_the_table():
    rng = np.random.default_rng(0)
    for t in _core.types():
        n = 2 * 256
        if t["can_quantize"]:
            raw = np.asarray(_core.quantize(rng.standard_normal(n).astype(np.float32), t["id"])).view(np.uint8)
            assert raw.size == n // t["block_elems"] * t["block_bytes"], t["name"]
            assert np.all(np.isfinite(_core.dequantize(raw, t["id"], n))), t["name"]
        assert _core.type_info(t["id"]) == t
