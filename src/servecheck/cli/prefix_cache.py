"""`servecheck prefix-cache URL`: the same long prompt several times, then a control of equal length:
does the prefix cache work, or was the flag accepted and inert?"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from servecheck import exitcodes
from servecheck.cli.common import SIMULATED_BANNER, Recorder, make_target, output_options, say, target_options
from servecheck.cli.context import AppContext
from servecheck.cli.serve import Served, render_audit, resolve_url, serve_option, served
from servecheck.client.base import Target
from servecheck.envinfo import environment
from servecheck.experiments.prefix_cache import DEFAULT_MAX_TOKENS, PrefixCacheResult, check_params, run_prefix_cache
from servecheck.model.records import ServerInfo
from servecheck.results.jsonout import envelope
from servecheck.report.terminal import ProgressHandle, progress

EXIT_INTERRUPTED = exitcodes.INTERRUPTED
VERDICT_STYLE = {"working": "green", "inert": "bold red", "unknown": "yellow"}


# ---------------------------------------------------------------- formatting (pure: doc -> renderables)


def _num(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def sends_table(doc: dict[str, Any]) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name, justify in (("send", "right"), ("kind", "left"), ("TTFT s", "right"), ("cached tokens", "right"),
                          ("prompt tokens", "right"), ("server prefill s", "right"), ("status", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for i, s in enumerate(doc["sends"], start=1):
        table.add_row(
            str(i), s["kind"], _num(s["ttft_s"], 3), "-" if s["cached_tokens"] is None else str(s["cached_tokens"]),
            "-" if s["prompt_tokens"] is None else str(s["prompt_tokens"]), _num(s["server_prompt_s"], 3),
            Text(s["status"] if s["error"] is None else f"{s['status']}: {s['error']}"),
        )
    return table


def header_line(doc: dict[str, Any]) -> str:
    server = doc.get("server") or {}
    cache = {None: "server default", True: "cache_prompt: true", False: "cache_prompt: false"}[doc["cache_prompt"]]
    return (
        f"prefix-cache  {server.get('url', '?')}  api {server.get('dialect', '?')}  model {server.get('model') or '?'}\n"
        f"{doc['prompt_tokens']}-token prompt x {doc['repeats']}, then a control of equal length ({cache})"
    )


def verdict_lines(doc: dict[str, Any]) -> list[str]:
    lines = [f"verdict  {doc['verdict']}  ({doc['verdict_reason']})"]
    lines += [f"note: {n}" for n in doc.get("notes", [])]
    if not doc.get("complete"):
        lines.append("INCOMPLETE: interrupted; the sends above are all that was measured")
    return lines


def exit_code(doc: dict[str, Any], expect: str | None) -> int:
    """--expect: 0 on that verdict, 4 on another definite one. Otherwise only `working` is a pass:
    an inert cache is a refused feature, an unknown one is inconclusive (both 3)."""
    refused = bool((doc.get("log_audit") or {}).get("refused"))
    verdict = doc["verdict"]
    if not doc["valid"] or verdict == "unknown" or refused:
        return exitcodes.INVALID
    if expect is not None:
        return exitcodes.OK if verdict == expect else exitcodes.EXPECT_MISMATCH
    return exitcodes.OK if verdict == "working" else exitcodes.INVALID


def render(console: Console, doc: dict[str, Any], served_: Served | None = None) -> None:
    if doc.get("simulated"):
        console.print(SIMULATED_BANNER, style="bold yellow", markup=False, highlight=False)
    console.print(header_line(doc), markup=False, highlight=False, soft_wrap=True)
    console.print(sends_table(doc))
    for line in verdict_lines(doc):
        style = VERDICT_STYLE.get(doc["verdict"]) if line.startswith("verdict") else None
        console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)
    if served_ is not None and served_.owned:
        render_audit(console, served_)


# ---------------------------------------------------------------- running


class _Session:
    def __init__(self, head: dict[str, Any], recorder: Recorder, err: Console) -> None:
        self.head = head
        self.recorder = recorder
        self.err = err
        self.last: PrefixCacheResult | None = None
        self.bar = ProgressHandle(None, None)

    def doc(self, result: PrefixCacheResult) -> dict[str, Any]:
        return {**self.head, **result.to_doc()}

    def on_server(self, info: ServerInfo) -> None:
        engine = f", engine {info.engine}" if info.engine else ""
        say(self.err, f"detected {info.dialect} API at {info.url}, model {info.model or '?'}{engine}")

    def on_send(self, result: PrefixCacheResult) -> None:
        self.last = result
        self.recorder.partial(self.doc(result))
        self.bar.advance()
        s = result.sends[-1]
        ttft = _num(s.ttft_s, 3)
        cached = "not reported" if s.cached_tokens is None else s.cached_tokens
        say(self.err, f"send {len(result.sends)} ({s.kind}): TTFT {ttft} s, cached tokens {cached}", "dim")


async def _measure(target: Target, session: _Session, **kw: Any) -> PrefixCacheResult:
    from servecheck.load.driver import LoadDriver

    async with LoadDriver(target) as driver:
        return await run_prefix_cache(driver, on_server=session.on_server, on_send=session.on_send, **kw)



@click.command("prefix-cache")
@click.argument("url", required=False)
@click.option("--prompt-tokens", type=int, default=6000, show_default=True,
              help="Prompt length; capped to the server's per-request context (saying so).")
@click.option("--repeats", type=int, default=3, show_default=True, help="Sends of the same prompt, one after another.")
@click.option("--no-cache-prompt", is_flag=True, help="Send cache_prompt: false with every request (llama.cpp).")
@click.option("--expect", type=click.Choice(["working", "inert"]), default=None,
              help="Exit 0 on this verdict and 4 on the other (for CI).")
@click.option("--seed", type=int, default=None,
              help="Seed for the prompt text and nonces (default: fresh each run, recorded in the JSON). A fixed "
              "seed resends the previous run's prompt, which a long-running server may still hold in its cache.")
@serve_option
@target_options
@output_options
@click.pass_obj
def cmd(
    app: AppContext,
    url: str | None,
    prompt_tokens: int,
    repeats: int,
    no_cache_prompt: bool,
    expect: str | None,
    seed: int | None,
    serve_command: str | None,
    serve_log: str | None,
    api: str,
    model: str | None,
    api_key: str | None,
    headers: tuple[str, ...],
    first_token_timeout_s: float,
    json_path: str | None,
    html_path: str | None,
    db_path: str | None,
    no_save: bool,
) -> int:
    """Send the same long prompt --repeats times, then a control of equal length with different
    bytes; read time to first token and every cache counter: working, inert or unknown."""
    url = resolve_url(url, serve_command)
    check_params(prompt_tokens, repeats, DEFAULT_MAX_TOKENS)
    json_to_stdout = json_path == "-"
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = make_target(server.url, api=api, model=model, api_key=api_key, headers=headers,
                             first_token_timeout_s=first_token_timeout_s)
        params = {**target.public_dict(), "prompt_tokens": prompt_tokens, "repeats": repeats,
                  "cache_prompt": False if no_cache_prompt else None, "expect": expect, "seed": seed,
                  "serve": serve_command}
        recorder = Recorder(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
        session = _Session(envelope("prefix-cache", params, environment()), recorder, app.err)
        try:
            recorder.start({**session.head, "sends": []})
            with progress(app, "prefix-cache: sends", total=repeats + 1) as session.bar:
                result = asyncio.run(_measure(target, session, prompt_tokens=prompt_tokens, repeats=repeats,
                                              cache_prompt=False if no_cache_prompt else None,
                                              rng=random.Random(seed)))
        except KeyboardInterrupt:
            partial = recorder.interrupted()
            recorder.close()
            say(app.err, "Interrupted: saved the partial result (complete: false)", "bold yellow")
            if session.last is not None and partial is not None:
                render(app.err if json_to_stdout else app.out, partial)  # the sends it did measure
            return EXIT_INTERRUPTED
        except BaseException:
            recorder.close()
            raise
    try:
        doc = recorder.finish({**session.doc(result), "log_audit": server.audit_doc()})
    finally:
        recorder.close()
    render(app.err if json_to_stdout else app.out, doc, server)
    return exit_code(doc, expect)
