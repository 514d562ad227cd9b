"""Bench-only launcher: the gateway app under another ASGI server, built exactly as `inferplex serve` does.

    BENCH_CONFIG=cfg.yaml BENCH_KEY=... granian --interface asgi --loop uvloop --factory \
        --working-dir bench asgi_app:create
    BENCH_CONFIG=cfg.yaml BENCH_KEY=... python bench/asgi_app.py uvicorn PORT   # same as `inferplex serve`

`create()` loads the config named by $BENCH_CONFIG and returns `inferplex.app.create_app(config, key)`.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def create() -> Any:
    from inferplex.app import create_app
    from inferplex.cli import master_key
    from inferplex.config import load_config

    config = load_config(os.environ["BENCH_CONFIG"])
    return create_app(config, master_key(config))


if __name__ == "__main__":
    import uvicorn

    server, port = sys.argv[1], int(sys.argv[2])
    assert server == "uvicorn"
    uvicorn.run(
        create(),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
    )
