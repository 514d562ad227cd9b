"""The Anthropic Messages dialect: `/v1/messages` and `/v1/messages/count_tokens`, to any configured model.

One package per translating dialect, one module per job:
- `wire.py`: the request's wire schema (what the API accepts and refuses, as Anthropic does);
- `translate.py`: Anthropic request -> canonical (OpenAI-shaped), canonical answer and stream -> Anthropic;
- `responses.py`: the answers' shapes as TypedDicts, for `/openapi.json`;
- `routes.py`: the handlers, error rendering and the registered `DIALECT`.
"""
