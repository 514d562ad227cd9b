"""OpenAI's Files and Batch routes (dialects/openai_files.py, openai_batches.py) and Anthropic's Message
Batches routes (dialects/anthropic/batches.py) in `/openapi.json`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplex.dialects import openai_files_wire as fw
from inferplex.dialects import openai_responses as oa
from inferplex.dialects.anthropic import batches_wire as aw
from inferplex.dialects.anthropic import responses as ar
from inferplex.dialects.openai_batches import CreateBatchRequest
from inferplex.openapi.spec import Dialect, Operation, Param

_OPENAI = Dialect("OpenAI", oa.OpenAIError)
_ANTHROPIC = Dialect("Anthropic", ar.AnthropicError, ("bearer", "apiKey"))
_WRITE = (400, 401, 403, 404, 413, 415, 500, 503)
_READ = (400, 401, 403, 404, 500, 503)


class FileForm(BaseModel):
    """The multipart form of `POST /v1/files` (CreateFileRequest), as OpenAI's SDKs send it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    file: str = Field(json_schema_extra={"format": "binary"}, description="any type, up to media.max_upload_bytes")
    purpose: Literal["assistants", "batch", "fine-tune", "vision", "user_data", "evals"]
    anchor: Literal["created_at"] | None = Field(None, alias="expires_after[anchor]")
    seconds: int | None = Field(None, ge=3600, le=2_592_000, alias="expires_after[seconds]")


_FORM: dict[str, Any] = FileForm.model_json_schema(by_alias=True)
_UPLOAD = (
    "Multipart upload of one file of any type, kept in the gateway's media store (disk or S3) as the caller's "
    "(its account's, else its key's). It expires after `expires_after[seconds]` if given, else a `batch` file "
    "after 30 days, never later than the store's retention (`media.retention_s`). 413 past "
    "`media.max_upload_bytes`."
)
_FILE_PAGE = (
    Param("purpose", description="only files of this purpose (batch output files: `batch_output`)"),
    Param("limit", {"type": "integer", "minimum": 1, "maximum": 10000}, description="at most this many (10000)"),
    Param("order", {"type": "string", "enum": ["asc", "desc"]}, description="by creation time (desc)"),
    Param("after", description="the id of the last file of the previous page"),
)
_BATCH = (
    "The gateway runs each line itself, through the pipeline of its endpoint (chat completions, embeddings, "
    "responses), against whichever provider serves the line's model, as the batch's owner: each line is "
    "metered and charged once, a failed line nothing. Input: a `batch` file of the caller's, one request "
    "per line (`custom_id`, `method: POST`, `url` equal to `endpoint`, `body`); a file whose lines do not "
    "hold makes a `failed` batch with `errors`. Results: `output_file_id` and `error_file_id`, in OpenAI's "
    "line format."
)
_BATCH_PAGE = (
    Param("after", description="the id of the last batch of the previous page"),
    Param("limit", {"type": "integer", "minimum": 1, "maximum": 100}, description="at most this many (20)"),
)
_MESSAGE_BATCH = (
    "Each request's `params` is a Messages API request, validated when the batch is created (a bad one is a "
    "400 naming `requests[<i>].params.<field>`) and run by the gateway on whichever provider serves its model."
)
_RESULTS = (
    "JSON Lines, one `MessageBatchIndividualResponse` per request, in request order: `succeeded` with the "
    "`message`, `errored` with Anthropic's error, `canceled` or `expired`. A 400 until the batch has ended."
)
_MESSAGE_PAGE = (
    Param("before_id", description="the page just before (newer than) this batch"),
    Param("after_id", description="the page just after (older than) this batch"),
    Param("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, description="at most this many (20)"),
)
_M = "/v1/messages/batches"

OPERATIONS: list[Operation] = [
    Operation("post", "/v1/files", "Upload a file", _OPENAI, fw.FileObject, _WRITE, FileForm, form=_FORM,
              description=_UPLOAD),
    Operation("get", "/v1/files", "The caller's files, newest first", _OPENAI, fw.FileList, _READ,
              params=_FILE_PAGE),
    Operation("get", "/v1/files/{file_id}", "A file", _OPENAI, fw.FileObject, _READ),
    Operation("delete", "/v1/files/{file_id}", "Delete a file", _OPENAI, fw.FileDeleted, _READ),
    Operation("get", "/v1/files/{file_id}/content", "A file's bytes", _OPENAI, None, (*_READ, 416),
              ok_media="application/octet-stream"),
    Operation("post", "/v1/batches", "Create a batch", _OPENAI, fw.BatchObject, (*_WRITE, 402, 429),
              CreateBatchRequest, description=_BATCH),
    Operation("get", "/v1/batches", "The caller's batches, newest first", _OPENAI, fw.BatchList, _READ,
              params=_BATCH_PAGE),
    Operation("get", "/v1/batches/{batch_id}", "A batch", _OPENAI, fw.BatchObject, _READ),
    Operation("post", "/v1/batches/{batch_id}/cancel", "Cancel a batch", _OPENAI, fw.BatchObject, _READ),
    Operation("post", _M, "Create a Message Batch", _ANTHROPIC, aw.MessageBatch, (*_WRITE, 402, 429),
              aw.CreateMessageBatch, description=_MESSAGE_BATCH),
    Operation("get", _M, "The caller's Message Batches, newest first", _ANTHROPIC, aw.MessageBatchList, _READ,
              params=_MESSAGE_PAGE),
    Operation("get", _M + "/{batch_id}", "A Message Batch", _ANTHROPIC, aw.MessageBatch, _READ),
    Operation("delete", _M + "/{batch_id}", "Delete an ended Message Batch", _ANTHROPIC, aw.DeletedMessageBatch,
              _READ),
    Operation("post", _M + "/{batch_id}/cancel", "Cancel a Message Batch", _ANTHROPIC, aw.MessageBatch, _READ),
    Operation("get", _M + "/{batch_id}/results", "A Message Batch's results", _ANTHROPIC, None, _READ,
              ok_media="application/x-jsonl", description=_RESULTS),
]  # fmt: skip
