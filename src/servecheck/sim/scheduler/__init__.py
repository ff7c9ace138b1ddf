"""The simulator's scheduler: one asyncio task that decides when every token is produced.

It keeps an ideal timeline in perf_counter nanoseconds and sleeps until each scheduled event
(never spins). Back-to-back steps are chained on the timeline, not on when the loop happened to
wake, so a late wake-up on a loaded machine does not slow the simulated server down; a stall longer
than MAX_CATCHUP_NS is lost time, as it would be on a real machine.

Modes (see SimConfig):
  serial / slots=K / batched   up to capacity (1, K, unlimited) requests admitted, the rest queue
                               FIFO; admitted requests decode together, one token each per step of
                               (token_s + per_seq_s x decoding + context_token_s x their context
                               tokens) x heat. The prefill law: by default new prompts are
                               prefilled in a step of their own that stalls decoding (blocking);
                               with prefill_chunk K a step carries at most K prompt tokens beside
                               the running streams' next tokens (chunked, as llama.cpp's n_batch);
                               with prefill_isolated prompts are prefilled on a track of their own
                               and decoding never waits (disaggregated).
                               A request carrying a field of serialize_on is
                               admitted only into an empty server, and nothing joins
                               it until it is done (mlx-lm and its seed).
  pipelined                    two stages that overlap: one request prefills while another
                               decodes; decode never batches (one sequence at a time).

Layout (issue 42: one module per policy family beside the shared step loop):
  jobs.py      Job, its events (TokenEvent, JobDone, JobAborted), JobTimings, SchedulerStats, _Step
  cache.py     PrefixCache
  core.py      SchedulerCore: the state, the step law, admission and the shared steps
  batch.py     the policy of serial / slots=K / batched, plain functions over SchedulerCore
  pipeline.py  the policy of pipelined, plain functions over SchedulerCore
  loop.py      Scheduler(SchedulerCore): the event loop, the dispatch by mode, submit/cancel/gauges
Every public name the single module scheduler.py defined is importable from here as before.
"""

from __future__ import annotations

from servecheck.sim.scheduler.cache import PREFIX_CACHE_ENTRIES, PrefixCache
from servecheck.sim.scheduler.core import MAX_CATCHUP_NS, Clock, LogFn, SchedulerCore
from servecheck.sim.scheduler.jobs import (
    Job,
    JobAborted,
    JobDone,
    JobEvent,
    JobTimings,
    SchedulerStats,
    TokenEvent,
)
from servecheck.sim.scheduler.loop import Scheduler

__all__ = [
    "MAX_CATCHUP_NS",
    "PREFIX_CACHE_ENTRIES",
    "Clock",
    "Job",
    "JobAborted",
    "JobDone",
    "JobEvent",
    "JobTimings",
    "LogFn",
    "PrefixCache",
    "Scheduler",
    "SchedulerCore",
    "SchedulerStats",
    "TokenEvent",
]
