"""Inferada's system prompt assembly and templating through HTTP, with the official OpenAI and Anthropic SDKs.

Each model below carries a default system prompt in one `template_render_mode`; the fakes behind it (OpenAI,
Anthropic, Gemini, Bedrock: each refuses what its real provider refuses, e.g. a `system` role in Anthropic's
`messages`) record what they received, and the tests assert the ONE system prompt arrived in the provider's
own system field: default, then the caller's system messages, joined by `---`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import FakeGemini
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.providers.conftest import BEDROCK

SEP = "\n\n---\n\n"
DEFAULT = "You are the Inferplex assistant."
VARS = "Today is {{ now_date }}, a {{ now_day_of_week }}."
LOGIC = (
    "{% if now_day_of_week in ['Saturday', 'Sunday'] %}Weekend rules.{% else %}Weekday rules.{% endif %}"
    "{% for n in range(2) %} [{{ n }}]{% endfor %}"
)
BEDROCK_ID = BEDROCK["bedrock-claude"]


def today() -> tuple[str, str]:
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%d"), now.strftime("%A")


def rendered_vars() -> str:
    date, day = today()
    return f"Today is {date}, a {day}."


def rendered_logic() -> str:
    _, day = today()
    return ("Weekend rules." if day in ("Saturday", "Sunday") else "Weekday rules.") + " [0] [1]"


def _model(name: str, provider: str, upstream: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "deployments": [{"provider": provider, "model": upstream}],
        "pricing": {"free": True},
        **extra,
    }


def prompts_config(
    openai_fake: FakeOpenAI, claude: FakeAnthropic, gemini: FakeGemini, bedrock: FakeBedrock
) -> dict[str, Any]:
    return {
        "providers": [
            {"name": "oai", "kind": "openai", "base_url": openai_fake.base_url, "api_key": "env:FAKE_UPSTREAM_KEY"},
            {"name": "claude", "kind": "anthropic", "base_url": claude.url, "api_key": "env:FAKE_ANTHROPIC_KEY"},
            {"name": "gemini", "kind": "gemini", "base_url": gemini.url + "/v1beta", "api_key": "env:FAKE_GEMINI_KEY"},
            {"name": "bedrock", "kind": "bedrock", "base_url": bedrock.url, "options": {"region": "us-east-1"}},
        ],
        "models": [
            _model("plain-gpt", "oai", "gpt-plain-prompts"),
            _model("literal-gpt", "oai", "gpt-literal-prompts", system_prompt=DEFAULT + " {{ now_date }}"),
            _model("vars-gpt", "oai", "gpt-vars-prompts", system_prompt=VARS, template_render_mode="vars"),
            _model("logic-gpt", "oai", "gpt-logic-prompts", system_prompt=LOGIC, template_render_mode="logic"),
            _model("callers-gpt", "oai", "gpt-callers-prompts", template_render_mode="vars"),
            {
                **_model("priced-gpt", "oai", "gpt-priced-prompts", system_prompt=VARS, template_render_mode="vars"),
                "pricing": {"input": "100", "output": "100"},
            },
            _model("vars-claude", "claude", "claude-echo-prompts", system_prompt=VARS, template_render_mode="vars"),
            _model("logic-claude", "claude", "claude-echo-prompts", system_prompt=LOGIC, template_render_mode="logic"),
            _model("logic-gemini", "gemini", "gemini-echo", system_prompt=LOGIC, template_render_mode="logic"),
            _model("logic-bedrock", "bedrock", BEDROCK_ID, system_prompt=LOGIC, template_render_mode="logic"),
        ],
    }


@pytest.fixture(scope="module")
def gw(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic, fake_gemini: FakeGemini, fake_bedrock: FakeBedrock
) -> Iterator[GatewayServer]:
    with GatewayServer(prompts_config(fake_openai, fake_anthropic, fake_gemini, fake_bedrock)) as server:
        yield server


@pytest.fixture
def oai(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=gw.master_key, max_retries=0)


@pytest.fixture
def claude(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=gw.master_key, max_retries=0)


def sent_to_openai(fake: FakeOpenAI, upstream: str) -> dict[str, Any]:
    return next(r.body for r in reversed(fake.state.requests) if r.body.get("model") == upstream)


def sent_to_anthropic(fake: FakeAnthropic) -> dict[str, Any]:
    return next(r.body for r in reversed(fake.requests) if r.body.get("model") == "claude-echo-prompts")


# ---- OpenAI SDK, OpenAI-compatible upstream ---------------------------------------------------------------


def test_the_model_default_and_the_callers_system_messages_arrive_as_one(
    oai: openai.OpenAI, fake_openai: FakeOpenAI
) -> None:
    answer = oai.chat.completions.create(
        model="vars-gpt",
        messages=[
            {"role": "system", "content": "Answer in {{ now_year }} style."},
            {"role": "user", "content": "Hello {{ now_date }}"},
            {"role": "assistant", "content": "Hi {{ now_year }}"},
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": "again"},
        ],
    )
    assert answer.choices[0].message.content == "echo: again"
    sent = sent_to_openai(fake_openai, "gpt-vars-prompts")["messages"]
    year = str(datetime.now(UTC).year)
    assert sent == [
        {"role": "system", "content": SEP.join([rendered_vars(), f"Answer in {year} style.", "Be terse."])},
        {"role": "user", "content": "Hello {{ now_date }}"},  # user and assistant text is never templated
        {"role": "assistant", "content": "Hi {{ now_year }}"},
        {"role": "user", "content": "again"},
    ]


def test_logic_mode_runs_the_operators_conditionals_and_loops(oai: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    oai.chat.completions.create(model="logic-gpt", messages=[{"role": "user", "content": "hi"}])
    assert sent_to_openai(fake_openai, "gpt-logic-prompts")["messages"][0] == {
        "role": "system",
        "content": rendered_logic(),
    }


def test_mode_off_sends_the_default_literally(oai: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    oai.chat.completions.create(
        model="literal-gpt",
        messages=[{"role": "user", "content": "hi"}, {"role": "system", "content": "{{ late }}"}],
    )
    assert sent_to_openai(fake_openai, "gpt-literal-prompts")["messages"] == [
        {"role": "system", "content": SEP.join([DEFAULT + " {{ now_date }}", "{{ late }}"])},
        {"role": "user", "content": "hi"},
    ]


def test_a_stream_gets_the_same_prompt(oai: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    stream = oai.chat.completions.create(
        model="logic-gpt",
        messages=[{"role": "system", "content": "Mine."}, {"role": "user", "content": "streamed"}],
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "echo: streamed"
    sent = sent_to_openai(fake_openai, "gpt-logic-prompts")
    assert sent["stream"] is True
    assert sent["messages"][0] == {"role": "system", "content": SEP.join([rendered_logic(), "Mine."])}


def test_a_model_without_prompt_settings_forwards_the_request_as_sent(
    gw: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    body = {
        "model": "plain-gpt",
        "messages": [
            {"role": "user", "content": "{{ now_date }}"},
            {"role": "system", "content": "{{ late }}"},
            {"role": "system", "content": "second"},
        ],
    }
    r = httpx.post(f"{gw.base_url}/chat/completions", json=body, headers=gw.auth)
    assert r.status_code == 200, r.text
    assert sent_to_openai(fake_openai, "gpt-plain-prompts")["messages"] == body["messages"]


def test_the_opt_out_leaves_the_default_out(oai: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    oai.chat.completions.create(
        model="vars-gpt",
        messages=[{"role": "system", "content": "Only mine, {{ now_year }}."}, {"role": "user", "content": "hi"}],
        stream=False,
        extra_body={"inferada": {"use_default_prompt": False}},
    )
    sent = sent_to_openai(fake_openai, "gpt-vars-prompts")
    assert sent["messages"][0] == {"role": "system", "content": f"Only mine, {datetime.now(UTC).year}."}
    assert "inferada" not in sent


def test_a_bad_opt_out_is_a_400_naming_it(gw: GatewayServer) -> None:
    body = {
        "model": "vars-gpt",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        "inferada": {"use_default_prompt": "no"},
    }
    r = httpx.post(f"{gw.base_url}/chat/completions", json=body, headers=gw.auth)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "inferada.use_default_prompt"


@pytest.mark.parametrize(
    ("model", "content", "problem"),
    [
        ("vars-gpt", "{{ tomorrow }}", "unknown variable 'tomorrow'"),
        ("callers-gpt", "{{ now_date", "unexpected end of template"),
        ("logic-gpt", "{% if now_year %}x{% endif %}", "only {{ variable }} substitution"),
        ("logic-gpt", "{{ ''.__class__.__mro__[1].__subclasses__() }}", "only {{ variable }} substitution"),
    ],
)
def test_a_template_error_in_a_callers_system_message_is_a_400_naming_it(
    oai: openai.OpenAI, fake_openai: FakeOpenAI, model: str, content: str, problem: str
) -> None:
    before = len(fake_openai.state.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}, {"role": "system", "content": content}]
        )
    err = caught.value
    assert err.status_code == 400
    body: Any = err.body
    assert body["param"] == "messages[1].content" and body["code"] == "invalid_template"
    assert "messages[1] (a system message)" in body["message"] and problem in body["message"]
    assert len(fake_openai.state.requests) == before  # refused before any upstream call


# ---- native system fields: Anthropic (both SDKs), Gemini, Bedrock -----------------------------------------


def test_anthropic_sdk_system_reaches_anthropics_system_field(
    claude: anthropic.Anthropic, fake_anthropic: FakeAnthropic
) -> None:
    message = claude.messages.create(
        model="vars-claude",
        max_tokens=64,
        system="Caller says {{ now_year }}.",
        messages=[{"role": "user", "content": "Hello {{ now_date }}"}],
    )
    assert message.content[0].type == "text"
    sent = sent_to_anthropic(fake_anthropic)
    assert sent["system"] == SEP.join([rendered_vars(), f"Caller says {datetime.now(UTC).year}."])
    assert sent["messages"] == [{"role": "user", "content": "Hello {{ now_date }}"}]


def test_openai_sdk_to_anthropic_sends_one_system_field(oai: openai.OpenAI, fake_anthropic: FakeAnthropic) -> None:
    oai.chat.completions.create(
        model="logic-claude",
        messages=[
            {"role": "system", "content": "First."},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "Second."},
        ],
    )
    sent = sent_to_anthropic(fake_anthropic)
    assert sent["system"] == SEP.join([rendered_logic(), "First.", "Second."])
    assert all(m["role"] != "system" for m in sent["messages"])


def test_anthropic_sdk_stream_gets_the_prompt(claude: anthropic.Anthropic, fake_anthropic: FakeAnthropic) -> None:
    with claude.messages.stream(
        model="logic-claude", max_tokens=64, messages=[{"role": "user", "content": "streamed"}]
    ) as stream:
        text = "".join(stream.text_stream)
    assert "streamed" in text
    sent = sent_to_anthropic(fake_anthropic)
    assert sent["stream"] is True and sent["system"] == rendered_logic()


def test_anthropic_sdk_template_error_is_anthropics_400(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model="vars-claude",
            max_tokens=16,
            system="{{ ''.__class__ }}",
            messages=[{"role": "user", "content": "hi"}],
        )
    body: Any = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "Invalid template" in body["error"]["message"]


def test_gemini_gets_a_system_instruction(oai: openai.OpenAI, fake_gemini: FakeGemini) -> None:
    oai.chat.completions.create(
        model="logic-gemini", messages=[{"role": "system", "content": "Mine."}, {"role": "user", "content": "hi"}]
    )
    sent = next(r.body for r in reversed(fake_gemini.requests) if "gemini-echo" in r.path)
    text = "".join(p["text"] for p in sent["systemInstruction"]["parts"])
    assert text == SEP.join([rendered_logic(), "Mine."])
    assert [c["role"] for c in sent["contents"]] == ["user"]


def test_bedrock_gets_a_system_block(oai: openai.OpenAI, fake_bedrock: FakeBedrock) -> None:
    oai.chat.completions.create(
        model="logic-bedrock", messages=[{"role": "system", "content": "Mine."}, {"role": "user", "content": "hi"}]
    )
    sent = next(r.body for r in reversed(fake_bedrock.requests) if r.path.endswith("/converse"))
    assert "".join(b["text"] for b in sent["system"]) == SEP.join([rendered_logic(), "Mine."])
    assert [m["role"] for m in sent["messages"]] == ["user"]


def test_anthropic_sdk_to_an_openai_upstream(claude: anthropic.Anthropic, fake_openai: FakeOpenAI) -> None:
    claude.messages.create(
        model="vars-gpt", max_tokens=16, system="Mine.", messages=[{"role": "user", "content": "hi"}]
    )
    sent = sent_to_openai(fake_openai, "gpt-vars-prompts")
    assert sent["messages"] == [
        {"role": "system", "content": SEP.join([rendered_vars(), "Mine."])},
        {"role": "user", "content": "hi"},
    ]
    assert 16 in (sent.get("max_tokens"), sent.get("max_completion_tokens")) and "system" not in sent


def test_a_refused_template_costs_nothing_and_the_sent_prompt_is_billed(
    gw: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    with httpx.Client(base_url=gw.url, headers=gw.auth, timeout=30) as admin:
        made = admin.post("/admin/keys", json={"name": "prompts", "credits_micros": 1_000_000})
        assert made.status_code == 201, made.text
        key = made.json()
        caller = {"Authorization": f"Bearer {key['key']}"}
        url = f"{gw.base_url}/chat/completions"
        user = {"role": "user", "content": "hi"}

        bad = {"model": "priced-gpt", "messages": [{"role": "system", "content": "{{ nope }}"}, user]}
        assert httpx.post(url, json=bad, headers=caller).status_code == 400
        assert admin.get(f"/admin/accounts/{key['account_id']}").json()["balance_micros"] == 1_000_000

        good = httpx.post(url, json={"model": "priced-gpt", "messages": [user]}, headers=caller)
        assert good.status_code == 200, good.text
        # the fake counts the words of every message it received: the default prompt is in the bill
        prompt_words = len(rendered_vars().split()) + 1
        assert good.json()["usage"]["prompt_tokens"] == prompt_words
        deadline = time.monotonic() + 10
        while (balance := admin.get(f"/admin/accounts/{key['account_id']}").json()["balance_micros"]) == 1_000_000:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert balance < 1_000_000


def test_token_counts_include_the_models_own_system_prompt(gw: GatewayServer) -> None:
    """`/v1/messages/count_tokens` counts what the upstream would be sent: the model's default prompt too, on a
    target that counts itself (Anthropic's count_tokens) and on one the gateway estimates for (OpenAI)."""
    messages = [{"role": "user", "content": "Hello there."}]

    def count(model: str) -> int:
        r = httpx.post(
            gw.url + "/v1/messages/count_tokens",
            json={"model": model, "messages": messages},
            headers={"x-api-key": gw.master_key, "anthropic-version": "2023-06-01"},
        )
        assert r.status_code == 200, r.text
        return int(r.json()["input_tokens"])

    plain = count("plain-gpt")
    assert count("vars-gpt") >= plain + len(rendered_vars()) // 4
    assert count("logic-claude") > count("plain-gpt")
