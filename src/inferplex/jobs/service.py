"""`VideoJobs` (`services.jobs`): submit, read, list, cancel and download video jobs for their callers.

A submit is a request like any other up to the upstream call: the model resolved, the guard admits it and
reserves the worst case (every second asked for at the size asked for), and the router sends the job to one
deployment. Then, instead of settling, the admission is deferred (`accounts.guard._Admission.defer`): the
reservation stays held by the job's row (`request_id`, `reserved_micros`) and is settled by the poller when
the job completes, or released when it fails or is cancelled (jobs/poller.py). Before the upstream call the
row is inserted as `submitting`, within the concurrent-job limits (jobs/rows.py): a replica that dies during
the call leaves a row the poller fails and releases after `jobs.submit_grace_s`.

Jobs are their owner's (the caller's account, else its key): another owner's job is a 404, as is a deleted
one. A job id (`video_<random>`) says nothing about the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from inferplex.accounts.guard import AccountGuard, Deferred
from inferplex.catalog import Resolved
from inferplex.config import JobsConfig
from inferplex.context import Context
from inferplex.errors import GatewayError, InvalidRequest, NotFound, RateLimited
from inferplex.families.videos import VIDEOS, UpstreamJob, VideoAdapter, VideoRemixAdapter, VideoRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.jobs.rows import ACTIVE, Job, JobRows, Seats, new_job_id
from inferplex.media_store.files import StoredFile
from inferplex.media_store.store import MediaStore, owner_of
from inferplex.pipeline import Admission, Pipeline
from inferplex.providers.base import CallInfo
from inferplex.targets import Target

log = logging.getLogger("inferplex.jobs")


@runtime_checkable
class Deferrable(Protocol):
    """An admission whose reservation can outlive its request (the accounts guard's)."""

    reserved: int

    def defer(self, ctx: Context) -> Deferred: ...


def deferred_of(job: Job) -> Deferred:
    return Deferred(job.account_id, job.key_id, job.reserved_micros, job.request_id)


def usage_of(job: Job, target: Target | None, status: int) -> dict[str, Any]:
    """The usage row's fields a job fills in (accounts/guard.AccountGuard.settle_deferred)."""
    return {
        "model": job.model,
        "provider": target.provider.name if target else None,
        "deployment": target.key if target else job.deployment or None,
        "status": status,
        "end_user": job.end_user,
    }


class VideoJobs:
    def __init__(
        self,
        pipeline: Pipeline,
        rows: JobRows,
        guard: AccountGuard | None,
        media: MediaStore | None,
        config: JobsConfig,
    ) -> None:
        self.pipeline = pipeline
        self.rows = rows
        self.guard = guard
        self.media = media
        self.config = config

    # ---- targets ---------------------------------------------------------------------------------------

    def target(self, job: Job) -> Target | None:
        """The deployment the job was sent to, as configured now (None: no longer configured)."""
        for model in self.pipeline.catalog.models:
            if model.name == job.model:
                return next((t for t in self.pipeline.catalog.targets(model) if t.key == job.deployment), None)
        return None

    def adapter(self, target: Target) -> VideoAdapter:
        return self.pipeline.adapter(VIDEOS, target)

    # ---- submitting ------------------------------------------------------------------------------------

    async def submit(self, ctx: Context, request: GatewayRequest[VideoRequest]) -> Job:
        resolved = self.pipeline.resolve(ctx, request.body.model, request.options.provider_name, VIDEOS)

        async def call(target: Target) -> UpstreamJob:
            ctx.timings.mark_upstream_start()
            return await self.adapter(target).video_submit(request, target, ctx.info)

        return await self._start(ctx, request, resolved, call, None)

    async def remix(self, ctx: Context, video_id: str, prompt: str) -> Job:
        """A new job remixing the caller's completed `video_id` with `prompt`, on the deployment that made it."""
        source = await self.owned(ctx, video_id)
        if source.status != "completed":
            raise InvalidRequest(
                f"Video '{video_id}' cannot be remixed: its status is {public_status(source)}, not completed.",
                param="video_id",
                code="video_not_ready",
            )
        target = self.target(source)
        adapter = None if target is None else self.pipeline.adapters[target.provider.name]
        if target is None or not isinstance(adapter, VideoRemixAdapter):
            raise InvalidRequest(
                f"Video '{video_id}' cannot be remixed: its provider offers no remix.", param="video_id",
                code="unsupported_operation",
            )  # fmt: skip
        ctx.principal.require_model(source.model)
        ctx.model = target.model
        body = VideoRequest.model_validate(
            {"model": source.model, "prompt": prompt, "seconds": source.seconds, "size": source.size}
        )
        request = GatewayRequest(body)
        upstream = UpstreamJob(source.upstream_id or "", source.upstream_state or {})
        remixer = adapter

        async def call(t: Target) -> UpstreamJob:
            ctx.timings.mark_upstream_start()
            return await remixer.video_remix(upstream, request, t, ctx.info)

        return await self._start(ctx, request, Resolved(target.model, (target,)), call, source.id)

    async def _start(
        self,
        ctx: Context,
        request: GatewayRequest[VideoRequest],
        resolved: Resolved,
        call: Callable[[Target], Awaitable[UpstreamJob]],
        remixed_from: str | None,
    ) -> Job:
        admission = await self.pipeline.guard.admit(ctx, VIDEOS, resolved.model, request)
        job_id, inserted = new_job_id(), False
        try:
            reserved = admission.reserved if isinstance(admission, Deferrable) else 0
            values = self._row(ctx, request.body, resolved, job_id, reserved, remixed_from)
            full = await self.rows.insert(values, self._seats(ctx))
            if full is not None:
                raise _too_many(full, self.config)
            inserted = True
            ctx.info.idempotency_key = str(uuid.uuid5(uuid.NAMESPACE_URL, f"inferplex:{job_id}"))
            upstream = await self.pipeline.router.run(ctx, resolved, call)
            ctx.timings.mark_upstream_end()
        except BaseException as exc:
            await asyncio.shield(self._abandon(ctx, admission, job_id if inserted else None, resolved, exc))
            raise
        held = admission.defer(ctx) if isinstance(admission, Deferrable) else None
        target = ctx.target
        assert target is not None  # the router set it
        now = time.time()
        recorded = {
            "status": "queued",
            "deployment": target.key,
            "upstream_id": upstream.upstream_id,
            "upstream_state": _json(upstream.state),
            "reserved_micros": held.reserved if held else 0,
            "next_poll_at": now + self.config.poll_initial_s,
        }
        if not await self.rows.submitted(job_id, recorded):  # deleted meanwhile (and released): cancel it too
            log.info("video job %s was deleted while it was being submitted", job_id)
            with contextlib.suppress(GatewayError):
                await self.adapter(target).video_cancel(upstream, target, CallInfo())
        job = await self.rows.get(job_id)
        if job is None:
            raise NotFound(f"Video '{job_id}' was deleted.", param="video_id", code="video_not_found")
        return job

    async def _abandon(
        self, ctx: Context, admission: Admission, job_id: str | None, resolved: Resolved, exc: BaseException
    ) -> None:
        """A submit refused or failed: its row (if any) removed, its reservation released. Through the ledger's
        idempotent replay, as every job's: a caller who deleted the job while it was being submitted has
        released it already (jobs are listed from the moment their row exists), and it is released once."""
        if job_id is not None:
            with contextlib.suppress(Exception):  # else the poller fails it after `submit_grace_s`
                await self.rows.discard(job_id)
        if not isinstance(admission, Deferrable) or self.guard is None:
            await admission.settle(ctx, None, failed=True)
            return
        held = admission.defer(ctx)
        status = (
            exc.status if isinstance(exc, GatewayError) else 499 if isinstance(exc, asyncio.CancelledError) else 500
        )
        target = ctx.target
        usage = {"model": resolved.model.name, "provider": target.provider.name if target else None,
                 "deployment": target.key if target else None, "status": status, "end_user": None}  # fmt: skip
        try:
            await self.guard.settle_deferred(held, None, usage)
        except Exception as err:  # the orphan sweeper releases it (store/recovery.py)
            log.warning("video job submit %s: its reservation is not released yet (%s)", ctx.request_id, err)

    def _row(
        self,
        ctx: Context,
        body: VideoRequest,
        resolved: Resolved,
        job_id: str,
        reserved: int,
        remixed_from: str | None,
    ) -> dict[str, Any]:
        p, now = ctx.principal, time.time()
        return {
            "id": job_id, "kind": "video", "owner": owner_of(p), "account_id": p.account_id, "key_id": p.key_id,
            "model": resolved.model.name, "deployment": "", "status": "submitting", "progress": 0,
            "prompt": body.prompt, "seconds": body.seconds, "size": body.size, "end_user": body.user,
            "remixed_from": remixed_from, "request_id": ctx.request_id,
            "reserved_micros": reserved if p.account_id is not None else 0, "settled": False, "files": None,
            "created_at": now, "next_poll_at": now + self.config.submit_grace_s, "polls": 0,
        }  # fmt: skip

    def _seats(self, ctx: Context) -> Seats:
        """The limits a new job must fit: the key's, then the account's (the account's lock is the wider)."""
        p, c = ctx.principal, self.config
        checks: list[tuple[str, str, int]] = []
        if c.max_concurrent_per_key is not None:
            checks.append(("key_id", p.key_id, c.max_concurrent_per_key))
        if c.max_concurrent_per_account is not None and p.account_id is not None:
            checks.append(("account_id", p.account_id, c.max_concurrent_per_account))
        return Seats(tuple(checks))

    # ---- reading ---------------------------------------------------------------------------------------

    async def owned(self, ctx: Context, video_id: str) -> Job:
        job = await self.rows.get(video_id, owner_of(ctx.principal)) if plausible(video_id) else None
        if job is None:
            raise NotFound(f"Video with id '{video_id}' not found.", param="video_id", code="video_not_found")
        return job

    async def page(self, ctx: Context, after: str | None, limit: int, order: str) -> tuple[list[Job], bool]:
        if after is not None and not plausible(after):
            raise InvalidRequest(f"No video with id '{after}' to list after.", param="after", code="invalid_after")
        found = await self.rows.page(owner_of(ctx.principal), after, limit, order)
        if found is None:
            raise InvalidRequest(f"No video with id '{after}' to list after.", param="after", code="invalid_after")
        return found

    async def content(self, ctx: Context, video_id: str, variant: str) -> StoredFile:
        job = await self.owned(ctx, video_id)
        if job.status != "completed":
            raise InvalidRequest(
                f"Video '{video_id}' is not ready: its status is {public_status(job)}. Download it once it is "
                "completed.",
                param="video_id",
                code="video_not_ready",
            )
        file_id = job.files.get(variant)
        file = None if file_id is None or self.media is None else await self.media.get(file_id)
        if file is None:
            gone = "has expired" if file_id else f"has no {variant}"
            raise NotFound(f"Video '{video_id}' {gone}.", param="variant", code="content_not_found")
        return file

    # ---- deleting --------------------------------------------------------------------------------------

    async def delete(self, ctx: Context, video_id: str) -> None:
        """Delete the caller's job: an unfinished one is cancelled upstream where the provider can, and its
        reservation released; a finished one's files are deleted."""
        now, owner = time.time(), owner_of(ctx.principal)
        job = await self.rows.delete(video_id, owner, now, now + self.config.lease_s) if plausible(video_id) else None
        if job is None:
            raise NotFound(f"Video with id '{video_id}' not found.", param="video_id", code="video_not_found")
        if job.status in ACTIVE:
            await asyncio.shield(self.cancelled(job))
        elif self.media is not None:
            for file_id in job.files.values():
                with contextlib.suppress(Exception):
                    await self.media.delete(file_id)

    async def cancelled(self, job: Job) -> None:
        """A cancelled job: cancelled upstream (best effort: the provider may not be able to), released,
        marked settled. Run by the deleting request, and by the poller for a replica that died doing it."""
        target = self.target(job)
        if target is not None and job.upstream_id:
            try:
                done = await self.adapter(target).video_cancel(_upstream(job), target, CallInfo())
                log.info("video job %s cancelled upstream: %s", job.id, "yes" if done else "not supported")
            except GatewayError as err:
                log.warning("video job %s: the provider did not cancel it (%s)", job.id, err.message)
        await self.release(job, target, 499)

    async def release(self, job: Job, target: Target | None, status: int) -> None:
        if not job.settled and self.guard is not None:
            await self.guard.settle_deferred(deferred_of(job), None, usage_of(job, target, status))
        await self.rows.mark_settled(job.id)


def _upstream(job: Job) -> UpstreamJob:
    return UpstreamJob(job.upstream_id or "", job.upstream_state or {})


_JOB_ID = re.compile(r"video_[A-Za-z0-9]{1,34}")


def plausible(video_id: str) -> bool:
    """Whether `video_id` could be a job's id (anything else is not looked up: a 404 at once)."""
    return _JOB_ID.fullmatch(video_id) is not None


def public_status(job: Job) -> str:
    """The status OpenAI's `video` object shows: `submitting` is still queued; a cancelled job failed."""
    return {"submitting": "queued", "cancelled": "failed"}.get(job.status, job.status)


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def _too_many(column: str, config: JobsConfig) -> RateLimited:
    who, limit = (
        ("account", config.max_concurrent_per_account)
        if column == "account_id"
        else ("key", config.max_concurrent_per_key)
    )
    return RateLimited(
        f"Too many concurrent video jobs: this {who} may have {limit} unfinished at a time. Wait for one to "
        "finish, or delete one.",
        code="too_many_concurrent_jobs",
        retry_after=config.poll_initial_s,
    )
