"""Chat generation with llama.cpp (llama-cpp-python), in-process, off the event loop.

Why it is built this way:

- Lazy: `ChatEngine` only records where the GGUF file is. The model is loaded on the first request, in a
  worker thread, so an idle gateway stays small and starts at once.
- Off the loop: tokenising, prompt evaluation and sampling run in the engine's own thread pool (one thread per
  slot), so the event loop keeps answering /health and other requests while a model generates. llama.cpp's
  C calls release the GIL.
- One generation at a time per loaded model (`parallel` slots, default 1): a llama.cpp context is not
  thread-safe, and on a small CPU two concurrent generations are slower in total than two queued ones.
  Waiters queue fairly on an asyncio.Semaphore and the wait is reported as `queued_ms`. With `parallel: N`
  the engine loads N contexts (the weights are memory-mapped, so they are shared).
- Own sampling loop over `Llama.generate` rather than `create_chat_completion`: it gives exact token counts
  (with max_tokens=N and finish_reason `length`, completion_tokens is N), stop sequences held back across
  token boundaries, a cancel flag checked between tokens (a client that disconnects stops generation at the
  next token), and a full context reset per generation so that the same seed always gives the same text.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal

from inferplex.errors import ContextLengthExceeded, InvalidRequest, Unavailable
from inferplex.providers.local_chat import ChatPlan

if TYPE_CHECKING:
    from llama_cpp import Llama

GGUF_MAGIC = b"GGUF"
# The KV cache is allocated up front for the whole window (8192 tokens cost SmolLM2-135M ~190 MB), so a model
# trained on 128k tokens is not given 128k unless its configuration asks.
DEFAULT_N_CTX = 8192
# llama.cpp treats this seed value as "pick one at random".
_RANDOM_SEED = 0xFFFFFFFF

Finish = Literal["stop", "length"]
Emit = Callable[[tuple[Any, ...]], None]


@dataclass(frozen=True, slots=True)
class ChatSpec:
    """A GGUF chat model and how to run it; defaults suit the bundled SmolLM2 (its model card's sampling)."""

    name: str
    path: Path
    n_ctx: int | None = None  # default: the model's training context, at most DEFAULT_N_CTX
    n_threads: int | None = None
    parallel: int = 1
    temperature: float = 0.2
    top_p: float = 0.9
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0


def check_gguf(path: Path) -> str | None:
    """Why `path` cannot be a GGUF model, or None (checked at start-up so a bad path never waits for a request)."""
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if magic != GGUF_MAGIC:
        return f"{path} is not a GGUF file"
    return None


@dataclass(slots=True)
class Generation:
    text: str
    tokens: int
    finish: Finish


def _partial_stop(text: str, stops: list[str]) -> int:
    """How many trailing characters of `text` could be the start of a stop sequence (so must be held back)."""
    keep = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), keep, -1):
            if text.endswith(stop[:k]):
                keep = k
                break
    return keep


def _trained_context(path: Path) -> int:
    """min(the model's training context, DEFAULT_N_CTX), read from the GGUF metadata (vocabulary-only load)."""
    from llama_cpp import llama_model_default_params
    from llama_cpp._internals import LlamaModel

    params = llama_model_default_params()
    params.vocab_only = True
    probe = LlamaModel(path_model=str(path), params=params, verbose=False)
    try:
        metadata = probe.metadata()
        arch = metadata.get("general.architecture", "")
        trained = int(metadata.get(f"{arch}.context_length", DEFAULT_N_CTX))
    except ValueError:
        trained = DEFAULT_N_CTX
    finally:
        probe.close()  # type: ignore[no-untyped-call]
    return max(16, min(trained, DEFAULT_N_CTX))


class LoadedModel:
    """A loaded llama.cpp context. Used only from one worker thread at a time."""

    def __init__(self, spec: ChatSpec) -> None:
        from llama_cpp import Llama, llama_chat_format

        self.spec = spec
        # Half the cores by default (llama-cpp-python's default too): measured on 2 cores, a second llama.cpp
        # thread is ~1.5x faster on an idle machine but collapses (OpenMP spin-waits) as soon as anything else
        # wants a core, the gateway's own event loop and the embedding model included. See docs/benchmarks.md.
        threads = spec.n_threads or max(1, (os.cpu_count() or 2) // 2)
        n_ctx = spec.n_ctx or _trained_context(spec.path)
        self.llm: Llama = Llama(
            model_path=str(spec.path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False
        )
        self.n_ctx = self.llm.n_ctx()
        template = self.llm.metadata.get("tokenizer.chat_template") or _CHATML
        self.bos = self.llm.detokenize([self.llm.token_bos()], special=True).decode("utf-8", "replace")
        eos = self.llm.detokenize([self.llm.token_eos()], special=True).decode("utf-8", "replace")
        self.formatter = llama_chat_format.Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=self.bos)
        self.add_bos = bool(self.llm._model.add_bos_token())

    def close(self) -> None:
        self.llm.close()

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        try:
            prompt = self.formatter(messages=messages).prompt  # type: ignore[arg-type]
        except Exception as exc:  # a template's raise_exception() or a Jinja error
            raise InvalidRequest(f"The model's chat template rejected the messages: {exc}", param="messages") from None
        add_bos = self.add_bos and not (self.bos and prompt.startswith(self.bos))
        tokens: list[int] = self.llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)
        return tokens

    def check_grammar(self, grammar: str, param: str) -> None:
        """llama.cpp adds a grammar it failed to parse as a null sampler (a crash): parse it once first."""
        from llama_cpp import llama_sampler_free, llama_sampler_init_grammar

        sampler = llama_sampler_init_grammar(self.llm._model.vocab, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise InvalidRequest("The local model cannot compile a grammar for this request.", param=param)
        llama_sampler_free(sampler)

    def is_end(self, token: int) -> bool:
        from llama_cpp import llama_vocab_is_eog

        return bool(llama_vocab_is_eog(self.llm._model.vocab, token))

    def generate(
        self,
        tokens: list[int],
        plan: ChatPlan,
        max_new: int,
        seed: int,
        cancel: threading.Event,
        emit: Callable[[str], None],
    ) -> Generation:
        from llama_cpp.llama_grammar import LlamaGrammar

        spec, llm = self.spec, self.llm
        llm.reset()  # type: ignore[no-untyped-call]  # no KV-cache reuse: the same seed and prompt must give the same text
        llm.set_seed(seed)
        grammar = LlamaGrammar.from_string(plan.grammar) if plan.grammar else None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        out: list[str] = []
        held = ""
        count = 0
        finish: Finish = "length"

        def send(text: str) -> None:
            if text:
                out.append(text)
                emit(text)

        temperature = spec.temperature if plan.temperature is None else plan.temperature
        for token in llm.generate(
            tokens,
            top_k=spec.top_k,
            top_p=spec.top_p if plan.top_p is None else plan.top_p,
            min_p=spec.min_p,
            temp=temperature,
            repeat_penalty=spec.repeat_penalty,
            frequency_penalty=plan.frequency_penalty,
            presence_penalty=plan.presence_penalty,
            grammar=grammar,
        ):
            if self.is_end(token):
                finish = "stop"
                break
            count += 1
            held += decoder.decode(llm.detokenize([token]))
            cut = min((i for i in (held.find(s) for s in plan.stops) if i >= 0), default=-1)
            if cut >= 0:
                send(held[:cut])
                return Generation("".join(out), count, "stop")
            keep = _partial_stop(held, plan.stops)
            send(held[: len(held) - keep])
            held = held[len(held) - keep :]
            if count >= max_new or cancel.is_set():
                break
        send(held + decoder.decode(b"", final=True))
        return Generation("".join(out), count, finish)


_CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def seed_for(plan: ChatPlan, index: int) -> int:
    """Choice i of a seeded request uses seed+i: reproducible, yet the n choices differ."""
    if plan.seed is None:
        return secrets.randbelow(_RANDOM_SEED)
    seed = (plan.seed + index) & 0xFFFFFFFF
    return seed - 1 if seed == _RANDOM_SEED else seed


def run_request(
    model: LoadedModel, plan: ChatPlan, cancel: threading.Event, emit: Emit
) -> tuple[int, list[Generation]]:
    """The whole request, in the worker thread: check the prompt fits, then generate the n choices.

    Emits ("start", prompt_tokens), then ("delta", i, text) pieces and ("end", i, Generation) per choice.
    """
    tokens = model.prompt_tokens(plan.messages)
    if plan.grammar is not None:
        model.check_grammar(plan.grammar, "response_format" if plan.mode == "json" else "tools")
    limit = min(model.n_ctx, plan.context_limit or model.n_ctx)
    if len(tokens) >= limit:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {limit} tokens, but the messages have {len(tokens)} tokens. "
            "Please shorten the messages.",
            param="messages",
        )
    if plan.max_tokens is not None and len(tokens) + plan.max_tokens > limit:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{len(tokens) + plan.max_tokens} tokens ({len(tokens)} in the messages, {plan.max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            param="messages",
        )
    max_new = plan.max_tokens or min(limit - len(tokens), plan.max_output or limit)
    emit(("start", len(tokens)))
    results: list[Generation] = []
    for i in range(plan.n):
        if cancel.is_set():
            break

        def piece(text: str, index: int = i) -> None:
            emit(("delta", index, text))

        result = model.generate(tokens, plan, max_new, seed_for(plan, i), cancel, piece)
        emit(("end", i, result))
        results.append(result)
    return len(tokens), results


class ChatEngine:
    """One chat model: lazy loading, a fair queue of `parallel` slots, and the worker threads that use them."""

    def __init__(self, spec: ChatSpec) -> None:
        self.spec = spec
        self._executor = ThreadPoolExecutor(max_workers=spec.parallel, thread_name_prefix=f"llama-{spec.name}")
        self._slots = asyncio.Semaphore(spec.parallel)
        self._idle: list[LoadedModel] = []
        self._all: list[LoadedModel] = []
        self._running: set[threading.Event] = set()

    async def _acquire(self) -> tuple[LoadedModel, float]:
        """A free loaded model (loading one if needed) and the ms spent waiting for a slot."""
        # A free slot is no wait at all: only a request that found every slot busy reports queued_ms.
        busy = self._slots.locked()
        start = perf_counter()
        await self._slots.acquire()
        queued = (perf_counter() - start) * 1000 if busy else 0.0
        try:
            if self._idle:
                return self._idle.pop(), queued
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._executor, LoadedModel, self.spec)
            try:
                model = await asyncio.shield(future)
            except asyncio.CancelledError:
                future.add_done_callback(self._keep_loaded)
                raise
            except Exception as exc:
                raise Unavailable(f"The local model {self.spec.name} could not be loaded: {exc}") from None
            self._all.append(model)
            return model, queued
        except BaseException:
            self._slots.release()
            raise

    def _keep_loaded(self, future: asyncio.Future[LoadedModel]) -> None:
        """A load whose requester left: keep the model for the next request (the slot is already released)."""
        if not future.cancelled() and future.exception() is None:
            self._all.append(future.result())
            self._idle.append(future.result())

    async def start(
        self, plan: ChatPlan, emit: Emit | None = None
    ) -> tuple[asyncio.Future[tuple[int, list[Generation]]], threading.Event, float]:
        """Start a request in a worker thread; the slot is released when the thread finishes, whatever happens."""
        model, queued = await self._acquire()
        cancel = threading.Event()
        loop = asyncio.get_running_loop()

        def work() -> tuple[int, list[Generation]]:
            return run_request(model, plan, cancel, emit or (lambda _: None))

        try:
            future = loop.run_in_executor(self._executor, work)
        except BaseException:
            self._idle.append(model)
            self._slots.release()
            raise

        def release(_: object) -> None:
            self._running.discard(cancel)
            self._idle.append(model)
            self._slots.release()

        self._running.add(cancel)
        future.add_done_callback(release)
        return future, cancel, queued

    async def aclose(self) -> None:
        """Stop running generations at their next token, wait for the threads, then free the models."""
        for cancel in self._running:
            cancel.set()
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        for model in self._all:
            model.close()
        self._all.clear()
        self._idle.clear()
