"""GGUF reader: agreement with gguf-py on real and writer-made files, and a hostile-file suite.

Every malformed file is built here byte by byte (struct.pack) so each test shows exactly which
field is wrong; each must raise GGUFError naming the problem, never crash or over-allocate.
"""
from __future__ import annotations

import gc
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gguf as ggufpy
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

import localllm
from conftest import model_file
from localllm.gguf import GGUFError, GGUFFile

# ---------------------------------------------------------------------------------------------
# Real models against gguf-py's GGUFReader (slow: gguf-py parses vocabularies element by element)

_READERS: dict[str, ggufpy.GGUFReader] = {}

REAL_MODELS = [
    "smollm2-135m-q4_1",
    pytest.param("gemma3-270m-q4_k_m", marks=pytest.mark.slow),
    pytest.param("qwen2.5-coder-0.5b-q4_k_m", marks=pytest.mark.slow),
]

NP_OF_VT = {VT.UINT8: np.uint8, VT.INT8: np.int8, VT.UINT16: np.uint16, VT.INT16: np.int16,
            VT.UINT32: np.uint32, VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.BOOL: np.bool_,
            VT.UINT64: np.uint64, VT.INT64: np.int64, VT.FLOAT64: np.float64}


def reference_reader(key: str) -> ggufpy.GGUFReader:
    if key not in _READERS:
        _READERS[key] = ggufpy.GGUFReader(model_file(key))
    return _READERS[key]


def reference_fields(reader: ggufpy.GGUFReader) -> dict:
    """gguf-py's metadata fields without its pseudo-fields for the header."""
    return {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def assert_value_matches(ours, field, key: str) -> None:
    """Our converted value equals gguf-py's, with the same Python type / numpy dtype."""
    expected = field.contents()
    if field.types[0] == VT.ARRAY and field.types[-1] not in (VT.STRING, VT.ARRAY):
        assert isinstance(ours, np.ndarray), key
        assert ours.dtype == NP_OF_VT[field.types[-1]], key
        assert ours.tolist() == expected, key
    else:
        assert type(ours) is type(expected), key
        assert ours == expected, key


@pytest.mark.parametrize("key", REAL_MODELS)
def test_real_model_metadata_matches_gguf_py(key):
    reader = reference_reader(key)
    f = GGUFFile(model_file(key))
    fields = reference_fields(reader)
    assert f.version == int(reader.fields["GGUF.version"].contents())
    assert list(f.metadata) == list(fields)          # same keys, same (file) order
    assert f.keys() == list(fields)
    for k, field in fields.items():
        assert_value_matches(f.metadata[k], field, k)
        assert_value_matches(f.get(k), field, k)
        want_type = field.types[0].name if field.types[0] != VT.ARRAY else f"ARRAY[{field.types[-1].name}]"
        assert f.value_type(k) == want_type, k
    assert f.alignment == reader.alignment
    assert f.data_offset == reader.data_offset
    assert f.file_size == os.path.getsize(model_file(key))


@pytest.mark.parametrize("key", REAL_MODELS)
def test_real_model_tensors_match_gguf_py(key):
    reader = reference_reader(key)
    f = GGUFFile(model_file(key))
    assert [t.name for t in f.tensors] == [t.name for t in reader.tensors]
    for ours, ref in zip(f.tensors, reader.tensors):
        assert ours.type == int(ref.tensor_type)
        assert ours.type_name == ref.tensor_type.name
        assert list(ours.shape) == ref.shape.tolist()
        assert ours.offset == ref.data_offset
        assert ours.relative_offset == ref.data_offset - reader.data_offset
        assert ours.nbytes == ref.n_bytes
        assert ours.n_elements == ref.n_elements
        view = f.tensor_data(ours.name)
        assert view.dtype == ref.data.dtype and view.shape == ref.data.shape, ours.name
        assert np.array_equal(view, ref.data), ours.name
        assert not view.flags.writeable and not view.flags.owndata


def test_real_model_typed_getters():
    key = "smollm2-135m-q4_1"
    fields = reference_fields(reference_reader(key))
    f = GGUFFile(model_file(key))
    arch = f.get_string("general.architecture")
    assert arch == fields["general.architecture"].contents()
    assert f.get_u32(f"{arch}.block_count") == fields[f"{arch}.block_count"].contents()
    assert f.get_f32(f"{arch}.rope.freq_base") == fields[f"{arch}.rope.freq_base"].contents()
    assert f.get_string_array("tokenizer.ggml.tokens") == fields["tokenizer.ggml.tokens"].contents()
    assert f.get_i32_array("tokenizer.ggml.token_type") == fields["tokenizer.ggml.token_type"].contents()
    assert f.get_u32("no.such.key", 7) == 7 and f.get_bool("no.such.key", True) is True
    with pytest.raises(GGUFError, match="'no.such.key' is missing"):
        f.get_u32("no.such.key")
    with pytest.raises(GGUFError, match="'general.architecture': value of type STRING is not an integer"):
        f.get_u32("general.architecture")
    with pytest.raises(GGUFError, match="expected ARRAY\\[STRING\\], got ARRAY\\[INT32\\]"):
        f.get_string_array("tokenizer.ggml.token_type")


def test_large_vocabulary_converts_quickly():
    """gemma's 262k-token vocabulary (plus scores and types) converts in well under a second."""
    f = GGUFFile(model_file("gemma3-270m-q4_k_m"))
    start = time.process_time()      # CPU time: a loaded CI host's stalls are not the code's
    md = f.metadata
    elapsed = time.process_time() - start
    assert len(md["tokenizer.ggml.tokens"]) == len(md["tokenizer.ggml.scores"]) > 200_000
    assert all(isinstance(t, str) for t in md["tokenizer.ggml.tokens"][:1000])
    assert elapsed < 1.0, f"metadata conversion took {elapsed:.2f}s"


def test_views_keep_the_mapping_alive():
    key = "smollm2-135m-q4_1"
    ref = reference_reader(key).tensors
    f = GGUFFile(model_file(key))
    views = {t.name: f.tensor_data(ref[i].name) for i, t in enumerate(ref[:4])}
    del f
    gc.collect()
    for t in ref[:4]:   # the GGUFFile is gone; its views must still read the file's bytes
        assert np.array_equal(views[t.name], t.data)
    with pytest.raises(ValueError):
        views[ref[0].name].setflags(write=True)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        GGUFFile(tmp_path / "nope.gguf")
    with pytest.raises(IsADirectoryError):
        GGUFFile(tmp_path)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError, match="magic"):
        GGUFFile(empty)
    assert issubclass(GGUFError, ValueError)


# ---------------------------------------------------------------------------------------------
# Good files written by gguf-py's GGUFWriter

WRITER_METADATA = [  # (key, value, writer method); nested arrays go through add_array
    ("t.u8", 250, "add_uint8"), ("t.i8", -100, "add_int8"), ("t.u16", 65000, "add_uint16"),
    ("t.i16", -32000, "add_int16"), ("t.u32", 4_000_000_000, "add_uint32"),
    ("t.i32", -2_000_000_000, "add_int32"), ("t.f32", 0.15625, "add_float32"),
    ("t.bool_t", True, "add_bool"), ("t.bool_f", False, "add_bool"),
    ("t.str", "héllo ✓ \x00 wörld", "add_string"), ("t.u64", 2**64 - 1, "add_uint64"),
    ("t.i64", -(2**63), "add_int64"), ("t.f64", 1e300, "add_float64"),
    ("t.arr_i32", [1, -2, 3], "add_array"), ("t.arr_f32", [0.5, -1.25], "add_array"),
    ("t.arr_bool", [True, False, True], "add_array"), ("t.arr_str", ["a", "", "ü"], "add_array"),
    ("t.nested", [[1, 2], [3], [4, 5, 6]], "add_array"),
    ("t.nested_str", [["x", "y"], ["z"]], "add_array"),
    ("t.nested4", [[[[1, 2]], [[3]]]], "add_array"),
]


def write_with_gguf_py(path: Path, alignment: int | None) -> dict[str, np.ndarray]:
    """A file with every metadata type and tensors of several types; returns the tensors."""
    w = ggufpy.GGUFWriter(path, arch="testarch")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, value, method in WRITER_METADATA:
        getattr(w, method)(key, value)
    rng = np.random.default_rng(0)
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((2, 7)).astype(np.float16),
        "i32": rng.integers(-9, 9, size=(4,), dtype=np.int32),
    }
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    for name, qtype in (("q8_0", QT.Q8_0), ("q4_1", QT.Q4_1), ("bf16", QT.BF16)):
        q = ggufpy.quants.quantize(rng.standard_normal((2, 256)).astype(np.float32), qtype)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        tensors[name] = q
    # gguf-py cannot quantize K-quants: raw blocks (3 rows of one 144-byte Q4_K block) will do
    q4k = rng.integers(0, 256, size=(3, 144), dtype=np.uint8)
    w.add_tensor("q4_k", q4k, raw_shape=q4k.shape, raw_dtype=QT.Q4_K)
    tensors["q4_k"] = q4k
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def as_lists(value):
    """Numpy arrays (also inside nested lists) as plain lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    return [as_lists(v) for v in value] if isinstance(value, list) else value


@pytest.mark.parametrize("alignment", [None, 1, 64, 4096])
def test_gguf_py_written_file(tmp_path, alignment):
    path = tmp_path / "w.gguf"
    tensors = write_with_gguf_py(path, alignment)
    f = GGUFFile(path)
    assert f.version == 3 and f.alignment == (alignment or 32)
    md = f.metadata
    for key, value, _ in WRITER_METADATA:
        got = as_lists(md[key])
        if isinstance(value, float) and key == "t.f32":
            assert got == float(np.float32(value))
        else:
            assert got == value and type(got) is type(value), key
    assert f.value_type("t.u64") == "UINT64" and f.value_type("t.arr_bool") == "ARRAY[BOOL]"
    assert md["t.arr_bool"].dtype == np.bool_ and md["t.arr_f32"].dtype == np.float32
    assert f.value_type("t.nested4") == "ARRAY[ARRAY[ARRAY[ARRAY[INT32]]]]"
    reader = ggufpy.GGUFReader(path)
    assert f.data_offset == reader.data_offset
    for ours, ref in zip(f.tensors, reader.tensors, strict=True):
        assert (ours.name, ours.type, list(ours.shape), ours.offset, ours.nbytes) == (
            ref.name, int(ref.tensor_type), ref.shape.tolist(), ref.data_offset, ref.n_bytes)
        assert ours.offset % f.alignment == (f.data_offset % f.alignment)
        view = f.tensor_data(ours.name)
        assert view.dtype == tensors[ours.name].dtype
        assert np.array_equal(view, tensors[ours.name])


def test_version_2_file(tmp_path):
    path = tmp_path / "v2.gguf"
    write_with_gguf_py(path, None)
    raw = bytearray(path.read_bytes())
    raw[4:8] = struct.pack("<I", 2)   # v2 and v3 differ only in allowing big-endian files
    path.write_bytes(raw)
    assert GGUFFile(path).version == 2 == ggufpy.GGUFReader(path).fields["GGUF.version"].contents()


# ---------------------------------------------------------------------------------------------
# Hand-built files: a small builder


def gstr(s: str | bytes, length: int | None = None) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b) if length is None else length) + b


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_str(key: str, value: str) -> bytes:
    return kv(key, VT.STRING, gstr(value))


def kv_u32(key: str, value: int) -> bytes:
    return kv(key, VT.UINT32, struct.pack("<I", value))


def array(elem_type: int, count: int, payload: bytes) -> bytes:
    return struct.pack("<IQ", elem_type, count) + payload


def tinfo(name: str | bytes, dims: list[int], ttype: int, offset: int) -> bytes:
    return (gstr(name) + struct.pack("<I", len(dims)) +
            b"".join(struct.pack("<Q", d % 2**64) for d in dims) + struct.pack("<IQ", ttype, offset))


DEFAULT_TENSORS = [tinfo("a", [4, 2], QT.F32, 0), tinfo("b", [32], QT.Q8_0, 32)]
DEFAULT_DATA_BYTES = 32 + 34    # a: 8 f32, b: one Q8_0 block


def build(kvs=None, tensors=None, data: bytes | None = None, *, magic=b"GGUF", version=3,
          n_kv=None, n_tensors=None, alignment=32) -> bytes:
    """A GGUF image; counts default to the real ones, data to zeros covering the tensors."""
    kvs = [kv_str("general.architecture", "test")] if kvs is None else kvs
    tensors = DEFAULT_TENSORS if tensors is None else tensors
    head = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    body += b"\0" * (-len(body) % alignment)
    return body + (bytes(range(DEFAULT_DATA_BYTES)) if data is None else data)


def open_bytes(tmp_path: Path, raw: bytes, name: str = "t.gguf") -> GGUFFile:
    path = tmp_path / name
    path.write_bytes(raw)
    return GGUFFile(path)


def test_builder_baseline_is_valid(tmp_path):
    f = open_bytes(tmp_path, build())
    ref = ggufpy.GGUFReader(tmp_path / "t.gguf")
    assert [(t.name, t.offset, t.nbytes) for t in f.tensors] == [
        (t.name, t.data_offset, t.n_bytes) for t in ref.tensors]
    assert np.array_equal(f.tensor_data("a"), ref.tensors[0].data)


U64_MAX = 2**64 - 1
BAD_FILES = {  # name: (image, substring the error must contain)
    "bad magic": (build(magic=b"GGML"), "bad magic"),
    "version 0": (build(version=0), "version 0 is not supported"),
    "version 1": (build(version=1), "version 1 is not supported"),
    "future version": (build(version=4), "version 4 is newer"),
    "big-endian": (build(version=3 << 24), "big-endian"),
    "absurd n_tensors": (build(n_tensors=2**60), "n_tensors=1152921504606846976"),
    "n_tensors count*size overflows": (build(n_tensors=U64_MAX), "n_tensors="),
    "absurd n_kv": (build(n_kv=2**40), "n_kv=1099511627776"),
    "key length past EOF": (build(kvs=[gstr("k", length=5000)], tensors=[], data=b""),
                            "key length 5000"),
    "string over 1 GiB": (build(kvs=[kv("k", VT.STRING, gstr("x", length=2**30 + 1))]),
                          "exceeds the 1 GiB limit"),
    "string value past EOF": (build(kvs=[kv("k", VT.STRING, gstr("x", length=10_000))]),
                              "runs past end of file"),
    "array count x size overflows": (build(kvs=[kv("k", VT.ARRAY, array(VT.UINT64, 2**62, b""))]),
                                     "array count of UINT64=4611686018427387904"),
    "array past EOF": (build(kvs=[kv("k", VT.ARRAY, array(VT.UINT32, 1000, b"\0" * 16))]),
                       "array count of UINT32=1000"),
    "string array past EOF": (build(kvs=[kv("k", VT.ARRAY, array(VT.STRING, 2**40, b""))]),
                              "array count of STRING"),
    "unknown value type": (build(kvs=[kv("k", 13, b"\0" * 8)]), "unknown metadata value type id 13"),
    "unknown array element type": (build(kvs=[kv("k", VT.ARRAY, array(99, 1, b"\0"))]),
                                   "unknown array element type id 99"),
    "nesting too deep": (build(kvs=[kv("k", VT.ARRAY, array(VT.ARRAY, 1, array(VT.ARRAY, 1, array(
        VT.ARRAY, 1, array(VT.ARRAY, 1, array(VT.UINT8, 1, b"\1"))))))]), "nested deeper than 4"),
    "duplicate key": (build(kvs=[kv_u32("k", 1), kv_u32("k", 2)]), "'k': duplicate key"),
    "empty key": (build(kvs=[kv_u32("", 1)]), "empty key"),
    "key not UTF-8": (build(kvs=[kv_u32(b"k\xff", 1)]), "not valid UTF-8"),
    "bool not 0/1": (build(kvs=[kv("k", VT.BOOL, b"\x02")]), "BOOL byte 2"),
    "duplicate tensor name": (build(tensors=[tinfo("a", [8], QT.F32, 0), tinfo("a", [8], QT.F32, 32)]),
                              "'a': duplicate tensor name"),
    "empty tensor name": (build(tensors=[tinfo("", [8], QT.F32, 0)]), "empty name"),
    "n_dims 7": (build(tensors=[tinfo("blk.0.attn_q.weight", [1] * 7, QT.F32, 0)]),
                 "tensor #0 'blk.0.attn_q.weight': n_dims=7"),
    "n_dims 0": (build(tensors=[tinfo("a", [], QT.F32, 0)]), "n_dims=0"),
    "zero dim": (build(tensors=[tinfo("a", [4, 0], QT.F32, 0)]), "ne[1]=0"),
    "negative dim": (build(tensors=[tinfo("a", [-5, 2], QT.F32, 0)]), "ne[0]=-5"),
    "dims product overflows int64": (build(tensors=[tinfo("a", [2**32, 2**32], QT.F32, 0)]),
                                     "overflows int64"),
    "unsupported type (IQ)": (build(tensors=[tinfo("a", [256], QT.IQ1_S, 0)]),
                              "type id 19 (IQ1_S) is not supported"),
    "unknown type": (build(tensors=[tinfo("a", [4], 200, 0)]), "type id 200 is unknown"),
    "ne[0] not a block multiple": (build(tensors=[tinfo("a", [33], QT.Q8_0, 0)]),
                                   "ne[0]=33 is not a multiple of the Q8_0 block size 32"),
    "alignment 0": (build(kvs=[kv_u32("general.alignment", 0)]), "general.alignment=0"),
    "alignment not a power of 2": (build(kvs=[kv_u32("general.alignment", 48)], alignment=48),
                                   "general.alignment=48 is not a non-zero power of two"),
    "alignment wrong type": (build(kvs=[kv("general.alignment", VT.UINT64, struct.pack("<Q", 32))]),
                             "general.alignment has type UINT64 (must be UINT32)"),
    "offset not aligned": (build(tensors=[tinfo("a", [4], QT.F32, 4)]),
                           "offset 4 is not a multiple of the alignment 32"),
    "tensor past EOF": (build(tensors=[tinfo("a", [4], QT.F32, 64)]), "runs past end of file"),
    "tensor offset overflows": (build(tensors=[tinfo("a", [4], QT.F32, 2**64 - 32)]),
                                "runs past end of file"),
    "tensor bytes past EOF": (build(tensors=[tinfo("a", [2**40], QT.F32, 0)]), "runs past end of file"),
    "row bytes overflow (2^62 F32)": (build(tensors=[tinfo("a", [2**62], QT.F32, 0)]),
                                      "byte size of ne[0]=4611686018427387904"),
    "row bytes wrap to a small size": (build(tensors=[tinfo("a", [2**62 + 1], QT.F32, 0)]),
                                       "overflows uint64"),
    "empty nested arrays past the memory bound": (
        build(kvs=[kv("k", VT.ARRAY, array(VT.ARRAY, 400_000, array(VT.UINT8, 0, b"") * 400_000))],
              tensors=[], data=b""), "array count of ARRAY=400000 would need more memory"),
    "overlapping tensors": (build(tensors=[tinfo("a", [16], QT.F32, 0), tinfo("b", [8], QT.F32, 32)],
                                  data=b"\0" * 96), "overlap"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_raises_named_error(tmp_path, case):
    raw, needle = BAD_FILES[case]
    with pytest.raises(GGUFError) as info:
        open_bytes(tmp_path, raw)
    assert needle in str(info.value), str(info.value)
    assert str(info.value).startswith("gguf: ")


def test_nesting_at_the_limit_is_accepted(tmp_path):
    four = array(VT.ARRAY, 1, array(VT.ARRAY, 1, array(VT.ARRAY, 1, array(VT.UINT8, 2, b"\1\2"))))
    f = open_bytes(tmp_path, build(kvs=[kv("k", VT.ARRAY, four)]))
    assert f.value_type("k") == "ARRAY[ARRAY[ARRAY[ARRAY[UINT8]]]]"
    assert f.metadata["k"][0][0][0].tolist() == [1, 2]


def test_empty_arrays_and_no_tensors(tmp_path):
    f = open_bytes(tmp_path, build(kvs=[kv("e", VT.ARRAY, array(VT.STRING, 0, b"")),
                                        kv("n", VT.ARRAY, array(VT.FLOAT32, 0, b""))],
                                   tensors=[], data=b""))
    assert f.metadata["e"] == [] and f.metadata["n"].shape == (0,) and f.tensors == []


def test_invalid_utf8_string_value_round_trips(tmp_path):
    f = open_bytes(tmp_path, build(kvs=[kv("s", VT.STRING, gstr(b"ok\xff"))]))
    assert f.metadata["s"].encode("utf-8", "surrogateescape") == b"ok\xff"


TRUNCATED = "truncated|past end of file|remain in the file|magic"


def section_boundaries(raw_kvs: list[bytes], raw_tensors: list[bytes]) -> list[int]:
    """Byte offsets where each header field, key-value and tensor info ends."""
    bounds = [4, 8, 16, 24]
    pos = 24
    for part in raw_kvs + raw_tensors:
        pos += len(part)
        bounds.append(pos)
    return bounds


def test_truncated_at_every_section_boundary_and_byte(tmp_path):
    kvs = [kv_str("general.architecture", "test"),
           kv("arr", VT.ARRAY, array(VT.STRING, 2, gstr("x") + gstr("yz"))),
           kv("nest", VT.ARRAY, array(VT.ARRAY, 1, array(VT.INT16, 2, b"\1\0\2\0")))]
    raw = build(kvs=kvs)
    full = open_bytes(tmp_path, raw)
    required = full.data_offset + max(t.relative_offset + t.nbytes for t in full.tensors)
    assert required == len(raw)
    data_start = full.data_offset
    cuts = section_boundaries(kvs, DEFAULT_TENSORS) + [data_start, data_start + 32]
    assert len(set(cuts)) == len(cuts)
    for cut in sorted(set(cuts) | set(range(len(raw)))):
        with pytest.raises(GGUFError, match=TRUNCATED):
            open_bytes(tmp_path, raw[:cut], name="cut.gguf")


def test_random_corruption_never_crashes(tmp_path):
    """Seeded byte corruptions of a small file: each either opens fully or raises GGUFError."""
    kvs = [kv_str("general.architecture", "test"), kv("arr", VT.ARRAY, array(VT.INT32, 3, b"\1" * 12)),
           kv("nest", VT.ARRAY, array(VT.ARRAY, 2, array(VT.STRING, 1, gstr("ab")) * 2))]
    raw = build(kvs=kvs)
    rng = np.random.default_rng(1234)
    opened = 0
    for _ in range(400):
        bad = bytearray(raw)
        for pos in rng.integers(0, len(raw) - DEFAULT_DATA_BYTES, size=rng.integers(1, 4)):
            bad[pos] = rng.choice([0x00, 0xff, 0x7f, 0x80, 0x01, int(rng.integers(0, 256))])
        try:
            f = open_bytes(tmp_path, bytes(bad), name="fuzz.gguf")
        except GGUFError:
            continue
        opened += 1   # a corruption that still parses must be fully usable
        as_lists(list(f.metadata.values()))
        for t in f.tensors:
            assert t.offset + t.nbytes <= len(bad)
            f.tensor_data(t.name).tobytes()
    assert opened < 400


def test_truncated_real_model_header(tmp_path):
    """Cutting a real model inside its metadata and tensor infos fails cleanly at every boundary."""
    src = model_file("smollm2-135m-q4_1")
    f = GGUFFile(src)
    with open(src, "rb") as fh:
        head = fh.read(f.data_offset)
    step = max(1, len(head) // 97)   # ~100 cuts spread over the whole header
    for cut in list(range(0, len(head), step)) + [len(head) - 1, len(head)]:
        with pytest.raises(GGUFError, match=TRUNCATED):
            open_bytes(tmp_path, head[:cut], name="cut.gguf")


# ---------------------------------------------------------------------------------------------
# Declared counts must not turn into allocations: open under a small address-space limit

ALLOC_PROBE = textwrap.dedent("""
    import resource, sys
    from localllm.gguf import GGUFError, GGUFFile
    import numpy  # loaded before measuring, like everything else open() could touch
    with open("/proc/self/status") as fh:
        vm_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:"))
    limit = vm_kb * 1024 + (256 << 20)   # 256 MiB above what the process already maps
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    for path in sys.argv[1:]:
        try:
            GGUFFile(path)
            print("OPENED", path)
        except GGUFError as e:
            print("GGUFError", path, e)
        except MemoryError:
            print("MemoryError", path)
""")


def test_huge_declared_counts_do_not_allocate(tmp_path):
    images = {  # each count would need gigabytes if a container were sized from it
        "kv.gguf": build(n_kv=2**36),
        "tensors.gguf": build(n_tensors=2**36),
        "strings.gguf": build(kvs=[kv("k", VT.ARRAY, array(VT.STRING, 2**28, b"\0" * 64))]),
        "arrays.gguf": build(kvs=[kv("k", VT.ARRAY, array(VT.ARRAY, 2**26, b"\0" * 64))]),
        "nested.gguf": build(kvs=[kv("k", VT.ARRAY, array(VT.ARRAY, 1, array(VT.STRING, 2**28, b"")))]),
    }
    paths = []
    for name, raw in images.items():
        (tmp_path / name).write_bytes(raw)
        paths.append(str(tmp_path / name))
    python_dir = Path(localllm.__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(python_dir), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", ALLOC_PROBE, *paths], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(paths), out.stdout + out.stderr
    for line in lines:
        assert line.startswith("GGUFError") and "remain in the file" in line, line


@pytest.mark.parametrize("length", [2**63 - 8, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1])
def test_key_length_near_2_63_names_no_key(tmp_path, length):
    """A key length near 2^63 is refused by its length alone; the message quotes no key (it once
    quoted about 2^63 bytes of process memory as the key's name)."""
    raw = build(kvs=[gstr("k", length=length) + struct.pack("<I", VT.UINT32) + b"\0" * 4])
    with pytest.raises(GGUFError) as info:
        open_bytes(tmp_path, raw)
    assert str(info.value).endswith(f"metadata entry #0: key length {length} exceeds the 1 GiB limit")


def test_index_memory_is_bounded_by_the_file_size(tmp_path):
    """A file of many keys whose values are empty arrays costs more to index than it holds:
    refused before the index is built (a 46 MB such file once took 1 GB)."""
    n = 400_000
    keys = [kv(f"k{i}", VT.ARRAY, array(VT.UINT8, 0, b"")) for i in range(n)]
    with pytest.raises(GGUFError, match=f"n_kv={n} would need more memory to index"):
        open_bytes(tmp_path, build(kvs=keys, tensors=[], data=b""))
