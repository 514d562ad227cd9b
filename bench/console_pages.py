"""The console's usage page and request log at a million usage rows: the whole work of a page view (the rollup
reads, the chart data, the template), timed on SQLite and PostgreSQL.

The data is bench/console_usage.py's (`make_rows`: 200 keys, 50 accounts, 20 models, 5 providers, over
`--days` days), written through the usage store as the usage log writes it, so the rollups are the triggers'.
Each view is timed `--repeat` times after a warm-up; the median and the worst are printed with what the view
read (rows of the groups' series when it read them all, lines drawn, groups) and the page's size.

    python bench/console_pages.py                          # both engines, 1,000,000 rows (a few minutes)
    python bench/console_pages.py --rows 100000 --engines sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

sys.path.insert(0, str(Path(__file__).parent))

from console_usage import NOW, Engine, make_rows, timed, write

from inferplex.console import render, usage_pages
from inferplex.console.request_pages import filters, read_page

USAGE_VIEWS = (
    "range=24h&group=model",
    "range=7d&group=model",
    "range=30d&group=model",
    "range=30d&group=key",
    "range=30d&group=key&grain=hour",
    "range=30d&group=none&grain=hour",
    "range=7d&group=account&grain=hour",
    "range=30d&group=provider",
)
LOG_VIEWS = ("", "status=error", "min_ms=2000", "tag=eval", "status=error&range=7d")


async def _flushed() -> None:
    return None


async def usage_view(accounts: Any, params: dict[str, str]) -> tuple[usage_pages.Usage, str]:
    """What `/ui/usage` does for these parameters, but the session and the key and account names."""
    sel = usage_pages.selection(params, NOW)
    usage = await usage_pages.read_usage(accounts, sel)
    rows = [usage_pages._row_view(r, usage_pages.label(r["group"], sel.group_by)) for r in usage.totals[:500]]
    html = render.ENV.get_template("usage.html").render(
        session=None, csrf="", nav=render.NAV, path="/ui/usage", groups=usage_pages.GROUPS,
        grains=usage_pages.GRAINS, error=None, form=usage_pages._form(params, sel),
        presets=usage_pages._presets(sel), shown="", group_title="", rows=rows, more_groups=0,
        total=usage_pages._row_view(usage.total, "total"), grouped=sel.group_by is not None,
        data=usage_pages.chart_data(sel, usage), csv_href="",
    )  # fmt: skip
    return usage, html


async def bench(kind: str, args: argparse.Namespace) -> None:
    engine = Engine(kind, Path(tempfile.mkdtemp()))
    try:
        db = await engine.open()
        span, spent = args.days * 86400, 0.0
        for part in range(0, args.rows, 100_000):
            count = min(100_000, args.rows - part)
            start = NOW - span + span * part / args.rows
            spent += (await write(db, make_rows(1000 + part, count, start, span * count / args.rows)))[0]
        print(f"\n### {kind}: {args.rows:,} usage rows over {args.days} days (written in {spent:.0f} s)\n", flush=True)
        accounts = SimpleNamespace(usage_log=SimpleNamespace(flush=_flushed), usage=SimpleNamespace(db=db))
        for view in USAGE_VIEWS:
            params = dict(parse_qsl(view))
            median, worst, (usage, html) = await timed(args.repeat, lambda p=params: usage_view(accounts, p))
            read = f"{len(usage.series)} series rows, " if usage.series is not None else ""
            print(f"- `/ui/usage?{view}`: median {median:.0f} ms, worst {worst:.0f} ms ({read}{len(usage.lines)} "
                  f"lines, {len(usage.totals)} groups, page {len(html) // 1024} KiB)", flush=True)  # fmt: skip
        for view in LOG_VIEWS:
            where = filters(dict(parse_qsl(view)), NOW)
            median, worst, page = await timed(args.repeat, lambda w=where: read_page(accounts, w, None))
            print(f"- `/ui/requests?{view}`: median {median:.1f} ms, worst {worst:.1f} ms ({len(page.rows)} rows)")
    finally:
        await engine.drop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engines", default="sqlite,postgresql")
    args = parser.parse_args()
    for kind in args.engines.split(","):
        await bench(kind, args)


if __name__ == "__main__":
    asyncio.run(main())
