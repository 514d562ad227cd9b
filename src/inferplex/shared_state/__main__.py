"""`python -m inferplex.shared_state --socket PATH [--parent PID]`: run the coordinator (coordinator.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable

from inferplex.shared_state import answers
from inferplex.shared_state.coordinator import run


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop, as the workers run (uvicorn's `standard` extra brings it), else asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m inferplex.shared_state", description=__doc__)
    parser.add_argument("--socket", required=True, help="the Unix socket path to listen on")
    parser.add_argument("--parent", type=int, default=None, help="exit when this process (the supervisor) is gone")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if answers(args.socket):
        logging.getLogger("inferplex.shared_state").error("a coordinator already answers on %s", args.socket)
        return 1
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(run(args.socket, args.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
