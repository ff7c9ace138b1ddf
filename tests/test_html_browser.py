"""The HTML report in a real headless Chromium: charts render, nothing is fetched, hostile strings stay text."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from servecheck import sim
from servecheck.cli import main as main_mod
import samples
from servecheck.report.html import write_html

# The same lookup as scripts/install-test-deps.sh (`command -v chromium`): what it installed, this finds.
CHROMIUM = os.environ.get("SERVECHECK_CHROMIUM") or shutil.which("chromium") or ""
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE_SCRIPT = "<script>alert(1)</script>"
HOSTILE_IMG = "<img src=x onerror=alert(1)>"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not CHROMIUM or not Path(CHROMIUM).exists(),
                       reason="needs Debian's chromium: run scripts/install-test-deps.sh"),
]

# Per chart: its class and how many drawn marks (bars or dots) it should hold.
CHART_COUNT_JS = """() => Array.from(document.querySelectorAll('svg.chart')).map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = Array.from(svg.querySelectorAll('rect.bar, circle.dot'))
    .filter(el => { const b = el.getBBox(); return b.width > 0 && b.height > 0; });
  return {kind: svg.getAttribute('class'), width: box.width, height: box.height, marks: marks.length};
})"""


def simulated_staircase(tmp_path: Path) -> dict[str, Any]:
    """A staircase run against the simulator in hostile mode: markup in the model name and the generated text."""
    out = tmp_path / "staircase.json"
    with sim.sim_in_thread(sim.SimConfig(mode="serial", hostile=True, log_path=str(tmp_path / "sim.log"))) as server:
        with pytest.raises(SystemExit) as info:
            main_mod.main(["--quiet", "staircase", server.url, "--n", "1,2,4", "--tokens", "12", "--prompt-tokens", "8",
                           "--no-save", "--json", str(out)])
    assert info.value.code in (0, 3)
    doc: dict[str, Any] = json.loads(out.read_text())
    assert HOSTILE_SCRIPT in doc["server"]["model"]
    return doc


# The hostile simulator writes its markup into a load line that no built-in rule reads; a user rule
# (the documented --rules extension) makes it a finding, so the simulator's own line reaches the report.
MODEL_RULE = """
[[rule]]
id = "llamacpp.model_loaded"
engine = "llamacpp"
pattern = 'loading model'
feature = "model_load"
status = "confirmed"
meaning = "the server named the model it loads"
source = "servecheck test"
verified = ""
"""


def simulated_log(tmp_path: Path) -> dict[str, Any]:
    """`servecheck log` on the hostile simulator's own log (written by `simulated_staircase`)."""
    rules, out = tmp_path / "rules.toml", tmp_path / "log.json"
    rules.write_text(MODEL_RULE)
    with pytest.raises(SystemExit):
        main_mod.main(["--quiet", "log", str(tmp_path / "sim.log"), "--rules", str(rules), "--no-save", "--json",
                       str(out)])
    doc: dict[str, Any] = json.loads(out.read_text())
    assert any(HOSTILE_SCRIPT in (f.get("line") or "") for f in doc["findings"])
    return doc


def hostile_log() -> dict[str, Any]:
    line = f"WARNING: {HOSTILE_SCRIPT} continuous batching disabled {HOSTILE_IMG}"
    return samples.log(line=line)


def open_report(path: Path, tmp_path: Path) -> dict[str, Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    dialogs: list[str] = []
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1100, "height": 900},
        )
        try:
            # the report itself is the only thing allowed to load; everything else is blocked and recorded
            uri = path.as_uri()
            context.route("**/*", lambda route: route.continue_() if route.request.url == uri else route.abort())
            page = context.new_page()

            def dismissed(d: Any) -> None:
                dialogs.append(d.message)
                d.dismiss()

            page.on("dialog", dismissed)
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri(), wait_until="load")
            page.wait_for_timeout(300)  # give any injected handler (there must be none) time to fire
            page.locator("details").evaluate_all("els => els.forEach(e => { e.open = true; })")
            result = {
                "charts": page.evaluate(CHART_COUNT_JS),
                "text": page.inner_text("body"),
                "img": page.locator("img").count(),
                "script": page.locator("script").count(),
                "onerror": page.locator("[onerror]").count(),
            }
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            context.close()
    result["dialogs"] = dialogs
    result["requests"] = [u for u in requests if u != path.as_uri()]
    return result


def test_report_renders_and_hostile_strings_stay_text(tmp_path: Path) -> None:
    staircase = simulated_staircase(tmp_path)
    docs = [staircase, samples.arms(), samples.prefix_cache(working=True), samples.roofline(), hostile_log(),
            simulated_log(tmp_path)]
    report = tmp_path / "report.html"
    write_html(report, *samples.typed(docs))

    seen = open_report(report, tmp_path)

    kinds = [c["kind"] for c in seen["charts"]]
    assert kinds == ["chart lines"] + ["chart timeline"] * 3 + ["chart lines", "chart bars", "chart bars",
                                                                "chart ranges"]
    assert all(c["width"] > 100 and c["height"] > 50 for c in seen["charts"])
    # marks per chart: side by side (the staircase and the arms run, 3 levels each), lanes of 1, 2 and
    # 4 requests (two segments each), 2 series x 3 N, arms decomposition 2 x 3, four TTFT sends,
    # roofline lo + range + achieved
    assert [c["marks"] for c in seen["charts"]] == [6, 2, 4, 8, 6, 6, 4, 3]
    assert seen["dialogs"] == []
    assert seen["requests"] == []
    assert seen["img"] == 0 and seen["script"] == 0 and seen["onerror"] == 0
    text = seen["text"]
    assert HOSTILE_SCRIPT in text and HOSTILE_IMG in text  # shown as text: model name, generated text, log line
    assert f"WARNING: {HOSTILE_SCRIPT} continuous batching disabled {HOSTILE_IMG}" in text
    assert f"loading model 'servecheck-sim-{HOSTILE_SCRIPT}{HOSTILE_IMG}'" in text  # the simulator's own log line
    generated = staircase["points"][0]["batches"][0]["requests"][0]["text"].strip()
    assert generated.startswith(HOSTILE_SCRIPT) and generated[:60] in text
    assert "SIMULATED" in text
    assert (tmp_path / "report.png").stat().st_size > 10_000
    keep = os.environ.get("SERVECHECK_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(tmp_path / "report.png", keep)


def test_the_speculative_report_reads_once_in_a_browser(tmp_path: Path) -> None:
    """Issue 41, as seen in Chromium: the checks escaped twice (`the server&#x27;s counters`), the
    pre-flight note twice, and two names per prompt kind. The text a reader sees, once each."""
    report = tmp_path / "speculative.html"
    write_html(report, *samples.typed([samples.speculative()]))
    seen = open_report(report, tmp_path)
    text = seen["text"]
    assert "&#x27;" not in text and "&#39;" not in text and "&amp;" not in text and "&lt;" not in text
    assert "N=1 verbatim repetition: the server's counters give 3.00 tokens per step" in text
    assert "stream 1's arrivals came <2 ms apart" in text
    assert text.count(samples.LATENESS_NOTE) == 1
    assert "unpredictable" not in text and "predictable" not in text.replace("unpredictable", "")
    assert [c["kind"] for c in seen["charts"]] == ["chart lines", "chart lines"]
    assert seen["dialogs"] == [] and seen["requests"] == []


def test_the_check_report_shows_the_cards_first_and_opens_each_to_its_command(tmp_path: Path) -> None:
    """Issue 41: the cards on the first screen, each opening to its command's section. A check of the
    hostile simulator (markup in its model name and text): the table of cards comes before any chart, each
    card that measured opens to its command's drawing (the staircase's lanes, the prefix cache's bars, the
    interference and speculative charts), and nothing is escaped twice or run."""
    out = tmp_path / "check.json"
    with sim.sim_in_thread(sim.SimConfig(mode="batched", hostile=True, token_s=0.010, per_seq_s=0.0005,
                                         prompt_token_s=0.0001)) as server:
        with pytest.raises(SystemExit) as info:
            main_mod.main(["--quiet", "check", server.url, "--tokens", "16", "--budget", "60", "--no-calibrate",
                           "--no-save", "--json", str(out)])
    assert info.value.code == 0
    doc = json.loads(out.read_text())
    report = tmp_path / "check.html"
    write_html(report, *samples.typed([doc]))
    html = report.read_text()
    first_chart = html.index("<svg")
    for card in doc["cards"]:
        assert html.index(f">{card['claim']}<") < first_chart, card["claim"]  # every card before any drawing
    measured = [c["claim"] for c in doc["cards"] if any(k in c for k in ("staircase", "prefix_cache", "interference",
                                                                           "speculative", "roofline"))]
    assert measured == ["concurrency", "prefix_cache", "chunked_prefill", "speculative"]
    assert all(f'id="card-{claim}"' in html and f'href="#card-{claim}"' in html for claim in measured)
    seen = open_report(report, tmp_path)
    text = seen["text"]
    assert "&#x27;" not in text and "&#39;" not in text and "&amp;" not in text and "&lt;" not in text
    assert seen["img"] == 0 and seen["script"] == 0 and seen["onerror"] == 0
    assert seen["dialogs"] == [] and seen["requests"] == []
    assert HOSTILE_SCRIPT in text  # the model name, as text
    for card in doc["cards"]:
        assert f"{card['claim']}\t{card['verdict']}" in text or f"{card['claim']}: {card['verdict']}" in text
    kinds = [c["kind"] for c in seen["charts"]]
    assert len(kinds) >= 4 and all(c["width"] > 0 and c["height"] > 0 for c in seen["charts"]), seen["charts"]
