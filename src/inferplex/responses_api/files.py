"""Files the caller uploaded to the gateway (`POST /v1/files`), read where a Responses input names them.

An `input_file` or `input_image` part may name a file by `file_id` instead of carrying it. No upstream knows
the gateway's file ids (not even an OpenAI one: the file lives in the gateway's media store), so before the
request leaves, each id is looked up in the caller's own files (`owner_of(principal)`: another owner's file
is as unknown as a missing one) and its bytes go inline: a file as `file_data`, a base64 data URL with its
filename (chat's file part, and OpenAI's own `input_file`, take exactly that), an image as an `image_url`
data URL. A file that cannot be sent is a 400 naming its place (`input[0].content[1].file_id`), never the
chat message it would have become.

Two steps, so the translation stays pure: `wanted` + `resolve` do the I/O at the service's edge
(service.begin), `inline` rewrites the items with what was read, and the rewritten items take the same road
as items that carried their data from the start (translate.to_chat, or the native pass-through).

Stored items keep the `file_id` as the caller sent it (`GET /v1/responses/{id}/input_items` lists what was
sent, as OpenAI's does), and so does the history a follow-up continues: a chain's rows repeat their history,
so a stored inline copy would be repeated in every later row of the chain. A follow-up reads the file again;
a file deleted or expired since is then a 400 on `previous_response_id`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from inferplex.errors import InvalidRequest
from inferplex.media_store.store import MediaStore

Item = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Place:
    """Where a file id is first named, as a 400 names it, and whether a part there wants it as an image."""

    param: str
    image: bool


@dataclass(frozen=True, slots=True)
class Inlined:
    """A stored file as it goes upstream: a `data:<type>;base64,...` URL and its name."""

    data_url: str
    filename: str
    content_type: str


def _by_id(part: Any) -> str | None:
    """The file id a content part wants read, or None: a part that carries its data itself is left alone."""
    if not isinstance(part, dict) or not isinstance(part.get("file_id"), str):
        return None
    if part.get("type") == "input_file" and part.get("file_data") is None and part.get("file_url") is None:
        return str(part["file_id"])
    if part.get("type") == "input_image" and part.get("image_url") is None:
        return str(part["file_id"])
    return None


def _place(param: str, j: int) -> str:
    """Where a part's file id is, as a 400 names it: `input[0].content[1].file_id` in this request's input;
    the history a follow-up continues is named as a whole (`previous_response_id`)."""
    return f"{param}.content[{j}].file_id" if param.startswith("input") else param


def wanted(items: Iterable[tuple[Item, str]]) -> dict[str, Place]:
    """file id -> where it is first named (`_place`; the first image part naming it, if one does), for
    (item, param) pairs in order."""
    out: dict[str, Place] = {}
    for item, param in items:
        content = item.get("content") if (item.get("type") or "message") == "message" else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            file_id = _by_id(part)
            if file_id is None:
                continue
            image = part.get("type") == "input_image"
            if file_id not in out or (image and not out[file_id].image):
                out[file_id] = Place(_place(param, j), image)
    return out


async def resolve(
    media: MediaStore | None, owner: str, places: Mapping[str, Place], max_bytes: int
) -> dict[str, Inlined]:
    """Each wanted file of `owner`, read whole, or the 400 naming the place of the first that cannot be sent:
    unknown, expired or another owner's (all alike), no image where an image is wanted, or past `max_bytes`
    for the request's files together."""
    out: dict[str, Inlined] = {}
    total = 0
    for file_id, place in places.items():
        param = place.param
        file = await media.get(file_id, owner) if media is not None else None
        if file is None:
            raise InvalidRequest(f"No file with id '{file_id}' found.", param=param, code="file_not_found")
        if place.image and not file.content_type.startswith("image/"):
            raise _not_image(file_id, file.content_type, param)
        total += file.bytes
        if total > max_bytes:
            raise InvalidRequest(
                f"The file '{file_id}' ({file.bytes} bytes) is too large to send to the model: the files of one "
                f"request are sent inline, at most {max_bytes} bytes together.",
                param=param,
                code="file_too_large",
            )
        assert media is not None
        data = b"".join([chunk async for chunk in media.read(file)])
        encoded = base64.b64encode(data).decode("ascii")
        out[file_id] = Inlined(f"data:{file.content_type};base64,{encoded}", file.filename, file.content_type)
    return out


def inline(items: list[Item], files: Mapping[str, Inlined], where: str) -> list[Item]:
    """The items with every part that names a read file carrying it instead (pure). `where` names the items'
    place in errors (`input` for this request's, `previous_response_id` for the history's): an image part
    whose file is no image is a 400 there."""
    if not files:
        return items
    return [_item(item, files, f"{where}[{i}]" if where == "input" else where) for i, item in enumerate(items)]


def _item(item: Item, files: Mapping[str, Inlined], param: str) -> Item:
    content = item.get("content") if (item.get("type") or "message") == "message" else None
    if not isinstance(content, list) or not any(_by_id(part) in files for part in content):
        return item
    parts = [_part(part, files, _place(param, j)) for j, part in enumerate(content)]
    return {**item, "content": parts}


def _part(part: Any, files: Mapping[str, Inlined], param: str) -> Any:
    file_id = _by_id(part)
    file = files.get(file_id) if file_id is not None else None
    if file is None:
        return part
    rest = {k: v for k, v in part.items() if k != "file_id"}
    if part["type"] == "input_file":
        return {**rest, "file_data": file.data_url, "filename": part.get("filename") or file.filename}
    if not file.content_type.startswith("image/"):  # `resolve` refused it already, where it was read
        raise _not_image(str(file_id), file.content_type, param)
    return {**rest, "image_url": file.data_url}


def _not_image(file_id: str, content_type: str, param: str) -> InvalidRequest:
    return InvalidRequest(
        f"The file '{file_id}' is not an image ({content_type}): send it as an 'input_file'.", param=param
    )
