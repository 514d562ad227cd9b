"""OpenAI's Responses API on every provider: `/v1/responses` and its stored responses (issue 23, docs/responses.md)."""
