"""The canonical request: what every dialect parses into and every provider adapter translates from.

OpenAI's Chat Completions shape is the lingua franca every client and most providers already speak, so the
canonical request uses its field names; other dialects (Anthropic Messages, the seeds) convert into it and
native providers convert out of it. Validation here is what turns bad input into a 400 naming the field.
Unknown top-level fields are kept (`extra="allow"`) so they pass through to OpenAI-compatible upstreams. The
gateway's own options (routing, processors, logging) are not fields here: the dialect takes them out first
(`gateway_request.parse_request`).

Responses stay plain dicts in OpenAI's exact shape (`chat.completion`, `chat.completion.chunk`): they are
built by adapters and serialised once, and a dict costs nothing to pass along.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inferplex.errors import InvalidRequest

# The largest integer the gateway takes for a count (tokens, dimensions): every worst-case cost made from it
# (times `n`, times a price in micro-USD) stays far inside the 64-bit integers the ledger stores.
MAX_COUNT = 2**31 - 1
TokenId = Annotated[int, Field(ge=0, le=MAX_COUNT)]

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
PartType = Literal["text", "image_url", "input_audio", "file", "refusal"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ContentPart(_Open):
    type: PartType
    text: str | None = None
    image_url: dict[str, Any] | None = None
    input_audio: dict[str, Any] | None = None
    file: dict[str, Any] | None = None
    refusal: str | None = None

    @model_validator(mode="after")
    def _payload_present(self) -> ContentPart:
        if getattr(self, self.type) is None:
            raise ValueError(f"a content part of type {self.type!r} needs a {self.type!r} field")
        if self.type == "image_url" and not isinstance((self.image_url or {}).get("url"), str):
            raise ValueError("image_url.url must be a string")
        return self


class FunctionCall(_Open):
    name: str
    arguments: str


class ToolCall(_Open):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Open):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None

    @model_validator(mode="after")
    def _role_rules(self) -> Message:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a message with role 'tool' needs tool_call_id")
        if self.role != "assistant" and self.content is None:
            raise ValueError(f"a message with role {self.role!r} needs content")
        if self.role == "assistant" and self.content is None and not self.tool_calls and not self.refusal:
            raise ValueError("an assistant message needs content or tool_calls")
        return self

    def text(self) -> str:
        """The message's text, parts joined; what token estimates and text processors look at."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "".join(p.text or "" for p in self.content if p.type == "text")


class FunctionDef(_Open):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Open):
    type: Literal["function", "custom"] = "function"
    function: FunctionDef | None = None

    @model_validator(mode="after")
    def _function_present(self) -> Tool:
        if self.type == "function" and self.function is None:
            raise ValueError("a tool of type 'function' needs a 'function' object")
        return self


class NamedToolChoice(_Open):
    type: Literal["function", "allowed_tools", "custom"]
    function: dict[str, Any] | None = None


class JsonSchemaFormat(_Open):
    name: str = Field(min_length=1, max_length=64)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_present(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type 'json_schema' needs a 'json_schema' object")
        return self


class StreamOptions(_Open):
    include_usage: bool | None = None


class ChatRequest(_Open):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_COUNT)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_COUNT)
    stop: str | list[str] | None = None
    n: int | None = Field(None, ge=1, le=128)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1)  # 64 bits, as providers take it
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    logit_bias: dict[str, float] | None = None
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None

    @model_validator(mode="after")
    def _consistency(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise _field_error("top_logprobs", "top_logprobs requires logprobs to be true")
        if self.logit_bias and any(not -100 <= v <= 100 for v in self.logit_bias.values()):
            raise _field_error("logit_bias", "logit_bias values must be between -100 and 100")
        if self.stream_options is not None and not self.stream:
            raise _field_error("stream_options", "stream_options is only allowed when stream is true")
        return self

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def wants_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class EmbeddingRequest(_Open):
    model: str = Field(min_length=1)
    input: str | list[str] | list[TokenId] | list[list[TokenId]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, le=MAX_COUNT)
    user: str | None = None

    @model_validator(mode="after")
    def _non_empty(self) -> EmbeddingRequest:
        if isinstance(self.input, list) and not self.input:
            raise _field_error("input", "input must not be an empty list")
        if isinstance(self.input, list) and any(isinstance(x, str) and not x for x in self.input):
            raise _field_error("input", "input strings must not be empty")
        if self.input == "":
            raise _field_error("input", "input must not be empty")
        return self

    def texts(self) -> list[str] | None:
        """The inputs as strings, or None when they are token arrays."""
        if isinstance(self.input, str):
            return [self.input]
        if all(isinstance(x, str) for x in self.input):
            return list(self.input)  # type: ignore[arg-type]
        return None


class _FieldError(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _field_error(param: str, message: str) -> _FieldError:
    return _FieldError(param, message)


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "list[ContentPart]", "list[str]", "function-after[_payload_present(), ContentPart]"):
            continue
        elif part.startswith(("function-", "literal[", "list[", "NamedToolChoice", "int", "float")):
            continue
        else:
            out += ("." if out else "") + part
    return out


def most_telling(errors: list[Any]) -> Any:
    """The first error, unless it is a type mismatch of a union member and another member of the same
    field failed on its value: `input: [[1, 2**40]]` is too large a token id, not "not a string"."""
    first = errors[0]
    if first["type"].endswith("_type"):
        field = first["loc"][:1]
        for err in errors[1:]:
            if err["loc"][:1] == field and not err["type"].endswith("_type") and err["type"] != "missing":
                return err
    return first


def parse(model: type[BaseModel], data: Any) -> Any:
    """Validate a decoded JSON body into a canonical model, or raise a 400 that names the first bad field."""
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = most_telling(exc.errors())
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _FieldError):
            raise InvalidRequest(str(ctx_err), param=ctx_err.param) from None
        param = _loc(err["loc"]) or None
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param) from None
        raise InvalidRequest(f"Invalid value for '{param}': {msg}.", param=param) from None
