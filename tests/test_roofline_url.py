"""`roofline --url` measures single-stream decode tok/s on a simulated server started here (port 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.cli.main import main
from servecheck.sim import SimConfig, sim_in_thread

TOKEN_S = 0.005  # the simulator decodes one token every 5 ms: 200 tok/s


def test_roofline_url_measures_decode_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    with sim_in_thread(SimConfig(mode="serial", token_s=TOKEN_S, per_seq_s=0.0, prompt_token_s=0.0)) as sim:
        with pytest.raises(SystemExit) as exc:
            main(["roofline", "--bytes-per-token", "1GB", "--url", sim.url, "--tokens", "40", "--bandwidth", "400",
                  "--timeout", "30", "--no-save", "--json", str(out)])
    assert exc.value.code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    # wide margins: a loaded machine only slows the stream down, and never by more than half here
    assert 100 <= doc["tok_s"] <= 1.2 / TOKEN_S
    assert doc["measurement"]["tokens"] == 40
    assert doc["simulated"] is True
    assert doc["utilization"][0] == pytest.approx(doc["tok_s"] * 1.0 / 400)
    assert "measured" in doc["tok_s_source"]


def test_ctrl_c_during_the_probe_keeps_the_measured_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import servecheck.jobs.roofline as roofline_cli

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(roofline_cli, "resolve_bandwidth", interrupted)
    out = tmp_path / "r.json"
    with sim_in_thread(SimConfig(mode="serial", token_s=TOKEN_S, per_seq_s=0.0, prompt_token_s=0.0)) as sim:
        with pytest.raises(SystemExit) as exc:
            main(["roofline", "--bytes-per-token", "1GB", "--url", sim.url, "--tokens", "20", "--timeout", "30",
                  "--no-save", "--json", str(out)])
    assert exc.value.code == 130
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["tok_s"] > 0 and doc["measurement"]["tokens"] == 20
    assert doc["simulated"] is True


def test_url_with_a_model_counts_the_kv_cache_at_the_streams_mean_context(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from test_audit_fixtures import write_gguf
    from test_audit_gguf import EMBD, LAYERS, MOE_KV, moe_tensors

    from servecheck.audit import audit_model

    model = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    out = tmp_path / "r.json"
    with sim_in_thread(SimConfig(mode="serial", token_s=TOKEN_S, per_seq_s=0.0, prompt_token_s=0.0)) as sim:
        with pytest.raises(SystemExit) as exc:
            main(["roofline", str(model), "--url", sim.url, "--tokens", "20", "--bandwidth", "400", "--timeout", "30",
                  "--no-save", "--json", str(out)])
    assert exc.value.code == 0
    doc = json.loads(out.read_text())
    context = 32 + 20 // 2  # prompt tokens + half the decoded tokens
    head_dim = EMBD // 4
    kv = (context + 1) * LAYERS * 1 * (head_dim + head_dim) * 2
    assert doc["audit"]["kv_bytes_per_token"] == kv
    assert doc["bytes_per_token"] == audit_model(model).bytes_per_token + kv
    assert any(f"{context} tokens" in n for n in doc["notes"])


def test_a_failed_measuring_request_is_an_error_not_a_usage_mistake(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_in_thread(SimConfig(mode="serial", token_s=0.001, n_ctx=16, default_max_tokens=8)) as sim:
        with pytest.raises(SystemExit) as exc:
            main(["roofline", "--bytes-per-token", "1GB", "--url", sim.url, "--tokens", "20", "--bandwidth", "400",
                  "--no-save"])
    err = capsys.readouterr().err
    assert exc.value.code == 1
    assert (err.startswith("Error: the measuring request failed") and "n_ctx" in err
            and len(err.strip().splitlines()) == 1)


def test_a_stream_cut_short_by_eos_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    cfg = SimConfig(mode="serial", token_s=0.001, per_seq_s=0.0, prompt_token_s=0.0, eos_ceiling=True,
                    eos_short_fraction=1.0, eos_short_range=(0.5, 0.5))
    with sim_in_thread(cfg) as sim:
        with pytest.raises(SystemExit) as exc:
            main(["roofline", "--bytes-per-token", "0.1GB", "--url", sim.url, "--tokens", "40", "--bandwidth", "400",
                  "--timeout", "30", "--no-save", "--json", str(out)])
    assert exc.value.code == 0
    doc = json.loads(out.read_text())
    assert doc["measurement"]["tokens"] == 20
    assert any("stopped at 20 of 40 tokens" in n for n in doc["notes"])


def test_the_url_rate_goes_through_the_driver_seam_and_is_exact_on_a_scripted_server(tmp_path: Path) -> None:
    """No CLI module opens a driver: a scripted server handed to main measures 5 ms a token exactly,
    199 gaps after the first of 200 tokens: 200 tok/s, and utilization 200 x 1 GB / 400 GB/s = 0.5."""
    from servecheck.load.fake import FakeDriver, FakeServer, flat

    out = tmp_path / "r.json"
    opened: list[object] = []

    def open_driver(target: object) -> FakeDriver:
        opened.append(target)
        return FakeDriver(FakeServer(slots=1, token_s=flat(0.005)))

    with pytest.raises(SystemExit) as exc:
        main(["roofline", "--bytes-per-token", "1GB", "--url", "http://127.0.0.1:9", "--tokens", "200",
              "--bandwidth", "400", "--no-save", "--json", str(out)], open_driver=open_driver)
    assert exc.value.code == 0 and len(opened) == 1
    doc = json.loads(out.read_text())
    assert doc["tok_s"] == pytest.approx(200.0, rel=1e-6)
    assert doc["utilization"] == pytest.approx([0.5, 0.5], rel=1e-6)
    assert doc["measurement"]["tokens"] == 200 and doc["simulated"] is True
