"""OpenAI's video routes through the official `openai` SDK, against a gateway on SQLite in front of a strict
fake Sora: create, create_and_poll, retrieve, list paging, download, remix, delete; jobs per owner; a job's
calls on the deployment (and key) that took it; failed and cancelled jobs released; the reservation settled
on the seconds and size at each resolution's price."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from tests.accounts.conftest import Admin
from tests.fakes.openai_videos_upstream import FakeSora
from tests.gateway_server import GatewayServer
from tests.media.videos.conftest import (
    KEY_A,
    KEY_B,
    MASTER,
    PRICES,
    balance,
    gateway,
    new_key,
    video_config,
    wait_for,
)

pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")


def client(server: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=server.base_url, max_retries=0, timeout=30)


def upstream_id(sora: FakeSora, prompt: str) -> str:
    return next(c["id"] for c in sora.created if c["body"]["prompt"] == prompt)


def test_create_and_poll_then_download_the_video_and_thumbnail(
    server: GatewayServer, sora: FakeSora, admin: Admin
) -> None:
    key, account = new_key(admin)
    c = client(server, key)
    video = c.videos.create_and_poll(model="sora-2", prompt="a calico cat on a piano", seconds="8", poll_interval_ms=50)
    assert video.status == "completed" and video.progress == 100 and video.object == "video"
    assert video.seconds == "8" and video.size == "720x1280" and video.model == "sora-2"
    assert video.completed_at is not None and video.error is None
    theirs = upstream_id(sora, "a calico cat on a piano")
    assert video.id.startswith("video_") and video.id != theirs and theirs.removeprefix("video_") not in video.id
    content = c.videos.download_content(video.id, variant="video")
    assert content.content == sora.content_bytes(theirs, "video")
    assert c.videos.download_content(video.id, variant="thumbnail").content == sora.content_bytes(theirs, "thumbnail")
    # Downloads are served from the gateway's store: the provider was asked once per variant, whatever we read.
    c.videos.download_content(video.id, variant="video")
    assert sora.downloads[f"{theirs}/video"] == 1
    wait_for(lambda: balance(admin, account) == 50_000_000 - 8 * PRICES["720x1280"])
    (row,) = admin.usage(account_id=account)  # one usage row per job, written when it was settled
    assert row["model"] == "sora-2" and row["status"] == 200 and row["cost_micros"] == 8 * PRICES["720x1280"]
    assert row["provider"] in ("sora-a", "sora-b")


def test_create_answers_at_once_and_retrieve_follows_the_job(
    server: GatewayServer, sora: FakeSora, admin: Admin
) -> None:
    sora.polls_needed = 6
    key, _ = new_key(admin)
    c = client(server, key)
    video = c.videos.create(model="sora-2", prompt="waves at dusk")
    assert video.status == "queued" and video.progress == 0 and video.seconds == "4" and video.size == "720x1280"
    seen = {c.videos.retrieve(video.id).status for _ in range(3)}
    assert seen <= {"queued", "in_progress", "completed"}
    done = wait_for(lambda: (v := c.videos.retrieve(video.id)).status == "completed" and v)
    assert done.id == video.id and done.prompt == "waves at dusk"


def test_list_pages_through_the_callers_jobs_only(server: GatewayServer, sora: FakeSora, admin: Admin) -> None:
    key, _ = new_key(admin)
    other, _ = new_key(admin)
    c = client(server, key)
    made = [c.videos.create(model="sora-2", prompt=f"clip {i}").id for i in range(5)]
    client(server, other).videos.create(model="sora-2", prompt="someone else's")
    first = c.videos.list(limit=2, order="asc")
    assert [v.id for v in first.data] == made[:2] and first.has_more
    assert [v.id for v in c.videos.list(limit=2, order="asc")] == made  # the SDK follows `last_id`
    assert [v.id for v in c.videos.list(order="desc")] == made[::-1]
    r = httpx.get(
        f"{server.base_url}/videos", params={"after": "video_nope"}, headers={"Authorization": f"Bearer {key}"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "after"


def test_another_owners_job_is_not_found(server: GatewayServer, sora: FakeSora, admin: Admin) -> None:
    key, _ = new_key(admin)
    other, _ = new_key(admin)
    video = client(server, key).videos.create_and_poll(model="sora-2", prompt="mine", poll_interval_ms=50)
    stranger = client(server, other)
    for call in (
        lambda: stranger.videos.retrieve(video.id),
        lambda: stranger.videos.download_content(video.id),
        lambda: stranger.videos.delete(video.id),
        lambda: stranger.videos.remix(video.id, prompt="theirs"),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.body["code"] == "video_not_found"  # type: ignore[index]
    assert client(server, key).videos.retrieve(video.id).status == "completed"


def test_remix_runs_on_the_source_deployment(server: GatewayServer, sora: FakeSora, admin: Admin) -> None:
    key, account = new_key(admin)
    c = client(server, key)
    source = c.videos.create_and_poll(model="sora-2-pro", prompt="a city", size="1024x1792", poll_interval_ms=50)
    remix = c.videos.remix(source.id, prompt="the same city at night")
    assert remix.remixed_from_video_id == source.id and remix.size == "1024x1792" and remix.seconds == "4"
    done = wait_for(lambda: (v := c.videos.retrieve(remix.id)).status == "completed" and v)
    theirs = upstream_id(sora, "the same city at night")
    assert sora.jobs[theirs].remixed_from == upstream_id(sora, "a city")
    assert c.videos.download_content(done.id).content == sora.content_bytes(theirs)
    wait_for(lambda: balance(admin, account) == 50_000_000 - 2 * 4 * PRICES["1024x1792"])


def test_a_failed_job_has_the_providers_message_and_costs_nothing(
    server: GatewayServer, sora: FakeSora, admin: Admin
) -> None:
    key, account = new_key(admin)
    c = client(server, key)
    video = c.videos.create_and_poll(model="sora-2", prompt="FAIL this one", seconds="12", poll_interval_ms=50)
    assert video.status == "failed"
    assert video.error is not None and video.error.message == sora.failure_message
    assert video.error.code == "video_generation_failed"
    wait_for(lambda: balance(admin, account) == 50_000_000)
    kinds = [row["kind"] for row in admin.ledger(account)]
    assert kinds.count("reserve") == 1 and kinds.count("settle") == 1
    with pytest.raises(openai.BadRequestError) as caught:
        c.videos.download_content(video.id)
    assert caught.value.body["code"] == "video_not_ready"  # type: ignore[index]


def test_delete_cancels_an_unfinished_job_upstream_and_releases_it(
    server: GatewayServer, sora: FakeSora, admin: Admin
) -> None:
    sora.polls_needed = 10_000
    key, account = new_key(admin)
    c = client(server, key)
    video = c.videos.create(model="sora-2", prompt="never mind", seconds="12")
    assert balance(admin, account) == 50_000_000 - 12 * PRICES["720x1280"]  # the worst case, reserved
    wait_for(lambda: sora.polls.get(upstream_id(sora, "never mind"), 0) >= 1)
    deleted = c.videos.delete(video.id)
    assert deleted.deleted and deleted.id == video.id and deleted.object == "video.deleted"
    assert upstream_id(sora, "never mind") in sora.cancelled
    assert balance(admin, account) == 50_000_000
    with pytest.raises(openai.NotFoundError):
        c.videos.retrieve(video.id)
    assert video.id not in [v.id for v in c.videos.list()]


def test_delete_of_a_finished_job_removes_its_files(server: GatewayServer, sora: FakeSora, admin: Admin) -> None:
    key, account = new_key(admin)
    c = client(server, key)
    video = c.videos.create_and_poll(model="sora-2", prompt="keep then delete", poll_interval_ms=50)
    assert c.videos.delete(video.id).deleted
    with pytest.raises(openai.NotFoundError):
        c.videos.download_content(video.id)
    assert upstream_id(sora, "keep then delete") not in sora.cancelled  # nothing to cancel: it was finished
    wait_for(lambda: balance(admin, account) == 50_000_000 - 4 * PRICES["720x1280"])  # it was made: it is billed


def test_each_job_is_polled_on_its_deployment_with_that_deployments_key(
    server: GatewayServer, sora: FakeSora, admin: Admin
) -> None:
    """Two deployments of sora-2, each with its own key: status and content calls use the key that created
    the job (the fake answers another key 404 and records it)."""
    key, _ = new_key(admin)
    c = client(server, key)
    ids = [c.videos.create(model="sora-2", prompt=f"spread {i}").id for i in range(12)]
    for video_id in ids:
        wait_for(lambda v=video_id: c.videos.retrieve(v).status == "completed")  # type: ignore[misc]
    assert {created["key"] for created in sora.created} == {KEY_A, KEY_B}  # both deployments took jobs
    assert sora.wrong_key == []
    for video_id in ids:
        assert c.videos.download_content(video_id).content[:12] == b"\x00\x00\x00\x18ftypmp42"


def test_concurrent_jobs_per_key_are_limited(sora: FakeSora, tmp_path: Path) -> None:
    sora.polls_needed = 10_000
    with gateway(video_config(sora, tmp_path, max_concurrent_per_key=4)) as server:
        admin = Admin(server.url, MASTER)
        try:
            _four_at_most(server, sora, admin)
        finally:
            admin.close()


def _four_at_most(server: GatewayServer, sora: FakeSora, admin: Admin) -> None:
    key, account = new_key(admin)
    c = client(server, key)
    ids = [c.videos.create(model="sora-2", prompt=f"slot {i}").id for i in range(4)]
    with pytest.raises(openai.RateLimitError) as caught:
        c.videos.create(model="sora-2", prompt="one too many")
    assert caught.value.body["code"] == "too_many_concurrent_jobs"  # type: ignore[index]
    assert "one too many" not in [created["body"]["prompt"] for created in sora.created]
    c.videos.delete(ids[0])
    assert c.videos.create(model="sora-2", prompt="room again").status == "queued"
    assert balance(admin, account) == 50_000_000 - 4 * 4 * PRICES["720x1280"]  # four held; the refused one none


def test_ledger_reconciles_under_concurrency(server: GatewayServer, sora: FakeSora, admin: Admin) -> None:
    """Jobs of every size and length at once, some failing upstream, some deleted while they run: the account
    pays exactly seconds x price for the ones that completed, each reservation settled once."""
    key, account = new_key(admin, credits=100_000_000)
    c = client(server, key)
    plan = [("sora-2", "720x1280", "4"), ("sora-2", "1280x720", "8"), ("sora-2-pro", "1792x1024", "12"),
            ("sora-2-pro", "1024x1792", "4"), ("sora-2", "720x1280", "12")]  # fmt: skip
    asks = [(m, s, sec, f"{'FAIL ' if i % 3 == 2 else ''}job {i}") for i, (m, s, sec) in enumerate(plan * 2)]
    held = [("sora-2", "720x1280", "12", f"HOLD {i}") for i in range(4)]  # deleted while they run
    with ThreadPoolExecutor(8) as pool:
        both = list(pool.map(lambda a: c.videos.create(model=a[0], size=a[1], seconds=a[2], prompt=a[3]), asks + held))
        made, doomed = both[: len(asks)], both[len(asks) :]
        assert all(d.deleted for d in pool.map(lambda v: c.videos.delete(v.id), doomed))
    assert {upstream_id(sora, f"HOLD {i}") for i in range(4)} <= set(sora.cancelled)
    done = [
        wait_for(lambda v=v: (got := c.videos.retrieve(v.id)).status in ("completed", "failed") and got) for v in made
    ]
    expected = sum(int(v.seconds) * PRICES[v.size] for v in done if v.status == "completed")
    assert {v.status for v in done} == {"completed", "failed"}
    wait_for(lambda: balance(admin, account) == 100_000_000 - expected)
    ledger = admin.ledger(account)
    settles = [row["request_id"] for row in ledger if row["kind"] == "settle"]
    reserves = [row["request_id"] for row in ledger if row["kind"] == "reserve"]
    assert sorted(settles) == sorted(reserves) and len(set(settles)) == len(both)
    assert sum(row["amount_micros"] for row in ledger) == balance(admin, account)
