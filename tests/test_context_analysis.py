"""`analysis.context` with hand-built numbers: KV bookkeeping, the sweep's order, drift-corrected ratios,
the context-effect verdict and the roofline at depth."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servecheck.analysis import context as ctx
from servecheck.analysis.roofline import Span
from servecheck.model.reason import Reason
from written import as_reason

F16, Q8_0 = 2.0, 34 / 32


def dense(layers: int, kv_heads: int, head: int, element: float = F16, window: int | None = None,
          weights: int = 1_000_000, state: int = 0) -> ctx.ModelBytes:
    return ctx.ModelBytes(weights, state, tuple(ctx.KVLayer(kv_heads, head, head, window) for _ in range(layers)),
                          element)


# ---------------------------------------------------------------- KV bookkeeping


@pytest.mark.parametrize(
    ("layers", "kv_heads", "head", "element"),
    [(32, 8, 128, F16), (2, 1, 64, F16), (28, 4, 128, Q8_0), (80, 8, 128, 4.0), (1, 1, 1, 0.5625)],
)
def test_kv_bytes_per_context_token_is_2_layers_heads_head_size_element(layers, kv_heads, head, element):
    model = dense(layers, kv_heads, head, element)
    assert ctx.kv_bytes_per_context_token(model) == pytest.approx(2 * layers * kv_heads * head * element)


@pytest.mark.parametrize("depth", [0, 1, 2048, 32768])
def test_kv_read_bytes_grows_by_one_slope_per_token_of_context(depth):
    model = dense(32, 8, 128)  # Llama-3-8B shape: 131072 B (128 KiB) per token of context in f16
    slope = 2 * 32 * 8 * 128 * 2
    assert ctx.kv_bytes_per_context_token(model) == slope == 131072
    # every position in reach is read, and the new token's K/V written once
    assert ctx.kv_read_bytes(model, depth) == (depth + 1) * slope


def test_sliding_window_layers_hold_at_most_their_window():
    layers = (ctx.KVLayer(1, 64, 64, window=64), ctx.KVLayer(1, 64, 64, window=None))
    model = ctx.ModelBytes(0, 0, layers, F16)
    per_position = 1 * (64 + 64) * 2
    assert ctx.kv_read_bytes(model, 10) == 2 * 11 * per_position  # inside the window: both read everything
    assert ctx.kv_read_bytes(model, 1000) == (64 + 1 + 1000 + 1) * per_position


def test_recurrent_layers_hold_no_kv_and_their_state_does_not_grow():
    # a hybrid: 1 attention layer of 4, the recurrent state read and written (already x2) every token
    model = ctx.ModelBytes(weights_bytes=500, state_bytes=2 * 7000, kv_layers=(ctx.KVLayer(1, 64, 64),),
                           kv_element_bytes=F16)
    assert ctx.kv_bytes_per_context_token(model) == 256
    assert ctx.bytes_per_token(model, 0) == 500 + 14000 + 256
    assert ctx.bytes_per_token(model, 100) - ctx.bytes_per_token(model, 0) == 100 * 256


def test_mean_context_is_the_prompt_plus_half_the_output():
    assert ctx.mean_context(8192, 128) == 8256


# ---------------------------------------------------------------- the design


@pytest.mark.parametrize(
    ("depths", "reps", "plan"),
    [
        ([0, 2048, 8192], 1, [0, 2048, 8192, 0]),
        ([0, 2048, 8192], 2, [0, 2048, 8192, 8192, 2048, 0]),
        ([0, 2048, 8192], 3, [0, 2048, 8192, 8192, 2048, 0, 0, 2048, 8192, 0]),
        ([100, 200], 1, [100, 200, 100]),
    ],
)
def test_plan_brackets_the_run_with_the_shallowest_depth(depths, reps, plan):
    assert ctx.plan_order(depths, reps) == plan


@pytest.mark.parametrize(
    ("depths", "problem"),
    [([0], "context.too_few_depths"), ([2048], "context.too_few_depths"), ([], "context.too_few_depths"),
     ([0, 8192, 2048], "context.depths_not_increasing"), ([0, 2048, 2048], "context.depths_not_increasing"),
     ([-1, 10], "context.negative_depth")],
)
def test_bad_depths(depths, problem):
    reason = ctx.check_depths(depths)
    assert reason is not None and reason.code == problem and reason["depths"] == tuple(depths)


def test_good_depths():
    assert ctx.check_depths([0, 2048, 8192, 32768]) is None


# ---------------------------------------------------------------- ratios, drift, verdict


def law_rate(depth: int, base_s: float = 0.010, per_ctx_s: float = 1e-6) -> float:
    return 1 / (base_s + per_ctx_s * depth)


def samples_for(plan: list[int], rate, *, step_s: float = 1.0, tokens: int = 100, over=None) -> list[ctx.Sample]:
    """One sample per planned depth, each decoding at rate(depth, t) with its middle at t = order x step_s."""
    out: list[ctx.Sample] = []
    seen: dict[int, int] = {}
    for order, depth in enumerate(plan):
        t = order * step_s
        r = rate(depth, t)
        rep = seen.get(depth, 0)
        seen[depth] = rep + 1
        fields = {"prompt_tokens": max(depth, 2), "reported_prompt_tokens": max(depth, 2) + 1, "tokens": tokens,
                  "tokens_requested": tokens, "ttft_s": 0.01 + depth * 1e-5, "decode_s": (tokens - 1) / r, "mid_s": t}
        fields.update((over or {}).get(depth, {}))
        out.append(ctx.Sample(depth=depth, rep=rep, order=order, **fields))
    return out


DEPTHS = [0, 2048, 8192]


def test_ratios_follow_the_law_without_drift():
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), lambda d, t: law_rate(d)), DEPTHS)
    by = {p.depth: p for p in a.points}
    for d in DEPTHS:
        assert by[d].decode_tok_s == pytest.approx(law_rate(d))
        assert by[d].ratio == pytest.approx(law_rate(d) / law_rate(0))
    assert by[0].ratio == pytest.approx(1.0)
    assert a.effect == "falls" and a.valid and not a.warnings
    assert by[2048].prefill_tok_s == pytest.approx(2048 / (0.01 + 2048e-5))


@pytest.mark.parametrize("heat_per_s", [0.05, -0.03])
def test_a_steady_drift_is_corrected_and_never_called_a_context_effect(heat_per_s):
    """Step time grows (or shrinks) linearly with time, depth has no effect: the corrected ratios are 1,
    the drift is named, and the verdict is not 'falls'."""
    rate = lambda d, t: 1 / (0.010 * (1 + heat_per_s * t))  # noqa: E731
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), rate), DEPTHS)
    assert all(p.ratio == pytest.approx(1.0) for p in a.points)
    raw = {p.depth: p.ratio_raw for p in a.points}
    assert raw[8192] is not None and raw[2048] is not None
    assert abs(raw[8192] - raw[2048]) > 0.02  # uncorrected, the drift would pose as a change with depth
    assert a.effect == "inconclusive"
    assert a.drift is not None and a.drift.change == pytest.approx(rate(0, 3) / rate(0, 0) - 1)
    assert a.warnings
    message = a.warnings[0].message
    assert isinstance(message, Reason) and message.code == "context.drift"
    assert message["change"] == pytest.approx(a.drift.change)
    assert isinstance(a.warnings[0].hint, Reason) and a.warnings[0].hint.code == "context.drift_hint"


def test_law_and_drift_together_still_read_the_law():
    rate = lambda d, t: 1 / ((0.010 + 2e-6 * d) * (1 + 0.02 * t))  # noqa: E731
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), rate), DEPTHS)
    by = {p.depth: p for p in a.points}
    assert by[8192].ratio == pytest.approx(0.010 / (0.010 + 2e-6 * 8192))
    assert a.effect == "falls"


def test_flat_when_depth_changes_nothing_on_a_quiet_run():
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), lambda d, t: 100.0), DEPTHS)
    assert a.effect == "flat" and not a.warnings


def test_a_fall_within_the_drift_is_inconclusive():
    # 6% fall at depth, 10% drift in the shallowest: the correction could be wrong by that much
    def rate(d, t):
        if d == 0:
            return 100.0 * (1 - 0.10 * t / 3)
        return 94.0 * (1 - 0.10 * t / 3)
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), rate), DEPTHS)
    assert a.effect == "inconclusive" and a.effect_reason.code == "context.within_drift"


def test_a_truncating_server_is_named_and_its_point_invalid():
    over = {8192: {"reported_prompt_tokens": 4096}}
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), lambda d, t: law_rate(d), over=over), DEPTHS)
    by = {p.depth: p for p in a.points}
    assert not a.valid and not by[8192].valid and by[8192].ratio is None
    m = a.invalid[0].message
    assert isinstance(m, Reason)
    assert (m.code, m["depth"], m["reported"], m["sent"]) == ("context.truncated", 8192, 4096, 8192)
    assert by[2048].valid and by[2048].ratio is not None


def test_one_special_token_fewer_is_not_truncation():
    over = {2048: {"reported_prompt_tokens": 2047}}
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), lambda d, t: law_rate(d), over=over), DEPTHS)
    assert a.valid


@pytest.mark.parametrize(
    ("over", "code", "values"),
    [({"tokens": 80}, "context.off_length", {"tokens": 80, "requested": 100}),
     ({"error": "timeout"}, "context.request_failed", {"error": "timeout"})],
)
def test_off_length_and_failed_points_are_invalid(over, code, values):
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), lambda d, t: law_rate(d), over={2048: over}), DEPTHS)
    assert not a.valid
    m = a.invalid[0].message
    assert isinstance(m, Reason) and m.code == code
    assert {k: m[k] for k in values} == values


# ---------------------------------------------------------------- roofline at depth


def point(depth: int, rate: float, ratio: float, context: int | None = None) -> ctx.DepthAnalysis:
    return ctx.DepthAnalysis(depth, context if context is not None else depth, 128, 0.1, 1000.0, rate, (rate, rate),
                             ratio, ratio, True, (), ())


def test_constant_utilization_predicts_the_fall_the_bytes_explain():
    model = dense(32, 8, 128, weights=4_000_000_000)  # 4 GB of weights, 131072 B of KV per token of context
    b0 = ctx.bytes_per_token(model, ctx.mean_context(0, 128))
    b32k = ctx.bytes_per_token(model, ctx.mean_context(32768, 128))
    rate32 = 50.0 * b0 / b32k  # exactly what the bytes explain
    rows = ctx.roofline_at_depth([point(0, 50.0, 1.0), point(32768, rate32, rate32 / 50)], model, 128, Span(100, 120))
    assert [r.depth for r in rows] == [0, 32768]
    assert rows[1].bytes_per_token == b32k == 4_000_000_000 + (32768 + 64 + 1) * 131072
    assert rows[1].predicted_tok_s == pytest.approx(rate32)
    assert rows[1].measured_over_predicted == pytest.approx(1.0) and not rows[1].steeper
    assert rows[0].achieved_gb_s == pytest.approx(50.0 * b0 / 1e9)
    assert rows[0].utilization is not None and rows[0].utilization.lo == pytest.approx(rows[0].achieved_gb_s / 120)
    assert rows[1].achieved_gb_s == pytest.approx(rows[0].achieved_gb_s)  # constant utilization: the same bandwidth
    assert ctx.steeper_note(rows) is None


def test_a_fall_steeper_than_the_bytes_is_named():
    model = dense(32, 8, 128, weights=4_000_000_000)
    rows = ctx.roofline_at_depth([point(0, 50.0, 1.0), point(32768, 20.0, 0.4)], model, 128, None)
    assert rows[1].steeper and rows[1].utilization is None
    note = ctx.steeper_note(rows)
    assert note is not None and (note.code, note["depth"]) == ("context.steeper", 32768)


def test_invalid_points_are_left_out_of_the_roofline():
    model = dense(2, 1, 64)
    bad = ctx.DepthAnalysis(2048, 2048, 128, 0.1, 1.0, 40.0, (40.0, 40.0), None, None, False,
                            ("truncated",), ())  # type: ignore[arg-type]  # a problem as text: only invalidity counts
    rows = ctx.roofline_at_depth([point(0, 50.0, 1.0), bad], model, 128, None)
    assert [r.depth for r in rows] == [0]


def test_a_stream_read_late_is_kept_where_the_effect_cannot_turn_on_it():
    """Decode falls 45% at 8192 tokens; one deep stream read 10 ms late (of a 1.8 s decode) cannot turn
    that, so it stays, and a warning says so. The same stream read 1.5 s late could make the deepest
    depth as fast as the shallowest: it is a problem of its point, and the run is invalid."""
    plan = ctx.plan_order(DEPTHS, 1)
    base = samples_for(plan, lambda d, t: law_rate(d))

    def late(ms: float) -> list[ctx.Sample]:
        return [replace(s, client_late_ms=ms) if s.depth == 8192 else s for s in base]

    kept = ctx.analyse_context(late(10.0), DEPTHS)
    assert kept.effect == "falls" and kept.valid and kept.late_kept
    assert any(as_reason(w.message).code == "context.late_kept" for w in kept.warnings)
    lost = ctx.analyse_context(late(1500.0), DEPTHS)
    assert not lost.late_kept and not lost.valid
    deep = next(p for p in lost.points if p.depth == 8192)
    assert not deep.valid and deep.problems[0].code == "context.client_late" and deep.problems[0]["late_ms"] == 1500


def test_a_stream_a_hop_held_and_a_shallowest_depth_without_a_decode_leave_the_effect_open():
    """The shallowest depth timed no decode interval (so no ratio and no drift), and a hop held a deep
    stream longer than its effect could stand: both are problems of their points, and no effect is read."""
    over = {0: {"decode_s": None}, 8192: {"hop_held_ms": 1500.0}}
    a = ctx.analyse_context(samples_for(ctx.plan_order(DEPTHS, 1), lambda d, t: law_rate(d), over=over), DEPTHS)
    codes = {as_reason(f.message).code for f in a.invalid}
    assert {"context.no_decode_interval", "context.hop_held"} <= codes
    assert a.effect == "inconclusive" and a.effect_reason.code == "context.too_few_valid"
    assert (a.effect_reason["hop_held"], a.effect_reason["client_late"]) == (True, False)
