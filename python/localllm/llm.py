"""`LLM`: load a GGUF model and generate text with it (the library's main entry point)."""
from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from . import _core, hub
from .embed import Embedder
from .engine import Engine
from .gguf import GGUFFile
from .engine.kv_blocks import BlockTable
from .plan import DEFAULT_GPU_MARGIN, Plan, gpu_free_bytes, parse_n_gpu_layers, plan_layers
from .engine.requests import EngineRequest, Prompt, RequestBuilder
from .engine.speculative import DraftModelProposer, NgramProposer, SpecConfig, check_same_vocab
from .structured.tools import ToolCallStream, ToolSetup, calls_finish_reason
from .text.tokenizer import Tokenizer

__all__ = ["LLM", "GenerationResult", "TextStream", "Timings", "Prompt", "default_threads"]


def default_threads() -> int:
    """Threads to use by default: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class Timings:
    load_s: float = 0.0
    prompt_tokens: int = 0
    prompt_s: float = 0.0
    generated_tokens: int = 0
    generation_s: float = 0.0
    draft_tokens: int = 0          # speculative decoding: tokens drafted for this generation
    accepted_tokens: int = 0       # ... of which the target accepted

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prompt_s if self.prompt_s > 0 else 0.0

    @property
    def generation_tps(self) -> float:
        return self.generated_tokens / self.generation_s if self.generation_s > 0 else 0.0


@dataclass
class GenerationResult:
    """One generation. With tools (`LLM.chat(..., tools=...)`), calls the model made are parsed
    out: `text` is then the content around them (the markup removed), `tool_calls` the calls as
    OpenAI shapes them ({"id", "type": "function", "function": {"name", "arguments"}}, the
    arguments a JSON string) and finish_reason "tool_calls"."""
    text: str
    token_ids: list[int]
    finish_reason: str                 # "stop" (EOS/EOT or a stop string), "length" or "tool_calls"
    prompt_token_ids: list[int]
    timings: Timings
    logprobs: list[dict] | None = None  # per token: {"token", "logprob", "top": [(id, logprob)]}
    tool_calls: list[dict] | None = None

    @property
    def message(self) -> dict:
        """The assistant's message, to append to the conversation (with its tool calls)."""
        if self.tool_calls:
            return {"role": "assistant", "content": self.text or None, "tool_calls": self.tool_calls}
        return {"role": "assistant", "content": self.text}


@dataclass
class _Step:
    """One generated token, as the generation loop reports it."""
    token: int
    text: str
    logprob: dict | None = None


@dataclass
class _Run:
    """State of one generation (what `generate` returns is built from it)."""
    prompt_ids: list[int]
    timings: Timings
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "length"
    wants_logprobs: bool = False
    tools: ToolSetup | None = None     # parse tool calls out of the output


NUMERICS = ("fast", "llama.cpp")
# device= values and the registry backend each offloads to ("" = the automatic choice); the
# device backends also take a device number, "vulkan:1" (`localllm info --devices` lists them).
DEVICES = {"auto": "", "cpu": "", "cuda": "CUDA", "vulkan": "Vulkan"}


def device_spec(device: str) -> str:
    """The core's device string for a device= value ("vulkan:1" -> "Vulkan:1", "auto" -> "");
    ValueError naming the accepted forms for anything else."""
    name, colon, number = device.partition(":") if isinstance(device, str) else ("", "", "")
    if name in DEVICES and (not colon or (DEVICES[name] and number.isdigit() and len(number) <= 4)):
        return DEVICES[name] + (f":{int(number)}" if colon else "")
    raise ValueError(f"device must be one of {', '.join(DEVICES)} (cuda and vulkan may add ':N', a "
                     f"device number from `localllm info --devices`), got {device!r}")
CACHE_TYPES = ("f16", "q8_0", "q4_0")    # llama.cpp's --cache-type-k / --cache-type-v names


def _cache_type(name: str, which: str) -> str:
    if not isinstance(name, str) or name.lower() not in CACHE_TYPES:
        raise ValueError(f"{which} must be one of {', '.join(CACHE_TYPES)}, got {name!r}")
    return name.lower()


class LLM:
    """A GGUF model ready to generate.

    Args:
        model_path: path to a .gguf file, or a known model name (pulled on first use), or None
            for the default model.
        n_threads: CPU threads (default: all CPUs available to the process).
        n_ctx: context length in tokens; the KV cache pool is sized for it (default 4096, which
            the auto-fit may shrink to fit layers on the GPU; a context given is never shrunk).
        seed: default sampling seed (None: a fresh random seed per call).
        n_batch: tokens evaluated per forward call (all running sequences together).
        max_running: most sequences generating at once (see `localllm.engine`).
        kv_blocks: KV cache blocks of kv_block_size tokens shared by all sequences
            (default: enough for one sequence of n_ctx tokens).
        numerics: "fast" (default): this project's kernels, batch-invariant. "llama.cpp":
            llama.cpp's CPU rounding order op for op, to reproduce its logits bit for bit
            (slower prompts; see docs/fidelity.md for which weight types it covers).
        n_gpu_layers: layers on the GPU, llama.cpp's -ngl: an int (the last N layers plus the
            output head), "all", or "auto" (default: as many as fit in the GPU's free memory
            less gpu_margin; 0 without a GPU). 0 runs on the CPU only. A count > 0 on a build
            without a CUDA backend is an error.
        gpu_margin: bytes of GPU memory auto leaves free (default 1 GiB).
        device: where n_gpu_layers go: "auto" (default: a CUDA device, else a Vulkan GPU),
            "cuda", "vulkan" (a Vulkan CPU implementation such as lavapipe included), or "cpu"
            (the same as n_gpu_layers=0). Process-wide: the last LLM made sets it.
        speculative: speculative decoding for every request (`localllm.engine.speculative`): a
            `SpecConfig`, or "ngram" (prompt lookup with the default sizes). Greedy output is
            exactly plain decoding's; sampled output has plain sampling's distribution.
        draft_model: path of a draft model sharing this model's vocabulary (shorthand for
            speculative=SpecConfig(mode="draft", draft_model=...)); it runs on the CPU.
        cache_type_k, cache_type_v: how the KV cache stores keys and values, llama.cpp's
            --cache-type-k/-v: "f16" (default), "q8_0" (about half the memory) or "q4_0" (about
            a quarter). A quantized cache needs the fast numerics, and runs on the CPU and on
            Vulkan layers (not on CUDA's). A draft model keeps an f16 cache.
    """

    def __init__(self, model_path: str | os.PathLike | None = None, n_threads: int | None = None,
                 n_ctx: int | None = None, seed: int | None = None, n_batch: int = 512,
                 kv_block_size: int = 16, max_running: int = 16, kv_blocks: int | None = None,
                 numerics: str = "fast", n_gpu_layers: int | str | None = None,
                 gpu_margin: int = DEFAULT_GPU_MARGIN, speculative: SpecConfig | str | None = None,
                 draft_model: str | os.PathLike | None = None, cache_type_k: str = "f16",
                 cache_type_v: str = "f16", device: str = "auto"):
        t0 = time.perf_counter()
        if numerics not in NUMERICS:
            raise ValueError(f"numerics must be one of {', '.join(NUMERICS)}, got {numerics!r}")
        self.numerics = numerics
        self.cache_types = (_cache_type(cache_type_k, "cache_type_k"), _cache_type(cache_type_v, "cache_type_v"))
        if self.cache_types != ("f16", "f16") and numerics != "fast":
            raise ValueError(f"a {'/'.join(self.cache_types)} KV cache needs numerics='fast' "
                             f"(llama.cpp numerics reproduce its f16 cache)")
        self.device_spec = device_spec(device)    # the core's device string ("" = automatic)
        if device == "cpu":
            if n_gpu_layers not in (None, "auto", 0, "0"):
                raise ValueError(f"device='cpu' contradicts n_gpu_layers={n_gpu_layers!r}")
            n_gpu_layers = 0
        self.device = device
        ctx_set = n_ctx is not None
        n_ctx = 4096 if n_ctx is None else n_ctx
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
        if n_batch < 1:
            raise ValueError(f"n_batch must be >= 1, got {n_batch}")
        self.model_path = Path(hub.resolve_model(model_path))
        self.n_threads = n_threads or default_threads()
        self.n_batch = n_batch
        self.seed = seed
        if kv_blocks is not None and kv_blocks < 1:
            raise ValueError(f"kv_blocks must be >= 1, got {kv_blocks}")
        self.speculative = _spec_config(speculative, draft_model)
        # The plan of the GPU placement (None on the CPU-only path).
        self.plan: Plan | None = self._plan(parse_n_gpu_layers(n_gpu_layers), n_ctx, ctx_set,
                                            kv_blocks, kv_block_size, gpu_margin)
        self.n_gpu_layers = self.plan.n_gpu_layers if self.plan else 0
        self.n_ctx = self.plan.n_ctx if self.plan else n_ctx
        n_blocks = (self.plan.kv_blocks if self.plan else
                    (kv_blocks or -(-n_ctx // kv_block_size)) + 1)          # + the null block
        self._model, self.tokenizer, chat_template = self._load_model_and_tokenizer(
            n_blocks, kv_block_size)
        self._model.reserve(n_batch)          # the scratch the plan counted, allocated now
        self.requests = RequestBuilder(self.tokenizer, chat_template, self.n_ctx, seed)
        self.draft_model = None                # the draft model's _core.Model (speculative "draft")
        proposer = self._make_proposer(n_blocks, kv_block_size) if self.speculative else None
        # Grammar masks beside the forward only where it leaves a CPU free (Constraints).
        overlap_masks = self.n_gpu_layers > 0 or self.n_threads < default_threads()
        self._engine = Engine(self._model, self.tokenizer, self.n_ctx, max_batch_tokens=n_batch,
                              max_running=max_running, proposer=proposer, overlap_masks=overlap_masks)
        self._pool = self._engine.pool
        self.hparams: dict = self._model.hparams
        self.n_vocab: int = self.hparams["n_vocab"]
        self.load_time = time.perf_counter() - t0

    def _make_proposer(self, n_blocks: int, kv_block_size: int):
        """The speculative proposer; a draft model is checked for this model's vocabulary first
        and gets its own paged KV cache of as many blocks as this model's."""
        config = self.speculative
        if config.mode == "ngram":
            return NgramProposer(config)
        path = Path(config.draft_model)
        if not path.is_file():
            raise FileNotFoundError(f"draft model {path}: no such file")
        check_same_vocab(GGUFFile(str(self.model_path)).metadata, GGUFFile(str(path)).metadata,
                         self.model_path.name, path.name)
        self.draft_model = _core.Model(str(path), self.n_threads, n_blocks, kv_block_size, self.numerics, 0,
                                       n_ctx=self.n_ctx)
        self.draft_model.reserve(self.n_batch)
        return DraftModelProposer(self.draft_model, config, self.n_batch)

    def _plan(self, ngl: int | str, n_ctx: int, ctx_set: bool, kv_blocks: int | None,
              kv_block_size: int, gpu_margin: int) -> Plan | None:
        """Layers on the GPU and the KV pool (localllm.plan), or None for the CPU-only path,
        which neither reads the file again nor touches CUDA."""
        pool = None if kv_blocks is None else kv_blocks + 1                # + the null block
        if (ngl == "auto" and self.cache_types != ("f16", "f16")
                and not _core.backend_quantized_kv(_core.resolve_device(self.device_spec)[0])):
            return None       # the backend's attention reads an f16 cache only: auto keeps this one on the CPU
        gpu_free = gpu_free_bytes(self.device_spec) if ngl != 0 else None
        if gpu_free is None and ngl not in (0, "auto"):
            dev, number = _core.resolve_device(self.device_spec)
            count = getattr(_core, f"{dev.lower()}_device_count")()
            why = (f"this build of localllm has no {dev} backend" if not _core.backend_compiled(dev)
                   else f"there is no {dev} device {number} ({count} found)" if number >= count
                   else f"no {dev} device is visible")
            raise ValueError(f"n_gpu_layers={ngl!r} needs a GPU, but {why}; use n_gpu_layers=0 "
                             f"(-ngl 0 or --device cpu)")
        if gpu_free is None:
            return None
        footprint = _core.Footprint(str(self.model_path), self.numerics)
        bytes_on_device = functools.partial(footprint.bytes, cache_type_k=self.cache_types[0],
                                            cache_type_v=self.cache_types[1], device=self.device_spec)
        plan = plan_layers(bytes_on_device, footprint.n_layer, ngl, n_ctx=n_ctx,
                           kv_block_size=kv_block_size, n_batch=self.n_batch, kv_blocks=pool,
                           ctx_set=ctx_set, gpu_free=gpu_free, gpu_margin=gpu_margin, gpu_layers_max=footprint.gpu_layers_max)
        if not plan.fits:
            raise MemoryError(f"{self.model_path.name}: " + plan.notes[-1])
        return plan

    def _load_model_and_tokenizer(self, n_blocks: int, kv_block_size: int
                                  ) -> tuple[_core.Model, Tokenizer, str | None]:
        """The C++ model (weights mapped and repacked, GIL released) loads on a second thread
        while this one builds the tokenizer: the two take similar time (a 151k-merge BPE is
        about 0.5 s of Python and Rust), so the load costs the longer of them, not the sum."""
        loaded: dict = {}

        def load_model() -> None:
            try:
                loaded["model"] = _core.Model(str(self.model_path), self.n_threads, n_blocks,
                                              kv_block_size, self.numerics, self.n_gpu_layers,
                                              *self.cache_types, n_ctx=self.n_ctx, device=self.device_spec)
            except BaseException as e:  # re-raised on the caller's thread below
                loaded["error"] = e

        loader = threading.Thread(target=load_model, name="localllm-load", daemon=True)
        loader.start()
        try:
            # Metadata through a throw-away reader: its Python dict (the whole vocabulary as
            # strings, tens of MB for a 262k-token model) is not kept once the tokenizer is built.
            meta = GGUFFile(str(self.model_path)).metadata
            tokenizer = Tokenizer.from_gguf_metadata(meta)
            template = meta.get("tokenizer.chat_template")
            del meta
        except Exception as e:
            tokenizer_error: Exception | None = e
        else:
            tokenizer_error = None
        loader.join()
        # The model's error first: it names an unsupported architecture, or a file that is not
        # a GGUF, before the tokenizer's consequences of the same fault.
        if "error" in loaded:
            raise loaded["error"]
        if tokenizer_error is not None:
            raise tokenizer_error
        return loaded["model"], tokenizer, template

    @property
    def chat_template(self) -> str | None:
        """The chat template `chat` renders with (the GGUF's; None: ChatML)."""
        return self.requests.chat_template

    @chat_template.setter
    def chat_template(self, template: str | None) -> None:
        self.requests.chat_template = template

    @functools.cached_property
    def gguf(self) -> GGUFFile:
        """The file's GGUF reader (metadata, tensor table), opened on first use: kept open from
        the start it held 3-8 MB of parsed metadata that generation never reads."""
        return GGUFFile(str(self.model_path))

    # ---- tokens ----
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    # ---- forward ----
    def _eval(self, table: BlockTable, ids: Sequence[int], start: int,
              rows: np.ndarray | None = None) -> np.ndarray:
        """Evaluate ids at positions start.. in chunks of n_batch.

        Returns the logits of the given rows (indices into ids), or of the last row when None.
        """
        table.ensure(start + len(ids))
        blocks = np.asarray([table.blocks], dtype=np.int32)
        want = np.asarray([len(ids) - 1] if rows is None else rows, dtype=np.int32)
        outs = []
        for c in range(0, len(ids), self.n_batch):
            chunk = np.asarray(ids[c:c + self.n_batch], dtype=np.int32)
            n = len(chunk)
            positions = np.arange(start + c, start + c + n, dtype=np.int32)
            out_rows = want[(want >= c) & (want < c + n)] - c
            logits = self._model.forward(chunk, positions, np.zeros(n, np.int32), blocks, out_rows)
            outs.append(logits)
        return np.concatenate(outs)

    def logits(self, ids: Sequence[int], rows: Sequence[int] | None = None) -> np.ndarray:
        """Teacher-forced logits over `ids` in one pass: float32 [len(ids), n_vocab] (row i
        predicts token i+1), or only the given `rows`, in that order (sorted ascending)."""
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("logits() needs at least one token")
        if len(ids) > self.n_ctx:
            raise ValueError(f"{len(ids)} tokens exceed the context (n_ctx={self.n_ctx})")
        bad = [t for t in ids if not 0 <= t < self.n_vocab]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.n_vocab}): {bad[:5]}")
        want = np.arange(len(ids)) if rows is None else np.asarray(sorted(rows), dtype=np.int64)
        if len(want) and (want[0] < 0 or want[-1] >= len(ids)):
            raise ValueError(f"rows must lie in [0, {len(ids)})")
        with self._engine.lock:                # the pool and model are shared with the engine
            table = BlockTable(self._pool)
            try:
                return self._eval(table, ids, 0, want)
            finally:
                table.free()

    # ---- embeddings and reranking (localllm.embed) ----
    @functools.cached_property
    def embedder(self) -> Embedder:
        """Pooled embeddings and rerank scores of this model (its pooling from the GGUF)."""
        return Embedder(self)

    def embed(self, texts: str | Sequence[str | Sequence[int]], normalize: bool = True,
              dimensions: int | None = None, pooling: str | None = None, truncate: bool = False) -> np.ndarray:
        """Embeddings of `texts` (strings, or token-id lists), float32 [n, d], in one or a few
        packed forwards. normalize: L2-normalize each vector (after `dimensions`). dimensions:
        keep the first d components (Matryoshka). pooling: mean, cls or last instead of the
        model's own. truncate: cut inputs longer than the model takes instead of refusing them."""
        if isinstance(texts, str):
            texts = [texts]
        return self.embedder.embed(texts, normalize, dimensions, pooling, truncate)[0]

    def rerank(self, query: str, documents: Sequence[str], top_n: int | None = None,
               truncate: bool = False) -> list[dict]:
        """Scores of each document's relevance to `query` by a cross-encoder (rank pooling):
        [{"index", "relevance_score", "document"}], best first, the top_n of them (default all)."""
        scores, _ = self.embedder.rerank(query, list(documents), truncate)
        order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
        order = order if top_n is None else order[:max(0, int(top_n))]
        return [{"index": i, "relevance_score": float(scores[i]), "document": documents[i]} for i in order]

    # ---- generation (through the batching engine) ----
    def make_request(self, prompt: Prompt | None = None, *, messages: list[dict] | None = None,
                     n: int = 1, **sampling) -> EngineRequest:
        """The engine request `generate`/`stream`/`chat` (and the CLI and server) run: prompt
        text or token ids, or chat `messages`, with `SamplingParams` fields; validated, seeded
        (the LLM's seed, else a random one), max_tokens capped by the context. See
        `localllm.engine.requests.RequestBuilder.build`."""
        if not self._model.has_output_head:
            raise ValueError(f"{self.model_path.name} is an encoder-only model ({self.hparams['arch']}): it cannot "
                             f"generate text; use embed (or rerank)")
        return self.requests.build(prompt, messages=messages, n=n, **sampling)

    def _request(self, prompt: Prompt | EngineRequest, sampling: dict) -> EngineRequest:
        """A prompt made into a request, or a request made by `make_request` as it is."""
        if not isinstance(prompt, EngineRequest):
            return self.make_request(prompt, **sampling)
        if sampling:
            raise TypeError(f"sampling options ({', '.join(sampling)}) go to make_request, not beside "
                            f"an EngineRequest")
        return prompt

    def _submit(self, request: EngineRequest) -> tuple[int, _Run]:
        """Queue one request (its first choice) in the engine."""
        run = _Run(request.prompt_ids, Timings(load_s=self.load_time),
                   wants_logprobs=request.params.logprobs is not None, tools=request.tools)
        run.timings.prompt_tokens = len(run.prompt_ids)
        return self._engine.submit(run.prompt_ids, request.params), run

    def _steps(self, request_id: int, run: _Run) -> Iterator[_Step]:
        """The request's tokens as the engine produces them. Started at once by `_start`, so that
        closing it (or dropping it) runs `finally` and aborts the request even before its first
        token was asked for."""
        engine = self._engine
        try:
            yield None                              # consumed by _start
            for out in engine.outputs(request_id):
                times = out.times
                run.token_ids += out.token_ids
                run.timings.generated_tokens = len(run.token_ids)
                run.timings.prompt_s = times.ttft or 0.0
                run.timings.generation_s = time.perf_counter() - (times.first_token or times.submitted)
                run.timings.draft_tokens, run.timings.accepted_tokens = times.drafted, times.accepted
                if out.finished:
                    run.finish_reason = out.finish_reason or "length"
                if out.text or out.logprobs:
                    tok = out.token_ids[0] if out.token_ids else -1
                    yield _Step(tok, out.text, out.logprobs[0] if out.logprobs else None)
        finally:
            engine.abort(request_id)                # no-op once finished

    def _start(self, request_id: int, run: _Run) -> Iterator[_Step]:
        steps = self._steps(request_id, run)
        next(steps)
        return steps

    def generate(self, prompt: Prompt | EngineRequest | list[Prompt | EngineRequest], **sampling):
        """Generate a completion of `prompt` (text, or a list of int token ids used as they
        are, or a request from `make_request`); given a list of prompts, run them concurrently
        and return a list of results in the same order.

        Keyword arguments are `SamplingParams` fields: max_tokens, temperature, top_k, top_p,
        min_p, repeat_penalty, presence_penalty, frequency_penalty, penalty_last_n, logit_bias,
        seed, stop, logprobs, ignore_eos; and at most one constraint on the output:
        json_schema (a JSON schema, dict or text), grammar (GBNF or Lark), regex, or
        response_format (OpenAI's: {"type": "json_object"} or {"type": "json_schema",
        "json_schema": {"name", "schema"}}). An invalid or unsupported one is a ValueError.
        """
        if not _is_prompt_list(prompt):
            return self._collect(*self._submit(self._request(prompt, sampling)))
        if not prompt:
            raise ValueError("the list of prompts is empty")
        requests = [self._request(p, sampling) for p in prompt]    # all checked first
        submitted = []
        try:
            for request in requests:
                submitted.append(self._submit(request))
            return [self._collect(rid, run) for rid, run in submitted]
        finally:
            for rid, _ in submitted:
                self._engine.abort(rid)

    def _collect(self, request_id: int, run: _Run) -> GenerationResult:
        pieces, logprobs = [], []
        for step in self._start(request_id, run):
            pieces.append(step.text)
            if step.logprob is not None:
                logprobs.append(step.logprob)
        result = GenerationResult("".join(pieces), run.token_ids, run.finish_reason, run.prompt_ids,
                                  run.timings, logprobs if run.wants_logprobs else None)
        if run.tools is not None:
            content, calls = run.tools.parse(result.text)
            if calls:
                result.text, result.tool_calls = content, [call.openai() for call in calls]
                result.finish_reason = calls_finish_reason(calls, result.finish_reason)
        return result

    def stream(self, prompt: Prompt | EngineRequest, **sampling) -> TextStream:
        """Iterate over the completion's text as it is generated (complete UTF-8 characters only).

        The returned `TextStream` also carries `.token_ids`, `.finish_reason` and `.timings`;
        `close()` (or dropping it) stops generation and frees its KV blocks.
        """
        request_id, run = self._submit(self._request(prompt, sampling))
        return TextStream(self._start(request_id, run), run)

    @property
    def engine(self) -> Engine:
        """The continuous-batching engine behind generate/stream/chat (submit, outputs, abort,
        pool_state, stats), e.g. for a server."""
        return self._engine

    @property
    def isa(self) -> str:
        """The SIMD level the kernels run at (e.g. "avx512")."""
        return self._model.isa

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return self.requests.chat_prompt(messages, add_generation_prompt)

    def chat(self, messages: list[dict], **sampling) -> GenerationResult:
        """Reply to a conversation ([{"role": ..., "content": ...}, ...]) using the model's template.

        Keyword arguments are generate's, and OpenAI's tool calling: tools (a list of
        {"type": "function", "function": {"name", "description", "parameters"}}), tool_choice
        ("auto" (default): the model chooses; "none"; "required": a call, enforced by a grammar;
        {"type": "function", "function": {"name": ...}}: a call of that function) and
        parallel_tool_calls (default True). The result's `tool_calls` and finish_reason
        "tool_calls" report the calls; `result.message` goes back into the conversation, followed
        by {"role": "tool", "tool_call_id": ..., "content": ...} messages with the results.
        """
        return self._collect(*self._submit(self.make_request(messages=messages, **sampling)))


class TextStream:
    """Text pieces of one generation, as they come; see `LLM.stream`. A chat request with
    tools (`make_request(messages=..., tools=...)`) streams only content: text that may be
    tool-call markup is held back, and once the stream ends `tool_calls` has the calls."""

    def __init__(self, steps: Iterator[_Step], run: _Run):
        self._steps = steps
        self._run = run
        self._tool_stream = ToolCallStream(run.tools) if run.tools is not None else None
        self.tool_calls: list[dict] | None = None

    def __iter__(self) -> TextStream:
        return self

    def __next__(self) -> str:
        while True:
            try:
                step = next(self._steps)
            except StopIteration:
                if self._tool_stream is None:
                    raise
                text, self._tool_stream = self._finish_tools(self._tool_stream), None
                if text:
                    return text
                raise
            text = self._tool_stream.feed(step.text) if self._tool_stream is not None else step.text
            if text:
                return text

    def _finish_tools(self, tool_stream: ToolCallStream) -> str:
        """The content held back at the end; the calls into tool_calls and finish_reason."""
        content, calls = tool_stream.finish()
        if calls:
            self.tool_calls = [call.openai() for call in calls]
            self._run.finish_reason = calls_finish_reason(calls, self._run.finish_reason)
        return content

    def close(self) -> None:
        self._steps.close()

    @property
    def token_ids(self) -> list[int]:
        return self._run.token_ids

    @property
    def finish_reason(self) -> str:
        return self._run.finish_reason

    @property
    def timings(self) -> Timings:
        return self._run.timings


def _spec_config(speculative: SpecConfig | str | None, draft_model) -> SpecConfig | None:
    """LLM's speculative / draft_model arguments as one validated SpecConfig (or None)."""
    if isinstance(speculative, str):
        speculative = SpecConfig(mode=speculative)
    if draft_model is not None:
        if speculative is None:
            speculative = SpecConfig(mode="draft")
        if speculative.mode != "draft" or (speculative.draft_model not in (None, str(draft_model))):
            raise ValueError("draft_model contradicts the speculative configuration given")
        speculative = dataclasses.replace(speculative, draft_model=str(draft_model))
    if speculative is not None and not isinstance(speculative, SpecConfig):
        raise TypeError(f"speculative must be a SpecConfig, 'ngram', 'draft' or None, got {speculative!r}")
    if speculative is not None:
        speculative.validate()
    return speculative


def _is_prompt_list(prompt) -> bool:
    """A list of prompts (texts or token-id lists), as opposed to one prompt's token ids."""
    return isinstance(prompt, (list, tuple)) and (not prompt or isinstance(prompt[0], (str, list, tuple, np.ndarray, EngineRequest)))
