"""The driver seam: the real `LoadDriver` and the scripted `FakeDriver` both satisfy `load.protocol.Driver`,
method for method, and the fake's timeline is the one its laws describe, the same every time."""

from __future__ import annotations

import inspect
import random

import pytest

from servecheck.wire.base import Target
from servecheck.experiments.staircase import run_staircase
from servecheck.load.driver import LoadDriver
from servecheck.load.lanes import LaneDriver
from servecheck.load.fake import FakeDriver, FakeServer, flat
from servecheck.load.prompts import make_requests
from servecheck.load.protocol import Driver, Tokenizer
from servecheck.model.records import NS_PER_S, GenRequest

# Exactly what the experiments call on a driver; a new call must be added to the protocol first.
PROTOCOL_METHODS = {"detect", "tokenize", "generate", "run_batch", "get_json", "get_text", "probe", "client_lateness"}


def _drivers() -> list[object]:
    return [LoadDriver(Target(url="http://127.0.0.1:9")), FakeDriver(),
            LaneDriver(Target(url="http://127.0.0.1:9"), workers=2)]


def test_the_protocol_holds_exactly_the_calls_experiments_make() -> None:
    assert {name for name in dir(Driver) if not name.startswith("_")} == PROTOCOL_METHODS


@pytest.mark.parametrize("driver", _drivers(), ids=["LoadDriver", "FakeDriver", "LaneDriver"])
def test_both_drivers_satisfy_the_protocol(driver: object) -> None:
    assert isinstance(driver, Driver) and isinstance(driver, Tokenizer)


@pytest.mark.parametrize("cls", [LoadDriver, FakeDriver, LaneDriver], ids=["LoadDriver", "FakeDriver", "LaneDriver"])
@pytest.mark.parametrize("name", sorted(PROTOCOL_METHODS))
def test_every_method_has_the_protocols_signature(cls: type, name: str) -> None:
    """isinstance only checks that the names exist: the parameters, their kinds and defaults, and
    that each is a coroutine function must match too."""
    wanted, got = getattr(Driver, name), getattr(cls, name)
    assert inspect.iscoroutinefunction(got), f"{cls.__name__}.{name} is not async"
    shape = [(p.name, p.kind, p.default) for p in inspect.signature(wanted).parameters.values()]
    assert [(p.name, p.kind, p.default) for p in inspect.signature(got).parameters.values()] == shape


SERIAL = FakeServer(slots=1, ttft_s=flat(0.1), token_s=flat(0.01))


async def test_a_serial_fake_finishes_a_batch_one_request_after_another() -> None:
    driver = FakeDriver(SERIAL)
    reqs = [GenRequest(index=i, prompt="p", nonce=str(i), max_tokens=11) for i in range(3)]
    batch = await driver.run_batch(reqs)
    assert batch.finish_s() == pytest.approx([0.2, 0.4, 0.6])  # 0.1 s to the first token, 10 steps of 0.01 s
    assert batch.in_flight == 3 and driver.batches == [3]


async def test_a_batching_fake_decodes_together_at_the_laws_rate() -> None:
    driver = FakeDriver(FakeServer(ttft_s=flat(0.1), token_s=lambda n: 0.01 * n))
    reqs = [GenRequest(index=i, prompt="p", nonce=str(i), max_tokens=11) for i in range(2)]
    batch = await driver.run_batch(reqs)
    ends = [(r.end_ns or 0) - batch.release_ns for r in batch.records]
    assert ends[0] == pytest.approx(0.3 * NS_PER_S) and ends[1] == pytest.approx(0.3 * NS_PER_S, abs=20_000)


async def test_the_fake_is_deterministic_and_scripts_a_ctrl_c() -> None:
    async def once() -> list[float]:
        result = await run_staircase(FakeDriver(SERIAL), ns=[1, 2], tokens=8, prompt_tokens=16, reps=1,
                                     rng=random.Random(3))
        return [t for mb in result.batches for t in mb.batch.finish_s()]

    assert await once() == await once()
    with pytest.raises(KeyboardInterrupt):
        await run_staircase(FakeDriver(FakeServer(ctrl_c_at_call=2)), ns=[1], tokens=8, prompt_tokens=16, reps=1,
                            rng=random.Random(3))


async def test_prompts_are_built_against_the_fake_without_a_tokenizer() -> None:
    reqs = await make_requests(FakeDriver(), 3, 32, 8, random.Random(0))
    assert len({r.nonce for r in reqs}) == 3 and all(r.prompt_tokens is None for r in reqs)
