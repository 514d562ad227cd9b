"""Unify's custom endpoints: an account's own OpenAI-compatible upstream, addressed as `name@custom`.

`store.py` keeps each account's provider keys (sealed by `sealing.py`) and endpoints; `addresses.py` decides
where a registered URL may connect and pins each connection to the address it checked; `service.py` resolves
`name@custom` for the calling account and is the `custom` provider's adapter. The routes are
`dialects/unify_custom.py`.
"""
