"""The poller: every replica's background task that moves durable jobs on (jobs/rows.py for the lease).

Every `jobs.tick_s` a replica claims the jobs that are due and that no other replica holds, and works on each
under its lease (renewed every third of `lease_s` while it works):
- queued or in progress: ask the provider (`video_status`, on the deployment and with the key recorded in
  the row); still running: the next look is backed off (`poll_initial_s` x `poll_backoff`^n, at most
  `poll_max_s`); completed: the video (and its thumbnail and spritesheet where offered) is copied into the
  gateway's store, then the reservation settled on the seconds and size the provider reports; failed: the
  row takes the provider's message and the reservation is released. A provider that cannot be reached is
  asked again later; one that no longer knows the job (a 4xx) failed it. Past `max_job_s` a job is
  cancelled upstream and failed.
- submitting past `submit_grace_s` (its replica died during the upstream call): failed and released.
- finished but not settled (a replica died in between), or cancelled by a delete whose replica died:
  settled or released now. Settling is idempotent (accounts/guard.AccountGuard.settle_deferred), so each
  reservation is settled exactly once however often this runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets
import time
from typing import Any

from inferplex.accounts.pricing import media_cost_micros
from inferplex.errors import GatewayError, NotFound
from inferplex.families.videos import VARIANTS, VIDEOS, JobStatus, UpstreamJob, VideoRequest
from inferplex.jobs.rows import ACTIVE, Job
from inferplex.jobs.service import VideoJobs, _upstream, deferred_of, usage_of
from inferplex.providers.base import CallInfo
from inferplex.routing.pricing import price_for
from inferplex.store.backend import unreachable
from inferplex.store.leasing import look_forever
from inferplex.targets import Target

log = logging.getLogger("inferplex.jobs")

CONTENT_TYPES = {"video": "video/mp4", "thumbnail": "image/webp", "spritesheet": "image/jpeg"}
EXTENSIONS = {"video": "mp4", "thumbnail": "webp", "spritesheet": "jpg"}
_TRANSIENT = (408, 409, 425, 429)  # 4xx a provider answers for a moment, not for a job it lost


class Poller:
    def __init__(self, jobs: VideoJobs) -> None:
        self.jobs = jobs
        self.rows = jobs.rows
        self.config = jobs.config
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._forever(), name="media-jobs-poller")

    async def aclose(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _forever(self) -> None:
        await look_forever("job poller", self.tick, self.config.tick_s, lambda: self._closing)

    async def tick(self) -> int:
        """Claim the due jobs and work on each; how many were claimed."""
        token = secrets.token_hex(16)
        claimed = await self.rows.claim(token, time.time(), self.config.lease_s, self.config.batch)
        if claimed:
            await asyncio.gather(*(self._leased(job, token) for job in claimed))
        return len(claimed)

    async def _leased(self, job: Job, token: str) -> None:
        renewer = asyncio.create_task(self._renew(job.id, token))
        try:
            await self._work(job, token)
        except Exception as exc:
            if unreachable(exc) is None:
                log.exception("video job %s: the poller failed on it; it is looked at again later", job.id)
            with contextlib.suppress(Exception):  # else its lease lapses, and it is looked at then
                await self._later(job, token, job.status)
        finally:
            renewer.cancel()

    async def _renew(self, job_id: str, token: str) -> None:
        lease = self.config.lease_s
        while True:
            await asyncio.sleep(lease / 3)
            with contextlib.suppress(Exception):
                if not await self.rows.renew(job_id, token, time.time() + lease):
                    return

    async def _work(self, job: Job, token: str) -> None:
        if job.status == "submitting":
            await self._fail(job, token, "submission_interrupted", "The gateway stopped while submitting the job.")
        elif job.status in ACTIVE:
            await self._poll(job, token)
        elif job.status == "cancelled" and not job.settled:
            await self.jobs.cancelled(job)
        elif job.status == "completed" and not job.settled:
            await self._settle(job, self.jobs.target(job))
        elif job.status == "failed" and not job.settled:
            await self.jobs.release(job, self.jobs.target(job), 502)
        else:
            await self.rows.mark_settled(job.id)

    async def _poll(self, job: Job, token: str) -> None:
        target = self.jobs.target(job)
        if target is None:
            await self._fail(job, token, "deployment_gone", "The deployment that ran this job is no longer configured.")
            return
        upstream = _upstream(job)
        if time.time() - job.created_at > self.config.max_job_s:
            with contextlib.suppress(GatewayError):
                await self.jobs.adapter(target).video_cancel(upstream, target, CallInfo())
            await self._fail(job, token, "timeout", f"The job did not finish within {self.config.max_job_s:g}s.")
            return
        try:
            status = await self.jobs.adapter(target).video_status(upstream, target, CallInfo())
        except GatewayError as err:
            if 400 <= err.status < 500 and err.status not in _TRANSIENT:
                await self._fail(job, token, "upstream_error", err.message)
            else:
                log.info("video job %s: status not known now (%s); asking again later", job.id, err.message)
                await self._later(job, token, job.status)
            return
        if status.status == "completed":
            await self._complete(job, token, target, upstream, status)
        elif status.status == "failed":
            await self._fail(job, token, "video_generation_failed", status.error or "The provider failed the job.")
        else:
            await self._later(job, token, status.status, min(max(status.progress, 0), 99))

    async def _later(self, job: Job, token: str, status: str, progress: int | None = None) -> None:
        """Look again after the backed-off delay, and give the lease back."""
        c = self.config
        delay = min(c.poll_max_s, c.poll_initial_s * c.poll_backoff**job.polls) * random.uniform(0.9, 1.1)
        values: dict[str, Any] = {"next_poll_at": time.time() + delay, "polls": job.polls + 1,
                                  "claimed_by": None, "claimed_until": None}  # fmt: skip
        if status in ("queued", "in_progress") and job.status in ("queued", "in_progress"):
            values["status"] = status
        if progress is not None:
            values["progress"] = max(progress, job.progress)
        await self.rows.fenced(job.id, token, values)

    async def _complete(self, job: Job, token: str, target: Target, upstream: UpstreamJob, status: JobStatus) -> None:
        files = await self._store(job, target, upstream)
        if files is None:
            await self._fail(job, token, "content_missing", "The provider finished the job but offered no video.")
            return
        now = time.time()
        retention = self.jobs.media.config.retention_s if self.jobs.media is not None else None
        cost = self._cost(job, target, status)
        values = {
            "status": "completed", "progress": 100, "completed_at": now,
            "expires_at": None if retention is None else now + retention, "files": json.dumps(files),
            "cost_micros": cost, "polls": job.polls + 1, "next_poll_at": now, "claimed_by": None,
            "claimed_until": None,
        }  # fmt: skip
        if not await self.rows.fenced(job.id, token, values, statuses=ACTIVE):
            await self._drop(files)  # cancelled meanwhile, or another replica took over: not ours to keep
            return
        done = await self.rows.get(job.id)
        await self._settle(done or job, target, cost)

    async def _store(self, job: Job, target: Target, upstream: UpstreamJob) -> dict[str, str] | None:
        """Each variant the provider offers, streamed into the store: {variant: file id}; None without a video."""
        media = self.jobs.media
        if media is None:
            return {}
        files: dict[str, str] = {}
        adapter = self.jobs.adapter(target)
        for variant in VARIANTS:
            try:
                chunks = adapter.video_content(upstream, variant, target, CallInfo())
                stored = await media.save(
                    job.owner, chunks, filename=f"{job.id}.{EXTENSIONS[variant]}",
                    content_type=CONTENT_TYPES[variant], purpose="video",
                )  # fmt: skip
            except NotFound:
                if variant == "video":
                    await self._drop(files)
                    return None
                continue
            except BaseException:
                await self._drop(files)
                raise
            files[variant] = stored.id
        return files

    async def _drop(self, files: dict[str, str]) -> None:
        media = self.jobs.media
        if media is None:
            return
        for file_id in files.values():
            with contextlib.suppress(Exception):
                await media.delete(file_id)

    def _cost(self, job: Job, target: Target, status: JobStatus) -> int:
        """What the finished job costs: the seconds and size it reports, at the deployment's price."""
        body = VideoRequest.model_construct(model=job.model, prompt=job.prompt, seconds=job.seconds, size=job.size)
        meter = VIDEOS.meter
        assert meter is not None
        return media_cost_micros(price_for(target), *meter.used(body, status))

    async def _settle(self, job: Job, target: Target | None, cost: int | None = None) -> None:
        amount = job.cost_micros if cost is None else cost
        if self.jobs.guard is not None:
            await self.jobs.guard.settle_deferred(deferred_of(job), amount or 0, usage_of(job, target, 200))
        await self.rows.mark_settled(job.id)

    async def _fail(self, job: Job, token: str, code: str, message: str) -> None:
        values = {"status": "failed", "error_code": code, "error_message": message[:2000], "polls": job.polls + 1,
                  "next_poll_at": time.time(), "claimed_by": None, "claimed_until": None}  # fmt: skip
        if await self.rows.fenced(job.id, token, values, statuses=ACTIVE):
            log.info("video job %s failed: %s", job.id, message)
            await self.jobs.release(job, self.jobs.target(job), 502)
