"""The `calibrate` document's body (docs/schema.md); registered in BODIES below. Its `Calibration`
lives in `common`: the measuring commands' pre-flight checks carry the same record."""

from __future__ import annotations

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import Calibration
from servecheck.model.codec import record


@record
class CalibrateBody:
    calibration: Calibration | None = None


BODIES["calibrate"] = CalibrateBody
