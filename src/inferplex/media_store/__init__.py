"""The gateway's media storage (issue 22): generated images, speech and video, and uploads (docs/media.md).

`MediaStore` (store.py) is `services.media`; `StoredFile` (files.py) what it stores; uploads.py reads
multipart uploads to disk; routes.py serves the signed download route. Backends: disk (blobs.py) and
S3-compatible (s3.py, the `s3` extra).
"""

from inferplex.media_store.files import StoredFile
from inferplex.media_store.store import MediaStore, owner_of

__all__ = ["MediaStore", "StoredFile", "owner_of"]
