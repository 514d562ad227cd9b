"""Pure translators between the canonical (OpenAI-shaped) format and each provider's or dialect's wire format.

Modules are named by what they connect, `<from>_to_<to>`: data in, data out, no I/O, so each is tested by
tables. Stream translators are small classes created once per request, holding that stream's state.
"""
