"""Batches run by the gateway itself: OpenAI's `/v1/batches` and Anthropic's `/v1/messages/batches`
(issue 23, docs/batches.md)."""
