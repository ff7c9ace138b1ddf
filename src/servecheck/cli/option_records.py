"""The option records: a command takes its flags as frozen records (`client: ClientOptions`,
`output: OutputOptions`, or its own, e.g. roofline's `options`), not one parameter each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from servecheck.cli.collect import collected
from servecheck.cli.run_flags import calibrate_option, output_options, output_sinks, ray_option, workers_option
from servecheck.cli.target_flags import F, target_options_as, make_target
from servecheck.wire.base import Target
from servecheck.wire.request_params import RequestParams, parse_request_params
from servecheck.runs.runner import Sink


@dataclass(frozen=True)
class ClientOptions:
    """--api, --model (context: --served-model), --api-key, --header and --timeout: how to talk to the server;
    --request-param and --extra-body: what every request carries besides servecheck's own fields."""

    api: str = "auto"
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    headers: tuple[str, ...] = field(default=(), repr=False)  # NAME:VALUE, values may be secrets
    first_token_timeout_s: float = 300.0
    workers: int | None = None  # --workers: client processes that read a batch; None: as the pre-flight chooses
    calibrate: bool = True  # --no-calibrate: False
    ray: str | None = None  # --ray: the Ray cluster whose actors read the batches; None: this machine
    request_params: tuple[str, ...] = ()  # --request-param KEY=VALUE, as typed
    extra_body: str | None = None  # --extra-body JSON, as typed

    def __post_init__(self) -> None:
        self.body_params()  # a malformed or reserved field stops the command before any server starts

    def body_params(self) -> RequestParams:
        return parse_request_params(self.request_params, self.extra_body)

    @property
    def workers_param(self) -> int | str:
        """--workers as the run's params record it: the number given, or "auto"."""
        return "auto" if self.workers is None else self.workers

    def client_params(self) -> dict[str, int | str | bool]:
        """What the run's params record of the client: --workers and the pre-flight."""
        params: dict[str, int | str | bool] = {"workers": self.workers_param, "calibrate": self.calibrate}
        if self.ray is not None:
            params["ray"] = self.ray
        return params

    def target(self, url: str) -> Target:
        return make_target(url, api=self.api, model=self.model, api_key=self.api_key, headers=self.headers,
                           first_token_timeout_s=self.first_token_timeout_s, request_params=self.body_params())


@dataclass(frozen=True)
class OutputOptions:
    """--json, --html, --db and --no-save: where a run's documents go."""

    json_path: str | None = None
    html_path: str | None = None
    db_path: str | None = None
    no_save: bool = False

    @property
    def json_to_stdout(self) -> bool:
        return self.json_path == "-"

    def sinks(self) -> tuple[Sink, ...]:
        return output_sinks(json_path=self.json_path, html_path=self.html_path, db_path=self.db_path,
                            no_save=self.no_save)


def client_record(model_flag: str = "--model", *, batches: bool = False, preflight: bool = False) -> Callable[[F], F]:
    """The target options, handed to the command as one `client: ClientOptions` (the model name under
    `model_flag`); a command that releases batches (`batches`) also takes --workers, --no-calibrate and
    --ray; one whose streams this process reads itself (`preflight`) takes --no-calibrate alone."""

    def wrap(f: F) -> F:
        f = target_options_as(collected(f, "client", ClientOptions), model_flag)
        if batches:
            return ray_option(calibrate_option(workers_option(f, auto=True)))
        return calibrate_option(f) if preflight else f

    return wrap


def output_record(f: F) -> F:
    """The output options, handed to the command as one `output: OutputOptions`."""
    return output_options(collected(f, "output", OutputOptions))
