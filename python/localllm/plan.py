"""Where each layer runs, and the bytes each device will be asked for (`-ngl N|all|auto`).

The byte counts come from `_core.Footprint`, which reads the GGUF's tensor table (no weight is
read) and sizes every buffer with the functions the allocators themselves use
(`csrc/model/footprint.cpp`): weights after the CPU's repacking (or in their GGUF bytes on a GPU), KV
blocks for the pool, scratch activations for the largest batch. After loading,
`_core.Model.allocated` reports what was really allocated, in the same terms.

`-ngl` has llama.cpp's meaning: the last N layers plus the output head on the GPU, the input
embedding on the CPU. `auto` puts as many layers on the GPU as fit in its free memory less a
margin, shrinking the default KV pool (a context nobody asked for) before moving layers off;
a context or pool the user set is never shrunk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

from . import _core

__all__ = ["Plan", "DeviceBytes", "parse_n_gpu_layers", "plan_layers", "gpu_free_bytes",
           "DEFAULT_GPU_MARGIN", "MIN_AUTO_CTX", "kv_blocks_for"]

GIB = 1 << 30
DEFAULT_GPU_MARGIN = GIB
# The default KV pool is halved, down to a context of this many tokens, before auto moves a
# layer off the GPU.
MIN_AUTO_CTX = 1024

NGpuLayers = Union[int, str]          # a count, "all" or "auto"
# (n_gpu_layers, kv_blocks, kv_block_size, n_batch) -> {device: {"weights", "kv", "scratch"}}
FootprintFn = Callable[[int, int, int, int], dict]


@dataclass
class DeviceBytes:
    weights: int
    kv: int
    scratch: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.scratch


@dataclass
class Plan:
    n_layer: int
    n_gpu_layers: int
    n_ctx: int
    kv_blocks: int                      # the pool, the null block included
    devices: dict[str, DeviceBytes]
    gpu_budget: int | None              # free GPU memory less the margin (None: no GPU)
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_device(self) -> str:
        """The device the offloaded layers go to ("CUDA", "Vulkan"): the one that is not the CPU."""
        return next((name for name in self.devices if name != "CPU"), "CUDA")

    @property
    def fits(self) -> bool:
        gpu = self.devices.get(self.gpu_device)
        return gpu is None or self.gpu_budget is None or gpu.total <= self.gpu_budget

    def describe(self) -> str:
        if self.n_gpu_layers == 0:
            where = "CPU only"
        elif self.n_gpu_layers == self.n_layer:
            where = f"every layer and the output head on {self.gpu_device}, the input embedding on the CPU"
        else:
            where = (f"layers {self.n_layer - self.n_gpu_layers}-{self.n_layer - 1} and the output "
                     f"head on {self.gpu_device}, the rest on the CPU")
        lines = [f"n_gpu_layers {self.n_gpu_layers}/{self.n_layer} ({where}); context {self.n_ctx} "
                 f"tokens, {self.kv_blocks} KV blocks"]
        lines.append(f"{'device':<8}{'weights':>14}{'KV':>14}{'scratch':>14}{'total':>14}")
        for name, d in self.devices.items():
            lines.append(f"{name:<8}{d.weights:>14,}{d.kv:>14,}{d.scratch:>14,}{d.total:>14,}")
        if self.gpu_budget is not None:
            lines.append(f"GPU budget (free less margin): {self.gpu_budget:,} bytes")
        lines.extend(self.notes)
        return "\n".join(lines)


def parse_n_gpu_layers(value: NGpuLayers | None) -> NGpuLayers:
    """`-ngl` as given: an int >= 0, "all" or "auto" (None: auto)."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        raise ValueError(f"n_gpu_layers must be an int >= 0, 'all' or 'auto', not {value!r}")
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("all", "auto"):
            return v
        try:
            value = int(v)
        except ValueError:
            raise ValueError(f"n_gpu_layers must be an int >= 0, 'all' or 'auto', not {value!r}") from None
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"n_gpu_layers must be an int >= 0, 'all' or 'auto', not {value!r}")
    return value


def kv_blocks_for(n_ctx: int, kv_block_size: int) -> int:
    """The default pool: one sequence of n_ctx tokens, plus the null block."""
    return -(-n_ctx // kv_block_size) + 1


def gpu_free_bytes(device: str = "") -> int | None:
    """Free memory of the device that a core device string ("" = the automatic choice, "Vulkan",
    "CUDA:1"; `_core.resolve_device`) offloads to, or None where this build lacks that backend or
    the machine that device. The query is the registry's `<name>_free_memory(device)`."""
    name, number = _core.resolve_device(device)
    if not _core.backend_compiled(name) or number < 0 or number >= getattr(_core, f"{name.lower()}_device_count")():
        return None
    return int(getattr(_core, f"{name.lower()}_free_memory")(number))


def _bytes(footprint: FootprintFn, ngl: int, kv_blocks: int, kv_block_size: int,
           n_batch: int) -> dict[str, DeviceBytes]:
    raw = footprint(ngl, kv_blocks, kv_block_size, n_batch)
    return {dev: DeviceBytes(int(b["weights"]), int(b["kv"]), int(b["scratch"])) for dev, b in raw.items()}


def plan_layers(footprint: FootprintFn, n_layer: int, n_gpu_layers: NGpuLayers, *, n_ctx: int,
                kv_block_size: int, n_batch: int, kv_blocks: int | None = None,
                ctx_set: bool = True, gpu_free: int | None = None,
                gpu_margin: int = DEFAULT_GPU_MARGIN, gpu_layers_max: int | None = None) -> Plan:
    """Choose the layers on the GPU and the KV pool.

    kv_blocks: a pool the user set (the null block included), or None for the default one
    sized for n_ctx. ctx_set: n_ctx was given by the user (then the default pool is not
    shrunk either). gpu_free: free GPU bytes (None: no GPU; auto then plans 0 layers).
    gpu_layers_max: the most layers the model can run on a GPU (Footprint.gpu_layers_max; 0 for
    mixture-of-experts and encoder models): auto plans no more, a larger count is refused.
    """
    ngl = parse_n_gpu_layers(n_gpu_layers)
    most = n_layer if gpu_layers_max is None else min(n_layer, gpu_layers_max)
    if most < n_layer and (ngl == "all" or isinstance(ngl, int) and ngl > most):
        raise ValueError(f"n_gpu_layers={ngl!r}: this model's layers run on the CPU only "
                         f"(mixture-of-experts and encoder layers have no GPU path yet); use n_gpu_layers=0")
    if gpu_margin < 0:
        raise ValueError(f"gpu_margin must be >= 0, got {gpu_margin}")
    budget = None if gpu_free is None else gpu_free - gpu_margin
    shrinkable = kv_blocks is None and not ctx_set

    def contexts() -> list[int]:
        """Contexts to try, largest first: the asked one, then halves down to MIN_AUTO_CTX."""
        out = [n_ctx]
        while shrinkable and out[-1] // 2 >= MIN_AUTO_CTX:
            out.append(out[-1] // 2)
        return out

    def make(layers: int, ctx: int) -> Plan:
        blocks = kv_blocks if kv_blocks is not None else kv_blocks_for(ctx, kv_block_size)
        return Plan(n_layer, layers, ctx, blocks,
                    _bytes(footprint, layers, blocks, kv_block_size, n_batch), budget)

    def first_fit(layers: int) -> Plan | None:
        for ctx in contexts():
            p = make(layers, ctx)
            if p.fits:
                if ctx != n_ctx:
                    p.notes.append(f"the default context was shrunk from {n_ctx} to {ctx} tokens "
                                   f"to fit {layers} layers on the GPU")
                return p
        return None

    if ngl == "auto":
        if most == 0:
            p = make(0, n_ctx)
            p.notes.append("auto: this model's layers run on the CPU only (mixture-of-experts and encoder models)")
            return p
        if budget is None:
            p = make(0, n_ctx)
            p.notes.append("auto: no GPU (or no CUDA backend in this build): every layer on the CPU")
            return p
        for layers in range(most, -1, -1):
            p = first_fit(layers)
            if p is not None:
                p.notes.append(f"auto: {layers} of {n_layer} layers fit on the GPU")
                return p
        raise AssertionError("0 GPU layers always fit")
    layers = n_layer if ngl == "all" else min(int(ngl), n_layer)
    p = first_fit(layers) if budget is not None else None
    if p is None:
        p = make(layers, n_ctx)
        if not p.fits:
            gpu = p.devices[p.gpu_device]
            p.notes.append(f"does not fit: the GPU needs {gpu.total:,} bytes (weights {gpu.weights:,}, "
                           f"KV {gpu.kv:,}, scratch {gpu.scratch:,}), {budget:,} available after the margin")
    return p
