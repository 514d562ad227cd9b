"""Administration from the shell: `inferplex keys|credits|usage|db` against the server's own database,
`inferplex config check` refusing a model with no price, `inferplex serve`'s banner keeping a master key it
did not generate to itself, and bad input answered with a clean error, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from inferplex.cli import main
from tests.accounts.conftest import billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer, free_port, serve_command


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferplex", *args], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )


def cli_json(*args: str) -> Any:
    out = cli(*args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_keys_credits_and_usage_from_the_cli(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    config = billing_config(fake_openai, tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    conf = ("--config", str(path))
    created = cli_json("keys", "create", "--name", "ci", "--credits", "20", "--rpm", "60", "--models", "pri*", *conf)
    assert created["key"].startswith("ipx-") and created["allowed_models"] == ["pri*"] and created["rpm"] == 60
    balance = cli_json("credits", "balance", created["account_id"], *conf)
    assert balance["balance_micros"] == 20_000_000
    assert cli_json("credits", "add", created["account_id"], "0.5", *conf)["balance_micros"] == 20_500_000

    with GatewayServer(config) as gw:  # the server reads the same database the CLI wrote
        auth = {"Authorization": f"Bearer {created['key']}"}
        body = {"model": "priced", "messages": [{"role": "user", "content": "a b"}], "max_tokens": 2}
        assert httpx.post(gw.base_url + "/chat/completions", json=body, headers=auth).status_code == 200
        body["model"] = "echo-model"
        r = httpx.post(gw.base_url + "/chat/completions", json=body, headers=auth)
        assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"

    by_model = cli_json("usage", "--by", "model", *conf)
    priced = next(g for g in by_model if g["group"] == "priced")
    assert priced["requests"] == 1 and priced["cost_micros"] == 6
    ledger = cli_json("credits", "ledger", created["account_id"], *conf)
    assert sum(e["amount_micros"] for e in ledger) == 20_500_000 - 6
    listed = cli_json("keys", "list", *conf)
    assert [k["id"] for k in listed] == [created["id"]] and "key" not in listed[0]
    rotated = cli_json("keys", "rotate", created["id"], *conf)
    assert rotated["key"] != created["key"]
    assert cli_json("keys", "revoke", created["id"], *conf)["revoked_at"] is not None


def test_config_check_refuses_a_model_with_no_price(tmp_path: Path) -> None:
    config = {
        "providers": [{"name": "p", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [
            {"name": "priced", "deployments": [{"provider": "p", "model": "a"}], "pricing": {"input": 1, "output": 2}},
            {"name": "free", "deployments": [{"provider": "p", "model": "b"}], "pricing": {"free": True}},
            {"name": "per-deployment", "deployments": [{"provider": "p", "model": "c", "pricing": {"input": 1}}]},
        ],
    }
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli("config", "check", str(path)).returncode == 0
    config["models"].append({"name": "nobody-priced-me", "deployments": [{"provider": "p", "model": "d"}]})
    path.write_text(yaml.safe_dump(config))
    out = cli("config", "check", str(path))
    assert out.returncode == 2
    assert "models[3].pricing: model 'nobody-priced-me' has no price" in out.stderr
    assert "pricing.free: true" in out.stderr


def test_a_key_changed_by_the_cli_while_the_gateway_serves_it_changes_at_once(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """The gateway keeps key records between changes; the CLI writes the SQLite file from another process,
    and its change must still apply to the very next request."""
    config = billing_config(fake_openai, tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    conf = ("--config", str(path))
    key = cli_json("keys", "create", "--name", "a", "--credits", "1", *conf)
    with GatewayServer(config) as gw:
        auth = {"Authorization": f"Bearer {key['key']}"}
        assert [httpx.get(gw.base_url + "/models", headers=auth).status_code for _ in range(3)] == [200] * 3
        rotated = cli_json("keys", "rotate", key["id"], *conf)
        assert httpx.get(gw.base_url + "/models", headers=auth).status_code == 401
        auth = {"Authorization": f"Bearer {rotated['key']}"}
        assert [httpx.get(gw.base_url + "/models", headers=auth).status_code for _ in range(3)] == [200] * 3
        cli_json("keys", "revoke", key["id"], *conf)
        r = httpx.get(gw.base_url + "/models", headers=auth)
        assert r.status_code == 401 and r.json()["error"]["code"] == "revoked_api_key"


def test_a_revocation_by_the_cli_stops_every_request_sent_after_it_under_load(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """Under concurrent load the gateway reads SQLite's key-change count once per pass of its event loop,
    not once per request; a request sent after the CLI returned must still never see the old key."""
    config = billing_config(fake_openai, tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    conf = ("--config", str(path))
    key = cli_json("keys", "create", "--name", "a", "--credits", "100", *conf)
    body = {"model": "priced", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    seen: list[tuple[float, int]] = []
    stop = threading.Event()

    def caller() -> None:
        with httpx.Client(base_url=gw.base_url, headers={"Authorization": f"Bearer {key['key']}"}) as client:
            while not stop.is_set():
                sent = time.monotonic()
                status = client.post("/chat/completions", json=body).status_code
                seen.append((sent, status))

    with GatewayServer(config) as gw:
        callers = [threading.Thread(target=caller) for _ in range(8)]
        for c in callers:
            c.start()
        time.sleep(0.5)
        cli_json("keys", "revoke", key["id"], *conf)
        revoked = time.monotonic()
        time.sleep(0.5)
        stop.set()
        for c in callers:
            c.join()
    before = [status for sent, status in seen if sent < revoked]
    after = [status for sent, status in seen if sent > revoked]
    assert before.count(200) > 8 and after, (len(before), len(after))
    assert set(after) == {401}


# ---- the start-up banner: the master key is shown only when the gateway generated it ---------------------


class Served:
    """`inferplex serve` as a user runs it: a subprocess whose banner we read, then stop."""

    def __init__(self, config: Path, data_dir: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        full_env = {k: v for k, v in os.environ.items() if k != "INFERPLEX_MASTER_KEY"} | env
        self.process = subprocess.Popen(
            serve_command(config, self.port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
            cwd=data_dir.parent,
        )
        self.banner = self._read_banner()

    def _read_banner(self) -> str:
        assert self.process.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.lstrip().startswith("try:"):
                return "".join(lines)
        self.stop()
        raise AssertionError("no banner: " + "".join(lines))

    def get(self, path: str, key: str) -> httpx.Response:
        url = f"http://127.0.0.1:{self.port}{path}"
        deadline = time.monotonic() + 30
        while True:
            try:
                return httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=5)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def serve_config(fake_openai: FakeOpenAI, tmp_path: Path, **server: Any) -> tuple[Path, Path]:
    data_dir = tmp_path / "data"
    config = billing_config(fake_openai, data_dir)
    config["server"].update(server)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, data_dir


def test_a_generated_master_key_is_shown_once_with_where_it_is_stored(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    path, data_dir = serve_config(fake_openai, tmp_path)
    served = Served(path, data_dir, {"FAKE_UPSTREAM_KEY": "sk-fake-upstream"})
    try:
        stored = (data_dir / "master_key").read_text().strip()
        assert stored in served.banner and str(data_dir / "master_key") in served.banner
        assert served.get("/admin/keys", stored).status_code == 200  # the key shown is the key
    finally:
        served.stop()
    again = Served(path, data_dir, {"FAKE_UPSTREAM_KEY": "sk-fake-upstream"})
    try:
        assert stored not in again.banner, again.banner  # generated before: not shown again
        assert str(data_dir / "master_key") in again.banner
        assert f"$(cat {data_dir / 'master_key'})" in again.banner  # a curl line that works as printed
        assert again.get("/admin/keys", stored).status_code == 200
    finally:
        again.stop()


def test_a_master_key_from_the_environment_is_never_printed(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    path, data_dir = serve_config(fake_openai, tmp_path)
    secret = "ipx-env-master-" + "z" * 24
    served = Served(path, data_dir, {"FAKE_UPSTREAM_KEY": "sk-fake-upstream", "INFERPLEX_MASTER_KEY": secret})
    try:
        assert secret not in served.banner, served.banner
        assert "$INFERPLEX_MASTER_KEY" in served.banner
        assert served.get("/admin/keys", secret).status_code == 200
        assert not (data_dir / "master_key").exists()
    finally:
        served.stop()


@pytest.mark.parametrize("reference", ["env", "file"])
def test_a_master_key_from_the_config_is_never_printed(fake_openai: FakeOpenAI, tmp_path: Path, reference: str) -> None:
    secret = "ipx-configured-master-" + "q" * 24
    (tmp_path / "master.txt").write_text(secret + "\n")
    env = {"FAKE_UPSTREAM_KEY": "sk-fake-upstream", "MY_MASTER": secret}
    ref = "env:MY_MASTER" if reference == "env" else f"file:{tmp_path / 'master.txt'}"
    path, data_dir = serve_config(fake_openai, tmp_path, master_key=ref)
    served = Served(path, data_dir, env)
    try:
        assert secret not in served.banner, served.banner
        assert ("$MY_MASTER" if reference == "env" else f"$(cat {tmp_path / 'master.txt'})") in served.banner
        assert served.get("/admin/keys", secret).status_code == 200
    finally:
        served.stop()


# ---- bad input from the shell: a clean error naming what is wrong, never a traceback ---------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def conf(request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path: Path) -> tuple[str, str]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(billing_config(fake_openai, tmp_path, url)))
    return ("--config", str(path))


def test_64_bit_limits_from_the_cli_are_stored(conf: tuple[str, str]) -> None:
    created = cli_json("keys", "create", "--name", "big", "--tpm", "1000000000000", "--rpm", str(2**40), *conf)
    assert created["tpm"] == 10**12 and created["rpm"] == 2**40
    listed = [k for k in cli_json("keys", "list", *conf) if k["id"] == created["id"]]
    assert [(k["tpm"], k["rpm"]) for k in listed] == [(10**12, 2**40)]


@pytest.mark.parametrize(
    "args,named",
    [
        (["keys", "create", "--name", "x", "--tpm", str(2**63)], "tpm"),
        (["keys", "create", "--name", "x", "--rpm", "0"], "rpm"),
        (["keys", "create", "--name", "x", "--max-concurrent", "-3"], "max_concurrent"),
        (["keys", "create", "--name", "x", "--credits", "10000000000000"], "credits_micros"),
        (["keys", "create", "--name", "x", "--credits", "inf"], "--credits"),
        (["keys", "create", "--name", "x", "--credits", "NaN"], "--credits"),
        (["keys", "create", "--name", "x", "--credits", "0.0000001"], "--credits"),
        (["keys", "create", "--name", "x", "--scopes", "chat,root"], "scopes"),
        (["keys", "create", "--name", "x", "--ips", "not-an-ip"], "allowed_ips"),
        (["keys", "create", "--name", "x", "--account", "acct_missing"], "acct_missing"),
        (["credits", "add", "acct_missing", "5"], "acct_missing"),
        (["keys", "rotate", "key_missing"], "key_missing"),
    ],
)
def test_bad_input_from_the_cli_is_a_clean_error(
    conf: tuple[str, str], args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process (`main`, as `python -m inferplex` calls it), so the matrix stays fast; an exception
    escaping `main` is the traceback a user would see."""
    assert main(["keys", "list", *conf]) == 0
    before = capsys.readouterr().out
    try:
        status = main([*args, *conf])
    except SystemExit as exit:  # argparse refusing an argument: usage and message on stderr
        status = exit.code
    out = capsys.readouterr()
    assert status != 0, out.out
    assert named in out.err and "error: " in out.err, out.err
    assert main(["keys", "list", *conf]) == 0
    assert capsys.readouterr().out == before  # nothing was written


def test_a_cli_top_up_that_would_overflow_the_balance_is_refused(conf: tuple[str, str]) -> None:
    created = cli_json("keys", "create", "--name", "rich", "--credits", "9000000000000", *conf)
    out = cli("credits", "add", created["account_id"], "1000000000000", *conf)
    assert out.returncode != 0 and "Traceback" not in out.stderr and "amount_micros" in out.stderr, out.stderr
    balance = cli_json("credits", "balance", created["account_id"], *conf)["balance_micros"]
    ledger = cli_json("credits", "ledger", created["account_id"], *conf)
    assert balance == 9 * 10**18 == sum(e["amount_micros"] for e in ledger)


def test_a_database_that_cannot_be_reached_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"storage": {"database_url": "postgresql+asyncpg://postgres@127.0.0.1:1/none"}}))
    assert main(["keys", "list", "--config", str(path)]) == 1
    assert capsys.readouterr().err.startswith("inferplex: error: the database cannot be reached")
