"""`python -m inferplex.shared_state --socket PATH [--parent PID]`: run the coordinator (coordinator.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging

from inferplex.shared_state import answers
from inferplex.shared_state.coordinator import run


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m inferplex.shared_state", description=__doc__)
    parser.add_argument("--socket", required=True, help="the Unix socket path to listen on")
    parser.add_argument("--parent", type=int, default=None, help="exit when this process (the supervisor) is gone")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if answers(args.socket):
        logging.getLogger("inferplex.shared_state").error("a coordinator already answers on %s", args.socket)
        return 1
    asyncio.run(run(args.socket, args.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
