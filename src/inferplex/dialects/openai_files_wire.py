"""OpenAI's Files and Batch objects as the gateway answers them (openai/openai-openapi: OpenAIFile,
ListFilesResponse, DeleteFileResponse, Batch, ListBatchesResponse), for the routes of
dialects/openai_files.py and dialects/openai_batches.py and for `/openapi.json`.

Plain TypedDicts (the answers are built by our code and serialised once): the request bodies, which need
validation, are pydantic models in the route modules.
"""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict

# What `POST /v1/files` accepts (CreateFileRequest.purpose), and what the list may also show: the batch
# output and error files the gateway writes (`batch_output`). Other stored media (generated images, video
# results) are not Files API files.
UPLOAD_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
FILE_PURPOSES = (*UPLOAD_PURPOSES, "batch_output")

FilePurpose = Literal["assistants", "batch", "fine-tune", "vision", "user_data", "evals", "batch_output"]


class FileObject(TypedDict):
    """A stored file. `id` is the gateway's own (`file-<random>`); `status` is always `processed` (a file
    is usable once its upload is answered)."""

    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    expires_at: int | None
    filename: str
    purpose: FilePurpose
    status: Literal["processed"]
    status_details: None


class FileList(TypedDict):
    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(TypedDict):
    id: str
    object: Literal["file"]
    deleted: bool


class BatchRequestCounts(TypedDict):
    total: int
    completed: int
    failed: int


class BatchError(TypedDict):
    """Why a batch's input failed validation: a line (from 1) and the field, when one is to blame."""

    code: str
    message: str
    param: str | None
    line: int | None


class BatchErrors(TypedDict):
    object: Literal["list"]
    data: list[BatchError]


BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]


class BatchObject(TypedDict):
    """A batch. Each `*_at` is set once the batch reached that status (Unix seconds), else null."""

    id: str
    object: Literal["batch"]
    endpoint: str
    errors: BatchErrors | None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: BatchRequestCounts
    metadata: dict[str, str] | None


class BatchList(TypedDict):
    object: Literal["list"]
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
