"""The findings every analysis names, one vocabulary: a warning, or a reason a run is invalid, as data
(what was wrong, as a reason, and what to do about it), with the requests it names; and how a
finding is written into a document (`model.bodies.common.Finding`)."""

from __future__ import annotations

from dataclasses import dataclass

from servecheck.model.bodies import common
from servecheck.model.reason import Reason, Text


@dataclass(frozen=True, slots=True)
class RequestRef:
    """Names one request in a run so the user can find it in the JSON."""

    n: int
    rep: int
    index: int
    nonce: str
    detail: Reason

    def record(self) -> common.RequestRef:
        return common.RequestRef(n=self.n, rep=self.rep, index=self.index, nonce=self.nonce, detail=self.detail)


@dataclass(frozen=True, slots=True)
class Finding:
    """What was wrong (a reason, or a message a lower layer put, e.g. the pre-flight's) and what to do
    (`hint`). `code` names the kind where a command keys its findings by one (the staircase does);
    `requests`, where given (even empty), lists the requests it names in the document."""

    message: Text
    hint: Text | None = None
    code: str | None = None
    requests: tuple[RequestRef, ...] | None = None

    def record(self) -> common.Finding:
        requests = None if self.requests is None else tuple(r.record() for r in self.requests)
        return common.Finding(code=self.code, message=self.message, hint=self.hint, requests=requests)
