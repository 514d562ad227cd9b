"""Where cache entries live (cache/base.py `Backend`): in-process memory, SQLite, Redis.

Each is imported where it is chosen (cache/wiring.py), so a gateway without Redis never imports its client.
"""
