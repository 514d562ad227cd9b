"""What the family mixins of the OpenAI-compatible adapter (`openai_audio`, `openai_images`, `openai_videos`)
use of the adapter they are mixed into: declared once, for the type checker only.

The mixins cannot import `openai_compat` (it imports them, to list them among its bases), so the attributes
they read are declared here instead: the provider's config and vendor profile, its error map, the shared
HTTP session and headers, the chat URL (whose base and query the other endpoints share) and `_auth`, which
puts the request's key on a call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp
    from yarl import URL

    from inferplex.config import ProviderConfig
    from inferplex.providers.base import CallInfo
    from inferplex.providers.failures import ErrorMap
    from inferplex.providers.profiles import VendorProfile


class OpenAIHost:
    if TYPE_CHECKING:
        config: ProviderConfig
        profile: VendorProfile
        errors: ErrorMap
        _session: aiohttp.ClientSession
        _headers: dict[str, str]
        _chat_url: URL

        def _auth(self, headers: dict[str, str], info: CallInfo) -> dict[str, str]: ...
