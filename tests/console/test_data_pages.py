"""The console's data pages (usage and its CSV, the request log and one request, providers, models), driven
as a browser would (httpx with the session cookie) after real traffic through the gateway with the openai
SDK: the pages must show what happened (counts, tokens, cost, the request and its attempts, a breaker that
opened), and refuse bad input with a 400 page, never a 500."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import httpx
import openai
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    status_code_conformance,
)

from inferplex.console import usage_pages
from inferplex.openapi import console_views
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

HI = [{"role": "user", "content": "hello there"}]


def no_5xx(ctx: Any, response: Any, case: Any) -> bool | None:
    assert response.status_code < 500, f"{response.status_code}: {response.text}"
    return None


FUZZ_CHECKS = [no_5xx, status_code_conformance, content_type_conformance, response_headers_conformance]
PAGES = ("/ui/usage", "/ui/usage.csv", "/ui/requests", "/ui/requests/req_x", "/ui/providers", "/ui/models")


# ---- reading pages ------------------------------------------------------------------------------------------


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = field(default_factory=list)

    def find(self, testid: str, **attrs: str) -> list[Element]:
        """Every element under this one with that data-testid (and those attribute values)."""
        out = []
        for child in self.children:
            if child.attrs.get("data-testid") == testid and all(child.attrs.get(k) == v for k, v in attrs.items()):
                out.append(child)
            out += child.find(testid, **attrs)
        return out

    def tagged(self, tag: str) -> list[Element]:
        """Every element under this one of that tag."""
        out = []
        for child in self.children:
            out += [child] if child.tag == tag else []
            out += child.tagged(tag)
        return out

    def one(self, testid: str, **attrs: str) -> Element:
        found = self.find(testid, **attrs)
        assert len(found) == 1, f"{len(found)} elements {testid} {attrs}"
        return found[0]


class _Tree(HTMLParser):
    VOID = frozenset({"br", "input", "meta", "link", "img", "hr", "option"})

    def __init__(self) -> None:
        super().__init__()
        self.root = Element("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        for element in self.stack[1:]:
            element.text += data


def parse(html: str) -> Element:
    tree = _Tree()
    tree.feed(html)
    return tree.root


def text(element: Element) -> str:
    return " ".join(element.text.split())


# ---- the gateway and its traffic ----------------------------------------------------------------------------


def _config(fake: FakeOpenAI) -> dict[str, Any]:
    config = openai_config(fake)
    config["models"] += [
        {  # fails over: its first deployment answers 500, the second serves
            "name": "flaky",
            "routing": {"strategy": "priority"},
            "pricing": {"input": "1", "output": "2"},
            "deployments": [
                {"provider": "fake", "model": "error-500", "id": "flaky-bad", "priority": 0},
                {"provider": "fake", "model": "gpt-echo", "id": "flaky-good", "priority": 1},
            ],
        },
        {  # two failures open its only deployment's breaker for ten minutes
            "name": "breaking",
            "routing": {"retries": 0, "cooldown": {"failures": 2, "window": 600, "period": 600}},
            "deployments": [{"provider": "fake", "model": "error-500", "id": "breaking-dep"}],
        },
    ]
    return config


@dataclass
class Traffic:
    server: GatewayServer
    key_id: str
    echo_ids: list[str]
    echo_cost: int
    echo_prompt: int
    echo_completion: int
    flaky_id: str
    flaky_cost: int
    logged_id: str
    failed_ids: list[str]


@pytest.fixture(scope="module")
def traffic(fake_openai: FakeOpenAI) -> Iterator[Traffic]:
    with GatewayServer(_config(fake_openai)) as server:
        made = httpx.post(
            server.url + "/admin/keys", headers=server.auth, json={"name": "pages", "credits_micros": 10**9}
        )
        assert made.status_code == 201, made.text
        client = openai.OpenAI(api_key=made.json()["key"], base_url=server.base_url, max_retries=0)

        def chat(model: str, **extra: Any) -> tuple[str, dict[str, Any]]:
            raw = client.chat.completions.with_raw_response.create(model=model, messages=HI, extra_body=extra or None)
            return raw.headers["x-inferplex-request-id"], raw.parse().model_dump()

        echo_ids, cost, prompt, completion = [], 0, 0, 0
        for _ in range(3):
            request_id, body = chat("echo-model")
            echo_ids.append(request_id)
            cost += body["cost"]["micros"]
            prompt += body["usage"]["prompt_tokens"]
            completion += body["usage"]["completion_tokens"]
        flaky_id, flaky = chat("flaky")
        logged_id, logged = chat("echo-model", tags=["logged"], log_query_body=True, log_response_body=True)
        cost += logged["cost"]["micros"]
        prompt += logged["usage"]["prompt_tokens"]
        completion += logged["usage"]["completion_tokens"]
        failed_ids = []
        for _ in range(2):
            with pytest.raises(openai.APIStatusError) as failed:
                client.chat.completions.create(model="breaking", messages=HI)
            failed_ids.append(failed.value.response.headers["x-inferplex-request-id"])
        yield Traffic(
            server,
            made.json()["id"],
            [*echo_ids, logged_id],
            cost,
            prompt,
            completion,
            flaky_id,
            flaky["cost"]["micros"],
            logged_id,
            failed_ids,
        )


@pytest.fixture(scope="module")
def browser(traffic: Traffic) -> Iterator[httpx.Client]:
    """Signed in with the master key: the session cookie, as a browser keeps it."""
    with httpx.Client(base_url=traffic.server.url, timeout=30) as client:
        assert client.post("/ui/login", data={"key": traffic.server.master_key}).status_code == 303
        yield client


def page(browser: httpx.Client, path: str, status: int = 200) -> Element:
    answer = browser.get(path)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    return parse(answer.text)


# ---- usage --------------------------------------------------------------------------------------------------


def test_usage_by_model_counts_tokens_and_cost_of_the_requests_made(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, "/ui/usage?range=24h&group=model")
    rows = {r.attrs["data-group"]: r for r in html.one("usage-table").find("usage-row")}
    assert set(rows) == {"echo-model", "flaky", "breaking"}
    echo = rows["echo-model"]
    assert text(echo.one("usage-requests")) == "4"
    assert text(echo.one("usage-errors")) == "0"
    assert text(echo.one("usage-prompt-tokens")) == str(traffic.echo_prompt)
    assert text(echo.one("usage-completion-tokens")) == str(traffic.echo_completion)
    assert echo.one("usage-cost").attrs["data-micros"] == str(traffic.echo_cost)
    assert text(rows["breaking"].one("usage-errors")) == "2"
    assert text(rows["flaky"].one("usage-requests")) == "1"
    drill = rows["flaky"].one("usage-group-link").attrs["href"]  # to the requests behind the row
    assert drill == "/ui/requests?range=24h&model=flaky"
    assert {r.attrs["data-request-id"] for r in page(browser, drill).find("request-row")} == {traffic.flaky_id}
    assert text(html.one("usage-total-requests")) == "7"
    assert html.one("usage-total-cost").attrs["data-micros"] == str(traffic.echo_cost + traffic.flaky_cost)


def test_usage_chart_data_draws_every_hour_with_the_requests_in_them(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, "/ui/usage?range=24h&group=model&grain=hour")
    chart = html.one("usage-chart")
    data = next(s for s in html.tagged("script") if s.attrs.get("id") == chart.attrs["data-source"])
    payload = orjson.loads(data.text)
    assert len(payload["x"]) in (24, 25)  # whole hours covering the last 24 h
    requests = {s["label"]: s["values"] for s in payload["charts"][0]["series"]}
    assert payload["charts"][0]["key"] == "requests"
    assert sum(requests["echo-model"]) == 4 and sum(requests["flaky"]) == 1 and sum(requests["breaking"]) == 2
    errors = {s["label"]: sum(s["values"]) for s in payload["charts"][3]["series"]}
    assert errors == {"echo-model": 0, "flaky": 0, "breaking": 2}
    latency = payload["charts"][4]
    assert [s["label"] for s in latency["series"]] == ["p50", "p95", "p99"]
    assert any(v is not None and v > 0 for v in latency["series"][1]["values"])
    scripts = [s.attrs.get("src") for s in html.tagged("script")]
    assert "/ui/static/uPlot.iife.min.js" in scripts and "/ui/static/charts.js" in scripts


def test_usage_by_key_and_filtered_to_a_model(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, "/ui/usage?range=7d&group=key")
    rows = {r.attrs["data-group"]: text(r.one("usage-requests")) for r in html.find("usage-row")}
    assert rows == {traffic.key_id: "7"}
    row = html.one("usage-row")
    assert text(row.one("usage-group-name")) == "pages"  # the key's name beside its id
    assert row.one("usage-group-link").attrs["href"] == f"/ui/keys/{traffic.key_id}"
    source = html.one("usage-chart").attrs["data-source"]
    payload = orjson.loads(next(s for s in html.tagged("script") if s.attrs.get("id") == source).text)
    assert [s["label"] for s in payload["charts"][0]["series"]] == [f"pages ({traffic.key_id})"]
    html = page(browser, "/ui/usage?range=30d&group=none&model=flaky")
    (row,) = html.find("usage-row")
    assert text(row.one("usage-requests")) == "1"
    assert row.one("usage-cost").attrs["data-micros"] == str(traffic.flaky_cost)


def test_usage_csv_is_the_pages_selection(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, "/ui/usage?range=7d&group=model&grain=day")
    href = html.one("usage-csv").attrs["href"]
    answer = browser.get(href)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/csv")
    assert answer.headers["content-disposition"].startswith("attachment;")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    by_model: dict[str, dict[str, int]] = {}
    for row in rows:
        acc = by_model.setdefault(row["group"], {"requests": 0, "errors": 0, "cost_micros": 0})
        for name in acc:
            acc[name] += int(row[name])
        assert row["time"].endswith("T00:00:00Z")  # daily buckets
    assert by_model["echo-model"] == {"requests": 4, "errors": 0, "cost_micros": traffic.echo_cost}
    assert by_model["breaking"]["errors"] == 2
    assert by_model["flaky"]["cost_micros"] == traffic.flaky_cost


# ---- the request log ----------------------------------------------------------------------------------------


def test_the_log_lists_each_request_newest_first_with_filters(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, "/ui/requests")
    assert html.one("request-filters").tag == "form"
    ids = [r.attrs["data-request-id"] for r in html.find("request-row")]
    assert len(ids) == 7
    assert ids[-1] == traffic.echo_ids[0] and ids[0] == traffic.failed_ids[-1]  # newest first
    assert set(traffic.echo_ids) | {traffic.flaky_id} | set(traffic.failed_ids) == set(ids)

    def listed(query: str) -> set[str]:
        return {r.attrs["data-request-id"] for r in page(browser, "/ui/requests?" + query).find("request-row")}

    assert listed("model=flaky") == {traffic.flaky_id}
    assert listed("status=5xx") == set(traffic.failed_ids)
    assert listed("status=error&range=24h") == set(traffic.failed_ids)
    assert listed("error_type=provider") == set(traffic.failed_ids)
    assert listed("tag=logged") == {traffic.logged_id}
    assert listed(f"key={traffic.key_id}&status=2xx") == set(traffic.echo_ids) | {traffic.flaky_id}
    assert listed("deployment=flaky-good") == {traffic.flaky_id}
    assert listed("deployment=fake/gpt-echo") == set(traffic.echo_ids)  # the key, as /ui/providers names it
    shown = {r.attrs["data-request-id"]: text(r) for r in html.find("request-row")}
    assert "fake/gpt-echo" in shown[traffic.echo_ids[0]] and "flaky-good" in shown[traffic.flaky_id]
    assert listed(f"min_cost={traffic.flaky_cost / 1e6:.6f}&model=flaky") == {traffic.flaky_id}
    assert listed(f"max_cost={(traffic.flaky_cost - 1) / 1e6:.6f}&model=flaky") == set()
    assert listed("min_ms=600000") == set()
    assert listed("from=2001-01-01&to=2001-01-02") == set()


def test_older_requests_come_a_page_at_a_time(traffic: Traffic, browser: httpx.Client) -> None:
    """Runs after the tests that count the module's traffic (file order): its requests are the master key's,
    under a tag of their own."""
    client = openai.OpenAI(api_key=traffic.server.master_key, base_url=traffic.server.base_url, max_retries=0)
    made = []
    for _ in range(53):
        raw = client.chat.completions.with_raw_response.create(
            model="echo-model", messages=HI, extra_body={"tags": ["bulk"]}
        )
        made.append(raw.headers["x-inferplex-request-id"])
    html = page(browser, "/ui/requests?tag=bulk")
    first = [r.attrs["data-request-id"] for r in html.find("request-row")]
    assert first == made[::-1][:50]
    more = html.one("request-more")
    assert "fragment=rows" in more.attrs["hx-get"] and "fragment" not in more.attrs["href"]
    rows = browser.get(more.attrs["hx-get"])  # what htmx fetches: the next rows only, no page around them
    assert rows.status_code == 200 and "<html" not in rows.text
    rest = parse(rows.text)
    assert [r.attrs["data-request-id"] for r in rest.find("request-row")] == made[::-1][50:]
    assert rest.find("request-more") == []
    plain = page(browser, more.attrs["href"])  # without JavaScript: the next page
    assert [r.attrs["data-request-id"] for r in plain.find("request-row")] == made[::-1][50:]


def test_a_requests_detail_shows_its_attempts_timings_and_cost(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, f"/ui/requests/{traffic.flaky_id}")
    detail = html.one("request-detail")
    assert detail.attrs["data-request-id"] == traffic.flaky_id
    assert text(detail.one("detail-status")) == "200"
    assert text(detail.one("detail-model")) == "flaky"
    assert detail.one("detail-cost").attrs["data-micros"] == str(traffic.flaky_cost)
    assert text(detail.one("detail-key")) == traffic.key_id
    assert text(detail.one("detail-deployment")) == "flaky-good"
    attempts = html.find("attempt-row")
    assert [a.attrs["data-outcome"] for a in attempts] == ["error", "ok"]
    assert "flaky-bad" in text(attempts[0]) and "500" in text(attempts[0])
    assert "flaky-good" in text(attempts[1])
    assert "Total" in text(detail) and " ms" in text(detail)
    assert html.one("bodies-off")


def test_a_requests_detail_shows_its_bodies_when_they_were_logged(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, f"/ui/requests/{traffic.logged_id}")
    assert "hello there" in text(html.one("request-body"))
    assert "echo: hello there" in text(html.one("response-body"))
    assert html.find("bodies-off") == []


def test_a_failed_requests_detail_names_the_failure(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, f"/ui/requests/{traffic.failed_ids[0]}")
    assert text(html.one("detail-status")).startswith("5")
    assert text(html.one("detail-error-type")).startswith("provider.")
    (attempt,) = html.find("attempt-row")
    assert attempt.attrs["data-outcome"] == "error" and "breaking-dep" in text(attempt)


def test_an_unknown_request_is_a_404_page(browser: httpx.Client) -> None:
    html = page(browser, "/ui/requests/req_nope", 404)
    assert "req_nope" in text(html.one("error-message"))
    page(browser, "/ui/requests/" + "x" * 300, 404)


# ---- providers and models -----------------------------------------------------------------------------------


def test_providers_show_the_breaker_that_opened_and_its_errors(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, "/ui/providers")
    states = {
        r.attrs["data-deployment"]: r.one("breaker-state").attrs["data-state"] for r in html.find("deployment-row")
    }
    assert states["breaking-dep"] == "open"
    assert states["flaky-good"] == "closed" and states["fake/gpt-echo"] == "closed"
    assert "probe in" in text(html.one("deployment-row", **{"data-deployment": "breaking-dep"}))
    errors = html.one("recent-errors").find("recent-error-row")
    assert {e.attrs["data-deployment"] for e in errors} == {"breaking-dep", "flaky-bad"}
    assert len([e for e in errors if e.attrs["data-deployment"] == "breaking-dep"]) == 2
    served = html.one("deployment-row", **{"data-deployment": "flaky-good"}).one("deployment-requests-link")
    assert {r.attrs["data-request-id"] for r in page(browser, served.attrs["href"]).find("request-row")} == {
        traffic.flaky_id
    }
    only = page(browser, "/ui/providers?deployment=flaky-bad").one("recent-errors").find("recent-error-row")
    assert [e.attrs["data-deployment"] for e in only] == ["flaky-bad"]
    assert traffic.flaky_id in text(only[0])


def test_models_list_every_model_with_deployments_and_prices(traffic: Traffic, browser: httpx.Client) -> None:
    html = page(browser, "/ui/models")
    rows = {r.attrs["data-model"]: r for r in html.find("model-row")}
    assert set(rows) == {m.name for m in traffic.server.config.models}
    prices = text(rows["echo-model"].one("model-prices"))
    assert "input $0.15 per 1M tokens" in prices and "output $0.60 per 1M tokens" in prices
    assert text(rows["embed-model"].one("model-prices")) == "input $0.02 per 1M tokens"
    assert text(rows["breaking"].one("model-prices")) == "no price set: costs nothing"
    requests = page(browser, rows["flaky"].one("model-requests").attrs["href"]).find("request-row")
    assert [r.attrs["data-request-id"] for r in requests] == [traffic.flaky_id]
    usage = page(browser, rows["flaky"].one("model-usage").attrs["href"])
    assert [r.attrs["data-group"] for r in usage.find("usage-row")] == [traffic.key_id]
    deployments = [d.attrs["data-deployment"] for d in rows["flaky"].find("model-deployment")]
    assert deployments == ["flaky-bad", "flaky-good"]
    assert "api_key" not in browser.get("/ui/models").text and "sk-fake" not in browser.get("/ui/providers").text


# ---- sign-in and bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_every_data_page_needs_a_session(traffic: Traffic, path: str) -> None:
    answer = httpx.get(traffic.server.url + path, headers=traffic.server.auth)  # a bearer key is not a session
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/login"
    # the providers table's htmx poll, after the session ended: htmx is told to load the sign-in page whole
    # (a 303 would be followed inside its XHR and the sign-in page swapped into the table)
    polled = httpx.get(traffic.server.url + path, headers={"HX-Request": "true"})
    assert polled.status_code == 200 and polled.headers["hx-redirect"] == "/ui/login" and not polled.content


BAD = [
    ("/ui/usage?from=yesterday", "from"),
    ("/ui/usage?from=2026-13-01", "from"),
    ("/ui/usage?from=2026-01-02&to=2026-01-01", "before"),
    ("/ui/usage?from=1999-01-01", "between"),
    ("/ui/usage?range=1y", "range"),
    ("/ui/usage?group=tag", "group"),
    ("/ui/usage?grain=minute", "grain"),
    ("/ui/usage?from=2024-01-01&to=2026-01-01", "400 days"),
    ("/ui/usage?from=2025-01-01&to=2025-12-31&grain=hour", "days"),
    ("/ui/usage?model=" + "m" * 201, "model"),
    ("/ui/requests?status=abc", "status"),
    ("/ui/requests?status=700", "status"),
    ("/ui/requests?error_type=oops", "error_type"),
    ("/ui/requests?min_cost=lots", "min_cost"),
    ("/ui/requests?max_cost=-1", "max_cost"),
    ("/ui/requests?min_ms=nan", "min_ms"),
    ("/ui/requests?max_ms=1e400", "max_ms"),
    ("/ui/requests?before=garbage", "before"),
    ("/ui/requests?range=2h", "range"),
    ("/ui/requests?model=a%00b", "NUL"),
    ("/ui/providers?deployment=" + "d" * 201, "deployment"),
]


@pytest.mark.parametrize(("path", "named"), BAD)
def test_bad_input_is_a_400_page_naming_it(browser: httpx.Client, path: str, named: str) -> None:
    answer = browser.get(path)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    message = parse(answer.text).find("form-error") or parse(answer.text).find("error-message")
    assert message and named in text(message[0])


def test_a_bad_csv_query_is_a_400_page(browser: httpx.Client) -> None:
    answer = browser.get("/ui/usage.csv?grain=week")
    assert answer.status_code == 400 and answer.headers["content-type"].startswith("text/html")


# ---- fuzzed while signed in ---------------------------------------------------------------------------------

VIEWS = [("get", op.path) for op in console_views.OPERATIONS]


@pytest.mark.parametrize(("method", "path"), VIEWS, ids=[p for _, p in VIEWS])
def test_fuzzed_queries_get_a_documented_answer_never_a_5xx(
    traffic: Traffic, browser: httpx.Client, method: str, path: str
) -> None:
    """tests/test_schema_fuzz.py meets these pages signed out (a 303); here schemathesis generates their query
    strings (valid and invalid, from /openapi.json) with a live session, so every parser is reached."""
    schema = schemathesis.openapi.from_url(traffic.server.url + "/openapi.json")
    schema.config.update(base_url=traffic.server.url)
    operation = schema[path][method.upper()]
    cookie = {"Cookie": f"ipx_console={browser.cookies['ipx_console']}"}
    cases = st.one_of(operation.as_strategy(mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE))
    seen: set[int] = set()

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
    @given(case=cases)
    def run(case: Any) -> None:
        answer = case.call_and_validate(headers=cookie, checks=FUZZ_CHECKS, timeout=20)
        assert answer.status_code != 303, "the session was not used"
        seen.add(answer.status_code)

    run()
    assert seen & {200, 404}, seen  # some generated queries were good ones


@pytest.mark.parametrize("group", ["model", "key", "account"])
def test_many_groups_are_drawn_from_the_drawn_groups_reads_alone(
    traffic: Traffic, browser: httpx.Client, monkeypatch: pytest.MonkeyPatch, group: str
) -> None:
    """Past `MAX_GROUPED_ROWS` the page reads the drawn groups' series one by one and "other" as the whole
    minus them (hours of a month by each of many keys): the charts must be the same as from every group's
    series. One line of its own here, so the rest is "other" (a NULL group, the master key's, among them)."""

    master = openai.OpenAI(api_key=traffic.server.master_key, base_url=traffic.server.base_url, max_retries=0)
    master.chat.completions.create(model="echo-model", messages=HI)  # a second key and account group: none

    def charts(grouping: str = group) -> list[dict[str, Any]]:
        html = page(browser, f"/ui/usage?range=24h&group={grouping}&grain=hour")
        source = html.one("usage-chart").attrs["data-source"]
        payload = orjson.loads(next(s for s in html.tagged("script") if s.attrs.get("id") == source).text)
        return list(payload["charts"])

    monkeypatch.setattr(usage_pages, "MAX_LINES", 1)
    whole = charts()
    monkeypatch.setattr(usage_pages, "MAX_GROUPED_ROWS", 0)
    assert charts() == whole
    for drawn, everything in zip(whole[:4], charts("none")[:4], strict=True):  # the lines add up to the whole
        by_bucket = [sum(values) for values in zip(*(s["values"] for s in drawn["series"]), strict=True)]
        assert by_bucket == pytest.approx(everything["series"][0]["values"]), drawn["key"]
    requests = {s["label"]: sum(s["values"]) for s in whole[0]["series"]}
    assert len(requests) == 2 and next(iter(requests)) != "all"
    assert next(label for label in requests if label.startswith("other (")), requests
