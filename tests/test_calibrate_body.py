"""The calibrate document is written from its body record (issue 25): `jobs.calibrate.CalibrateJob`
under `runs.runner.run_job`, `{"calibration": Calibration.body()}` encoded by the codec.

The writer this replaces (`"calibration": result.to_dict()` in cli/calibrate.py at 2f13478) gave the
same JSON, byte for byte, on the same calibrations for 11 runs (1 to 8 streams, gaps of 1 to 50 ms,
10 to 20 events, one and two client processes, --json - and a path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.cli.main import main
from servecheck.jobs.calibrate import CalibrateJob
from servecheck.model.bodies.calibrate import CalibrateBody
from servecheck.model.client import Calibration
from servecheck.model.codec import decode
from written import fields_of

KEYS = {"streams", "gap_ms", "events", "workers", "stamp_delay_p50_ms", "stamp_delay_p99_ms", "stamp_delay_max_ms",
        "stamp_delay_frac", "dispatch_skew_ms", "error_ms", "loop_lag_p99_ms", "loop_lag_max_ms", "client_bound"}


def calibration(p99_ms: float, *, lag: bool = True) -> Calibration:
    return Calibration(streams=4, gap_ms=20.0, events=40, stamp_delay_p50_ms=0.2, stamp_delay_p99_ms=p99_ms,
                       stamp_delay_max_ms=3.0, dispatch_skew_ms=0.4, loop_lag_p99_ms=1.0 if lag else None,
                       loop_lag_max_ms=2.0 if lag else None, workers=2)


def test_a_calibration_writes_every_figure_and_no_clock_fields_on_one_machine() -> None:
    doc = fields_of(CalibrateJob(4, 20.0, 10, 2).document(calibration(0.9)))
    assert set(doc) == {"command", "simulated", "complete", "calibration"} and set(doc["calibration"]) == KEYS
    cal = doc["calibration"]
    assert (cal["streams"], cal["gap_ms"], cal["events"], cal["workers"]) == (4, 20.0, 40, 2)
    assert cal["stamp_delay_frac"] == pytest.approx(0.9 / 20.0) and cal["error_ms"] == pytest.approx(1.3)
    assert cal["client_bound"] is None


def test_a_missing_lag_and_a_client_bound_are_written_as_values() -> None:
    cal = fields_of(CalibrateJob(4, 20.0, 10).document(calibration(5.0, lag=False)))["calibration"]
    assert cal["loop_lag_p99_ms"] is None and cal["loop_lag_max_ms"] is None and "loop_lag_p99_ms" in cal
    assert cal["client_bound"].startswith("the client is the bottleneck at 4 streams")
    assert decode(CalibrateBody, {"calibration": cal}).calibration == calibration(5.0, lag=False).body()


def test_the_cli_writes_the_envelope_and_the_body(tmp_path: Path) -> None:
    out = tmp_path / "cal.json"
    with pytest.raises(SystemExit) as info:
        main(["calibrate", "--streams", "2", "--gap-ms", "20", "--events", "10", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert set(doc) == {"schema_version", "command", "servecheck_version", "created_at", "environment", "params",
                        "simulated", "complete", "calibration"}
    assert doc["params"] == {"streams": 2, "gap_ms": 20.0, "events": 10, "workers": 1} and doc["complete"] is True
    assert set(doc["calibration"]) == KEYS and info.value.code == (3 if doc["calibration"]["client_bound"] else 0)
