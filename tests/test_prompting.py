"""Inferada's prompt templating and system prompt assembly, as tables (src/inferplex/prompting/).

The renderer: what each mode renders and refuses, the variables, and the sandbox against the usual
template-injection payloads. The assembly: what one system prompt is made of, and when the request is left
exactly as the caller sent it. The config check: an operator's bad template is refused when loaded.
Through HTTP: tests/dialects/test_inferada_prompts.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from inferplex.canonical import ChatRequest, parse
from inferplex.config import ConfigError, ModelConfig, parse_config
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.prompting.assembly import SEPARATOR, assemble
from inferplex.prompting.templates import (
    STABLE,
    VARIABLES,
    TemplateProblem,
    check_template,
    render,
    variables,
    variables_now,
)

AT = datetime(2026, 11, 26, 14, 5, 59, tzinfo=UTC)  # a Thursday
VALUES = variables(AT)


def test_the_variables_in_utc() -> None:
    assert VALUES == {"now_date": "2026-11-26", "now_day_of_week": "Thursday", "now_year": "2026", "now_time": "14:05"}
    assert set(VARIABLES) == set(VALUES)
    assert set(STABLE) == {"now_date", "now_day_of_week", "now_year"}


def test_stable_variables_change_at_most_daily() -> None:
    morning, night = (
        variables(datetime(2026, 11, 26, 0, 0, tzinfo=UTC)),
        variables(datetime(2026, 11, 26, 23, 59, tzinfo=UTC)),
    )
    assert {k: morning[k] for k in STABLE} == {k: night[k] for k in STABLE}
    assert morning["now_time"] != night["now_time"]
    # another zone's clock gives the UTC values
    assert variables(datetime.fromisoformat("2026-11-27T01:00:00+02:00"))["now_date"] == "2026-11-26"


def test_variables_now_are_todays() -> None:
    assert variables_now()["now_date"] == datetime.now(UTC).strftime("%Y-%m-%d")


RENDERED = [
    # (mode, template, rendered)
    ("off", "Today is {{ now_date }}.", "Today is {{ now_date }}."),
    ("vars", "Today is {{ now_date }}.", "Today is 2026-11-26."),
    ("vars", "{{now_day_of_week}}, {{ now_year }} at {{ now_time }} UTC", "Thursday, 2026 at 14:05 UTC"),
    ("vars", "no tags at all, a JSON brace { stays }", "no tags at all, a JSON brace { stays }"),
    ("vars", "keeps its trailing newline\n", "keeps its trailing newline\n"),
    ("vars", "{# a comment #}{{- now_year -}} !", "2026!"),
    ("vars", "{% raw %}{{ literal }}{% endraw %}", "{{ literal }}"),
    ("logic", "{{ now_date }}", "2026-11-26"),
    (
        "logic",
        "{% if now_day_of_week in ['Saturday', 'Sunday'] %}weekend{% else %}weekday{% endif %}",
        "weekday",
    ),
    ("logic", "{% for i in range(3) %}{{ i }}{% if not loop.last %},{% endif %}{% endfor %}", "0,1,2"),
    (
        "logic",
        "{% set ns = namespace(n=0) %}{% for c in now_year %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        "4",
    ),
    ("logic", "{{ now_year | int + 1 }}", "2027"),
    ("logic", "{{ now_day_of_week | upper }}", "THURSDAY"),
]


@pytest.mark.parametrize(("mode", "template", "expected"), RENDERED)
def test_rendering(mode: Any, template: str, expected: str) -> None:
    assert render(template, mode, VALUES) == expected
    check_template(template, mode)


REFUSED = [
    # (mode, template, what the problem says)
    ("vars", "{{ now_date", "line 1: unexpected end of template"),
    ("vars", "{{ tomorrow }}", "unknown variable 'tomorrow'"),
    ("vars", "{% if now_year %}x{% endif %}", "only {{ variable }} substitution is allowed here, not `if`"),
    ("vars", "{% for i in range(3) %}x{% endfor %}", "not `for`"),
    ("vars", "{{ now_date | upper }}", "not `filter`"),
    ("vars", "{{ now_date.upper() }}", "not `call`"),
    ("vars", "{{ now_date.__class__ }}", "not `getattr`"),
    ("vars", "{{ now_date[0] }}", "not `getitem`"),
    ("vars", "{{ 7 * 7 }}", "not `mul`"),
    ("vars", "{{ range }}", "unknown variable 'range'"),
    ("logic", "{% if %}", "line 1: Expected an expression"),
    ("logic", "{{ unknown_thing }}", "unknown variable 'unknown_thing'"),
    ("logic", "{% if now_day_of_week == 'Monday' %}{{ monday_only }}{% endif %}", "unknown variable 'monday_only'"),
    ("logic", "{{ now_year + 1 }}", "TypeError"),
]


@pytest.mark.parametrize(("mode", "template", "problem"), REFUSED)
def test_refused_templates(mode: Any, template: str, problem: str) -> None:
    with pytest.raises(TemplateProblem, match=None) as caught:
        check_template(template, mode)
    assert problem in str(caught.value)
    with pytest.raises(TemplateProblem):
        render(template, mode, VALUES)


# Template-injection payloads (the usual server-side template injection ladder against jinja2): in `logic`
# mode, the most an operator gets, each is refused before or while rendering, and nothing of Python's
# objects is ever returned.
ESCAPES = [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''|attr('__class__') }}",
    "{{ now_date.__class__.__base__.__subclasses__() }}",
    "{{ self.__init__.__globals__.__builtins__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ range.__globals__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ dict.mro() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ lipsum.__globals__['os'] }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ config.items() }}",
    "{{ request.application.__globals__ }}",
    "{{ '{0.__class__}'.format(now_date) }}",
    "{{ '%s' | format(now_date.__class__) }}",
    "{% set x = [] %}{{ x.append(1) }}{{ x }}",
    "{% set d = {} %}{{ d.update(a=1) }}",
    "{{ '{a.__class__}'.format_map({'a': now_date}) }}",
    "{% for i in range(10**9) %}{% endfor %}",
]


@pytest.mark.parametrize("template", ESCAPES)
@pytest.mark.parametrize("mode", ["vars", "logic"])
def test_the_sandbox_refuses_escapes(mode: Any, template: str) -> None:
    with pytest.raises(TemplateProblem) as caught:
        check_template(template, mode)
    assert "<class" not in str(caught.value) and "<module" not in str(caught.value)
    with pytest.raises(TemplateProblem):
        render(template, mode, VALUES)


def test_a_harmless_self_reference_renders_no_object() -> None:
    """`self` is jinja's own name for the template's blocks: it renders a fixed string, nothing reachable."""
    out = render("{{ self }}", "logic", VALUES)
    assert "__" not in out and "class" not in out


# ---- the config check --------------------------------------------------------------------------------------


def _config(**model: Any) -> dict[str, Any]:
    return {
        "providers": [{"name": "p", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}], **model}],
    }


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"system_prompt": "{{ now_date", "template_render_mode": "vars"}, "system_prompt: line 1: unexpected end"),
        ({"system_prompt": "{{ nope }}", "template_render_mode": "logic"}, "system_prompt: unknown variable 'nope'"),
        ({"system_prompt": "{% if x %}", "template_render_mode": "vars"}, "system_prompt: line 1"),
        ({"system_prompt": "{{ ''.__class__ }}", "template_render_mode": "logic"}, "SecurityError"),
        ({"system_prompt": "{% if now_year %}y{% endif %}", "template_render_mode": "vars"}, "not `if`"),
        (
            {
                "system_prompt": "{% if now_day_of_week == 'Sunday' %}{{ now_year + 1 }}{% endif %}",
                "template_render_mode": "logic",
            },
            "TypeError",
        ),
        ({"template_render_mode": "templated"}, "template_render_mode"),
    ],
)
def test_an_operators_bad_template_is_refused_when_the_config_loads(model: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(**model), "gw.yaml")
    text = str(caught.value)
    assert text.startswith("gw.yaml: invalid configuration") and "models[0]" in text and message in text


def test_a_literal_prompt_is_not_a_template() -> None:
    config = parse_config(_config(system_prompt="{{ anything }} {% goes %}"))
    assert config.models[0].template_render_mode == "off"


def test_config_check_refuses_the_template(tmp_path: Any) -> None:
    from inferplex.cli import main

    path = tmp_path / "gw.yaml"
    path.write_text(
        "providers: [{name: p, kind: openai, base_url: 'http://127.0.0.1:9/v1'}]\n"
        "models:\n  - name: m\n    pricing: {free: true}\n    deployments: [{provider: p, model: x}]\n"
        "    template_render_mode: logic\n    system_prompt: '{% for %}'\n"
    )
    assert main(["config", "check", str(path)]) != 0


# ---- assembly ----------------------------------------------------------------------------------------------


def _model(**fields: Any) -> ModelConfig:
    return ModelConfig.model_validate({"name": "m", "deployments": [{"provider": "p", "model": "x"}], **fields})


def _request(*messages: dict[str, Any], **extra: Any) -> GatewayRequest[ChatRequest]:
    return parse_request(ChatRequest, {"model": "m", "messages": list(messages), **extra})


def _sent(request: GatewayRequest[ChatRequest]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = request.wire()["messages"]
    return messages


USER = {"role": "user", "content": "Hi {{ now_date }}"}
TODAY = variables_now()["now_date"]

ASSEMBLED: list[tuple[str, dict[str, Any], list[dict[str, Any]], str | None]] = [
    # (case, model fields, caller's messages, the one system prompt sent; None: no system message)
    ("default only", {"system_prompt": "Be brief."}, [USER], "Be brief."),
    (
        "default, then the caller's system and developer messages, in order",
        {"system_prompt": "Be brief."},
        [{"role": "system", "content": "S1"}, USER, {"role": "developer", "content": "D1"}],
        SEPARATOR.join(["Be brief.", "S1", "D1"]),
    ),
    (
        "content parts are joined as text",
        {"system_prompt": "Be brief."},
        [{"role": "system", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]}, USER],
        SEPARATOR.join(["Be brief.", "AB"]),
    ),
    ("mode off: literal", {"system_prompt": "On {{ now_date }}"}, [USER], "On {{ now_date }}"),
    (
        "vars: the default rendered",
        {"system_prompt": "On {{ now_date }}", "template_render_mode": "vars"},
        [USER],
        f"On {TODAY}",
    ),
    (
        "vars without a default: the caller's system message rendered",
        {"template_render_mode": "vars"},
        [{"role": "system", "content": "Date: {{ now_date }}"}, USER],
        f"Date: {TODAY}",
    ),
    (
        "logic: the default's logic runs, the caller's variables are substituted",
        {"system_prompt": "{% for i in range(2) %}[{{ i }}]{% endfor %}", "template_render_mode": "logic"},
        [{"role": "system", "content": "{{ now_date }}"}, USER],
        SEPARATOR.join(["[0][1]", TODAY]),
    ),
    (
        "blank parts are left out; each part is trimmed",
        {"system_prompt": "  Be brief.\n\n"},
        [{"role": "system", "content": "   "}, USER, {"role": "system", "content": "\nS2\n"}],
        SEPARATOR.join(["Be brief.", "S2"]),
    ),
    ("nothing to say: no system message", {"template_render_mode": "vars"}, [USER], None),
]


@pytest.mark.parametrize(("case", "fields", "messages", "system"), ASSEMBLED, ids=[row[0] for row in ASSEMBLED])
def test_assembly(case: str, fields: dict[str, Any], messages: list[dict[str, Any]], system: str | None) -> None:
    sent = _sent(assemble(_request(*messages), _model(**fields)))
    others = [m for m in messages if m["role"] not in ("system", "developer")]
    if system is None:
        assert sent == others
    else:
        assert sent == [{"role": "system", "content": system}, *others]
    assert [m for m in sent if m["role"] == "user"] == [USER]  # a user message is never templated


def test_processor_segments_sit_between_the_default_and_the_callers() -> None:
    request = _request({"role": "system", "content": "Caller."}, USER)
    out = assemble(request, _model(system_prompt="Default."), ["Segment one.", "Segment two."])
    assert _sent(out)[0]["content"] == SEPARATOR.join(["Default.", "Segment one.", "Segment two.", "Caller."])


def test_no_default_and_mode_off_leaves_the_request_untouched() -> None:
    request = _request(
        {"role": "user", "content": "a"}, {"role": "system", "content": "late"}, {"role": "system", "content": "x"}
    )
    wire = request.wire()
    out = assemble(request, _model())
    assert out is request and out.wire() is wire


def test_a_request_already_in_shape_keeps_its_wire() -> None:
    request = _request({"role": "system", "content": "Caller."}, USER)
    wire = request.wire()
    out = assemble(request, _model(template_render_mode="vars"))
    assert out is request and out.wire() is wire


def test_the_opt_out_leaves_the_default_out() -> None:
    request = _request({"role": "system", "content": "Caller."}, USER, inferada={"use_default_prompt": False})
    assert request.options.use_default_prompt is False
    assert "inferada" not in request.wire()
    assert _sent(assemble(request, _model(system_prompt="Default.")))[0] == {"role": "system", "content": "Caller."}
    kept = _request(USER, inferada={"use_default_prompt": True})
    assert _sent(assemble(kept, _model(system_prompt="Default.")))[0] == {"role": "system", "content": "Default."}


@pytest.mark.parametrize("value", ["no", 0, None, []])
def test_the_opt_out_must_be_a_boolean(value: Any) -> None:
    if value is None:
        assert _request(USER, inferada={"use_default_prompt": None}).options.use_default_prompt is True
        return
    with pytest.raises(InvalidRequest) as caught:
        _request(USER, inferada={"use_default_prompt": value})
    assert caught.value.param == "inferada.use_default_prompt"


@pytest.mark.parametrize(
    ("mode", "content", "problem"),
    [
        ("vars", "{{ tomorrow }}", "unknown variable 'tomorrow'"),
        ("logic", "{% if now_year %}x{% endif %}", "not `if`"),  # the caller gets variables only, in logic mode too
        ("logic", "{{ ''.__class__.__mro__ }}", "not `getattr`"),
        ("vars", "{{ now_date", "unexpected end of template"),
    ],
)
def test_a_callers_template_error_is_a_400_naming_the_message(mode: Any, content: str, problem: str) -> None:
    request = _request(USER, {"role": "assistant", "content": "ok"}, {"role": "developer", "content": content})
    with pytest.raises(InvalidRequest) as caught:
        assemble(request, _model(template_render_mode=mode))
    err = caught.value
    assert err.status == 400 and err.param == "messages[2].content" and err.code == "invalid_template"
    assert "messages[2] (a developer message)" in err.message and problem in err.message


def test_mode_off_never_reads_the_callers_braces() -> None:
    request = _request({"role": "system", "content": "{{ tomorrow }} {% if %}"}, USER)
    out = assemble(request, _model(system_prompt="D"))
    assert _sent(out)[0]["content"] == SEPARATOR.join(["D", "{{ tomorrow }} {% if %}"])


def test_other_fields_are_kept() -> None:
    request = _request(USER, temperature=0.5, max_tokens=7, unknown_vendor_field={"a": 1})
    sent = assemble(request, _model(system_prompt="D")).wire()
    assert sent == {
        "model": "m",
        "messages": [{"role": "system", "content": "D"}, USER],
        "temperature": 0.5,
        "max_tokens": 7,
        "unknown_vendor_field": {"a": 1},
    }
    assert parse(ChatRequest, sent).messages[0].role == "system"
