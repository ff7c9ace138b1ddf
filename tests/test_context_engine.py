"""`servecheck context --model` on the real llama.cpp engine serving the tiny generated model with 8192
tokens per slot: decode falls with depth, and the KV bookkeeping is 2 x layers x KV heads x head size x
2 bytes (f16) per token of context. The direction and the arithmetic are asserted, never a timing.

The ground truth is the model this test generates (`engine.llamacpp.model.SIZES["tiny"]`: 8 layers, 8 KV heads
of 64) and the server it starts. About a minute on a busy 2-core machine, most of it the 6144-token prefill."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from servecheck.cli import main as main_mod
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.llamacpp.model import SIZES
from servecheck.engine.process import LlamaServer, live_pids

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

DEPTHS = (0, 2048, 6144)
TOKENS = 64
CTX_PER_SLOT = 8192


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    return provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))


def test_decode_falls_with_depth_and_the_kv_bookkeeping_holds(engine: LocalEngine, tmp_path: Path, capsys,
                                                              first_try: Any, request: pytest.FixtureRequest) -> None:
    out = tmp_path / "context.json"

    def attempt(_: int) -> tuple[int, dict]:
        with LlamaServer(engine.binary, engine.model_path, ctx_per_slot=CTX_PER_SLOT,
                         log_path=tmp_path / "server.log") as url:
            with pytest.raises(SystemExit) as info:
                # A given bandwidth keeps the test about the arithmetic (no probe on a machine others are timing).
                main_mod.main(["context", url, "--depths", ",".join(map(str, DEPTHS)), "--tokens", str(TOKENS),
                               "--model", str(engine.model_path), "--bandwidth", "5-50", "--api", "llamacpp",
                               "--timeout", "300", "--no-save", "--json", str(out)])
        return int(info.value.code or 0), json.loads(out.read_text())

    # One run, as a user's: no retry; the effect it read is recorded as a first try (tests/conftest.py).
    code, doc = first_try.record_tries(request.node.nodeid, "falls", attempt, lambda got: got[1]["effect"])
    # 3 only when the fall stayed within the drift a busy machine showed; never an invalid point here
    assert code in (0, 3)
    assert doc["valid"] is True, doc["invalid"]
    assert doc["cache_prompt"] is False and doc["server"]["n_ctx_per_request"] == CTX_PER_SLOT
    points = {p["depth"]: p for p in doc["points"]}
    assert sorted(points) == list(DEPTHS) and not doc["skipped"]
    for depth in DEPTHS[1:]:
        assert points[depth]["context_tokens"] == depth  # the server's tokenizer hit the length
        sample = points[depth]["samples"][0]
        assert sample["reported_prompt_tokens"] >= depth  # not truncated (a BOS may add one)
    assert all(p["tokens"] == TOKENS for p in points.values())
    # the direction: decode at the deepest depth is slower than at the shallowest
    assert points[DEPTHS[-1]]["decode_tok_s"] < points[0]["decode_tok_s"]
    assert doc["effect"] in ("falls", "inconclusive")

    spec = SIZES["tiny"]
    head = spec.n_embd // spec.n_head
    per_context_token = 2 * spec.n_layer * spec.n_head * head * 2  # K and V, every layer, every KV head, f16
    m = doc["model_bytes"]
    assert m["kv_layers"] == spec.n_layer and m["kv_heads"] == spec.n_head and m["key_length"] == head
    assert m["kv_bytes_per_context_token"] == per_context_token
    rows = {r["depth"]: r for r in doc["roofline"]}
    for depth, r in rows.items():
        mean = points[depth]["context_tokens"] + TOKENS / 2
        assert r["kv_bytes_per_token"] == round((mean + 1) * per_context_token)
        assert r["bytes_per_token"] == m["weights_bytes_per_token"] + r["kv_bytes_per_token"]
        assert r["predicted_tok_s"] > 0 and r["decode_tok_s"] == points[depth]["decode_tok_s"]
    assert rows[DEPTHS[-1]]["predicted_tok_s"] < rows[0]["predicted_tok_s"]  # more bytes, lower ceiling

    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("depth"))
    assert "decode tok/s" in header and "predicted" in header  # measured and predicted side by side
    assert any(line.startswith("short context") for line in printed.splitlines())
    assert live_pids() == []
