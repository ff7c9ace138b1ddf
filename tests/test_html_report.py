"""The HTML report: structure per document kind, banners, escaping, and robustness to partial documents."""

from __future__ import annotations

import copy
import re
import os
import stat
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from servecheck.errors import UsageError
from servecheck.report import html as report_html
import samples
from servecheck.runs.jsonout import write_json

HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>"]


class Collector(HTMLParser):
    """Counts elements by tag and class, and keeps the visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self._svg_stack: list[int] = []
        self.svgs: list[dict[str, int]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attributes))
        if tag == "svg":
            self.svgs.append({"rect.bar": 0, "circle": 0})
            self._svg_stack.append(len(self.svgs) - 1)
        elif self._svg_stack and tag == "rect" and "bar" in attributes.get("class", "").split():
            self.svgs[self._svg_stack[-1]]["rect.bar"] += 1
        elif self._svg_stack and tag == "circle":
            self.svgs[self._svg_stack[-1]]["circle"] += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag == "svg":
            self._svg_stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg" and self._svg_stack:
            self._svg_stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def count(self, tag: str, css: str | None = None) -> int:
        return sum(1 for t, a in self.tags if t == tag and (css is None or css in a.get("class", "").split()))

    def charts(self, kind: str) -> list[dict[str, int]]:
        idx = [i for i, (t, a) in enumerate(self.tags) if t == "svg"]
        return [self.svgs[k] for k, i in enumerate(idx) if kind in self.tags[i][1].get("class", "").split()]


def parse(docs: list[dict[str, Any]]) -> tuple[str, Collector]:
    page = report_html.render_html(*samples.typed(docs))
    collector = Collector()
    collector.feed(page)
    return page, collector


def test_page_is_self_contained() -> None:
    page, c = parse(samples.all_kinds())
    assert c.count("script") == 0
    assert c.count("link") == 0
    assert "http-equiv" in page and "script-src 'none'" in page
    srcs = [a.get("src", "") for _, a in c.tags] + [a.get("href", "") for _, a in c.tags]
    assert all(s == "" or s.startswith("#") for s in srcs)
    assert c.count("section", "run") == 6
    assert c.count("nav", "toc") == 1


@pytest.mark.parametrize(("serial", "finish_text"),
                         [(True, "1.00 / 2.00 / 3.00 / 4.00"), (False, "1.30 / 1.30 / 1.30 / 1.30")])
def test_staircase_has_a_lane_chart_per_n_and_a_throughput_chart(serial: bool, finish_text: str) -> None:
    doc = samples.staircase(serial=serial, ns=(1, 2, 4))
    page, c = parse([doc])
    timelines = c.charts("timeline")
    # one chart per N; every request a lane with a waiting and a generating segment
    assert [t["rect.bar"] for t in timelines] == [2, 4, 8]
    assert c.count("rect", "wait") == 7 and c.count("rect", "gen") == 7
    (lines,) = c.charts("lines")
    assert lines["circle"] == 6  # aggregate and per-user rate at three N
    assert finish_text in page
    assert ("staircase" if serial else "cluster") in "".join(c.text)


def test_staircase_bars_are_placed_from_release() -> None:
    doc = samples.staircase(serial=True, ns=(2,), request_s=2.0)
    assert doc["points"][0]["batches"][0]["release_s"] > 0
    page, _ = parse([doc])
    # request 1 waits behind request 0: first token 2.1 s and end 4.0 s after the release
    assert "request 1: sent 0.00 s, first token 2.10 s, finished 4.00 s, 64 tokens, ok" in page
    # axis 0..4 s over 672 px from x=64: its generating segment starts at 64 + 2.1 * 168
    assert '<rect class="bar gen" x="416.8"' in page


def test_staircase_from_finish_times_only() -> None:
    doc = {"command": "staircase", "points": [{"n": 1, "finish_s": [5.51], "aggregate_tok_s": 93.0},
                                              {"n": 4, "finish_s": [5.5, 11.1, 16.8, 22.5], "aggregate_tok_s": 91.2}]}
    page, c = parse([doc])
    assert [t["rect.bar"] for t in c.charts("timeline")] == [1, 4]
    assert "5.5 / 11.1 / 16.8 / 22.5" in page


def test_failed_request_is_drawn_as_failed() -> None:
    doc = samples.staircase(serial=True, ns=(2,))
    doc["points"][0]["batches"][0]["requests"][1]["status"] = "error"
    _, c = parse([doc])
    assert c.count("rect", "fail") == 1


def test_arms_table_and_decomposition() -> None:
    page, c = parse([samples.arms()])
    (bars,) = c.charts("bars")
    assert bars["rect.bar"] == 6  # aggregate and generation gain for three arms
    text = "".join(c.text)
    for expected in ("1.39×", "0.94×", "-65%", "35%", "pipelining", "batching", "89.0"):
        assert expected in text
    assert c.count("line", "ref") == 1  # the 1x line


def test_arms_refused_headline() -> None:
    doc = samples.arms()
    doc.update(headline_refused=True, refusal="position bias 14% in arm 4")
    _, c = parse([doc])
    assert "Headline withheld: position bias 14% in arm 4" in "".join(c.text)


@pytest.mark.parametrize("with_sends", [True, False])
def test_prefix_cache_ttft_chart(with_sends: bool) -> None:
    doc = samples.prefix_cache(working=True)
    if not with_sends:
        del doc["sends"]
    page, c = parse([doc])
    (bars,) = c.charts("bars")
    assert bars["rect.bar"] == 4
    assert c.count("rect", "control") == 1 and c.count("rect", "repeat") == 3
    assert "0.190" in page and "5,990" in page


def test_roofline_bar_with_gate_line() -> None:
    page, c = parse([samples.roofline()])
    (ranges,) = c.charts("ranges")
    assert ranges["rect.bar"] == 3  # measured lo, measured lo..hi, achieved
    assert c.count("line", "ref") == 2  # gate at 55% of each end of the bandwidth range
    text = "".join(c.text)
    for expected in ("57–68%", "265–315 GB/s", "180.9 GB/s", "146–173 GB/s", "close", "1.849 GB"):
        assert expected in text


def test_log_findings_table() -> None:
    _, c = parse([samples.log()])
    assert c.count("span", "status-refused") == 1
    assert c.count("span", "status-confirmed") == 1
    assert "continuous batching is unavailable" in "".join(c.text)


def test_unknown_kind_gets_key_value_tables() -> None:
    # a command this release has no record for: its fields are drawn as saved
    doc = {"command": "future-kind", "format": "gguf", "bytes_per_token": 1849,
           "groups": [{"group": "attention", "bytes": 12}, {"group": "<b>x</b>"}]}
    page, c = parse([doc])
    assert "gguf" in page and "1.85 kB" in page  # a byte count reads in decimal units
    assert "<th>group</th><th>bytes</th>" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert c.count("svg") == 0


def test_bandwidth_points_chart() -> None:
    doc = {"command": "bandwidth", "points": [{"bytes": 2**30, "gb_s": 360.5}, {"bytes": 16 * 2**30, "gb_s": 267.0}]}
    page, c = parse([doc])
    (bars,) = c.charts("bars")
    assert bars["rect.bar"] == 2
    assert "16 GiB" in page and "360.5" in page


@pytest.mark.parametrize(
    ("doc", "banners"),
    [
        ({"command": "staircase", "simulated": True, "complete": False}, {"simulated", "incomplete"}),
        ({"command": "staircase", "simulated": False, "complete": True, "valid": False}, {"invalid"}),
        ({"command": "log"}, set()),
    ],
)
def test_banners(doc: dict[str, Any], banners: set[str]) -> None:
    _, c = parse([doc])
    found = {css for css in ("simulated", "incomplete", "invalid") if c.count("div", css)}
    assert found == banners


@pytest.mark.parametrize("kind", ["staircase", "arms", "prefix-cache", "roofline", "log", "audit"])
def test_garbage_fields_never_crash(kind: str) -> None:
    garbage: dict[str, Any] = {
        "command": kind, "points": [None, {"n": "x", "batches": [{"requests": [{"send_s": "a"}, None]}]}],
        "arms": [1, {"concurrency": None}], "cells": "no", "sends": [{"ttft_s": None}], "bandwidth_gb_s": [1],
        "achieved_gb_s": float("nan"), "findings": [None, {"status": 3}], "lines": [7], "environment": [],
        "params": None, "server": "x", "warnings": [{"message": None}, "plain"],
    }
    page, _ = parse([garbage])
    assert "</html>" in page


def test_every_kind_escapes_hostile_strings() -> None:
    docs = copy.deepcopy(samples.all_kinds())
    for doc in docs:
        doc["server"]["model"] = HOSTILE[0] + HOSTILE[1]
        doc["warnings"] = [HOSTILE[1]]
        doc["params"]["flags"] = HOSTILE[0]
    docs[0]["points"][0]["batches"][0]["requests"][0]["text"] = HOSTILE[0]
    docs[5]["findings"][0]["line"] = HOSTILE[1]
    docs.append({"command": HOSTILE[0], "odd": HOSTILE[1], "points": [{HOSTILE[0]: HOSTILE[1]}]})
    page, c = parse(docs)
    assert c.count("script") == 0
    assert c.count("img") == 0
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert HOSTILE[0] in "".join(c.text)


def test_write_html_atomic_and_bad_path(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    report_html.write_html(target, *samples.typed([samples.roofline()]))
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    with pytest.raises(UsageError, match="does not exist"):
        report_html.write_html(tmp_path / "missing" / "r.html", *samples.typed([samples.roofline()]))


def test_written_files_get_the_mode_open_would_give(tmp_path: Path) -> None:
    """The temp file behind the atomic write is 0600; the result must not stay private to its owner."""
    old = os.umask(0o022)
    try:
        report_html.write_html(tmp_path / "r.html", *samples.typed([samples.roofline()]))
        write_json(tmp_path / "r.json", samples.roofline())
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.html").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644


def test_roofline_ceiling_and_headroom() -> None:
    doc = samples.roofline()
    doc["ceiling"] = {"name": "typical MoE ceiling 0.60-0.65", "utilization": [0.60, 0.65]}
    doc["headroom"] = {"factor": [0.88, 1.13], "speed_of_light_tok_s": [143.3, 170.4]}
    page, c = parse([doc])
    assert c.count("line", "ceiling") == 2 and c.count("rect", "ceiling") == 1
    text = "".join(c.text)
    assert "typical ceiling 60–65% of measured: 159–205 GB/s" in text
    assert "0.88–1.13×" in text and "143–170 tok/s" in text


def test_demo_draws_each_staircase_run() -> None:
    runs = [
        {"parallel": 1, "expected": "staircase", "verdict": "staircase",
         "staircase": samples.staircase(serial=True, ns=(1, 2))},
        {"parallel": 2, "expected": "cluster", "verdict": "cluster",
         "staircase": samples.staircase(serial=False, ns=(1, 2)),
         "log_audit": {"findings": [{"feature": "parallel_slots", "status": "confirmed", "line": "n_slots = 2"}]}},
    ]
    _, c = parse([{"command": "demo", "runs": runs}])
    assert [t["rect.bar"] for t in c.charts("timeline")] == [2, 4, 2, 4]
    assert len(c.charts("lines")) == 2
    assert c.count("span", "status-confirmed") == 1
    assert "--parallel 2: expected cluster, got cluster" in "".join(c.text)


def test_staircase_reasons_self_reported_sum_and_named_requests() -> None:
    doc = samples.staircase(serial=True)
    doc["verdict_reason"] = "N=4: 4 finishes one at a time <b>"
    doc["trend_reason"] = "aggregate stays at 1.00x N=1"
    doc["single_s"] = 1.0
    batch = doc["points"][2]["batches"][0]
    batch["self_reported_sum_tok_s"], batch["aggregate_tok_s"] = 256.4, doc["points"][2]["aggregate_tok_s"]
    doc["valid"] = False
    doc["invalid"] = [{"code": "output_length", "message": "1 request(s) more than 5% away", "hint": "pin the length",
                       "requests": [{"n": 4, "rep": 0, "index": 3, "nonce": "abc123",
                                     "detail": "23 tokens vs modal 64"}]}]
    doc["notes"] = ["a note <i>"]
    page, c = parse([doc])
    text = "".join(c.text)
    assert "N=4: 4 finishes one at a time <b>" in text and "aggregate stays at 1.00x N=1" in text
    assert "sum of self-reported rates" in text
    misleading = [i for i, (t, a) in enumerate(c.tags) if t == "span" and a.get("class") == "misleading"]
    assert len(misleading) == 1 and "256.4 (misleading)" in text  # a document without the flag keeps the word
    assert "N=4 rep 1 request #3 (nonce abc123): 23 tokens vs modal 64" in text
    assert "Single-request time 1.00 s" in text
    assert "a note <i>" in text and "a note &lt;i&gt;" in page


def test_a_self_reported_sum_that_agrees_is_not_called_misleading() -> None:
    """A batching server's sum is right: the rep recorded so, and the report says so, as the terminal does."""
    doc = samples.staircase(serial=False)
    batch = doc["points"][2]["batches"][0]
    batch["self_reported_sum_tok_s"], batch["self_reported_misleading"] = 512.0, False
    batch["aggregate_tok_s"] = doc["points"][2]["aggregate_tok_s"]
    page, c = parse([doc])
    text = "".join(c.text)
    assert "512 (agrees)" in text and "(misleading)" not in text
    assert not [a for t, a in c.tags if t == "span" and a.get("class") == "misleading"]


def test_arms_intervals_and_checks() -> None:
    doc = samples.arms()
    doc["arms"][2]["aggregate_speedup_interval"] = [1.31, 1.47]
    doc["arms"][2]["cells"] = 3
    doc["position_bias"] = {"spread": 0.031, "concurrency": 4, "method": "positions"}
    doc["bias_limit"] = 0.1
    doc["drift"] = {"first_tok_s": 64.0, "last_tok_s": 60.8, "loss": 0.05, "reps_each": 1}
    doc["thermal"] = {"summary": "no throttling seen"}
    _, c = parse([doc])
    text = "".join(c.text)
    assert "1.39× [1.31×, 1.47×]" in text
    assert "covering the median with 75% confidence (fewer reps than the 95% level needs)" in text  # three reps
    assert "position bias: widest spread 3.1% (4-way, across positions); limit 10%" in text
    assert "drift: serial arm 64.0 → 60.8 tok/s (first vs last reps): loss 5.0%" in text
    assert "thermal: no throttling seen" in text


def test_a_small_bar_value_is_not_printed_as_zero() -> None:
    doc = samples.prefix_cache(working=True)
    doc["sends"][1]["ttft_s"] = 0.004
    page, _ = parse([doc])
    assert re.findall(r'<text class="value"[^>]*>([^<]*)</text>', page) == ["6.8", "0.004", "0.19", "6.79"]


def test_serve_log_audit_is_shown_with_its_refusals() -> None:
    doc = samples.staircase(serial=True)
    doc["log_audit"] = {"command": "llama-server -np 4", "log_path": "/tmp/server.log", "error": None,
                        "findings": [{"feature": "parallel_slots", "status": "refused", "line": "n_slots = 1 <x>"}],
                        "lines": [], "refused": ["parallel_slots"]}
    page, c = parse([doc])
    text = "".join(c.text)
    assert "Server log audit" in text and "/tmp/server.log" in text
    assert "n_slots = 1 <x>" in text and c.count("span", "status-refused") == 1
    doc["log_audit"] = {"command": "x", "log_path": "/tmp/server.log", "error": "cannot read it"}
    assert "The log could not be audited: cannot read it" in "".join(parse([doc])[1].text)
    doc["log_audit"] = None
    assert "Server log audit" not in parse([doc])[0]


def test_byte_counts_read_in_gb_and_a_seed_is_not_a_quantity() -> None:
    doc = {**samples.roofline(), "command": "audit", "bytes_per_token": 1_849_000_000, "resident_bytes": 22_548_578_304,
           "groups": [{"group": "attention", "read_bytes_per_token": 16_777_216, "stored_bytes": 512}]}
    doc["params"] = {"seed": 3513248848, "sizes": [2**30, 4 * 2**30]}
    _, c = parse([doc])
    text = "".join(c.text)
    assert "1.85 GB (1.72 GiB)" in text and "22.5 GB (21 GiB)" in text
    assert "16.8 MB" in text and "512 B" in text
    assert "1.07 GB (1 GiB), 4.29 GB (4 GiB)" in text
    assert "3513248848" in text and "3,513,248,848" not in text


def test_demo_draws_both_configurations_on_one_time_axis() -> None:
    """The queue's N=4 ends at 4 s, the batch's at 1.3 s: on one axis the difference is seen, not read."""
    runs = [{"parallel": 1, "expected": "staircase", "verdict": "staircase",
             "staircase": samples.staircase(serial=True)},
            {"parallel": 4, "expected": "cluster", "verdict": "cluster", "staircase": samples.staircase(serial=False)}]
    page, _ = parse([{"command": "demo", "runs": runs,
                      "verdicts": {"parallel_1": "staircase", "parallel_4": "cluster"}}])
    charts = re.findall(r'<svg class="chart timeline".*?</svg>', page)
    axis_ends = {max(float(t) for t in re.findall(r'<text class="tick"[^>]*>([0-9.]+)</text>', svg)) for svg in charts}
    assert len(charts) == 6 and axis_ends == {4.0}


def test_every_chart_of_a_simulated_run_says_so() -> None:
    """A chart cut out of the page must not pass for a real server's."""
    sim, real = samples.staircase(serial=True), samples.roofline()
    real["simulated"] = False
    real["server"]["simulated"] = False
    page, c = parse([sim, real])
    titles = re.findall(r'<text class="chart-title"[^>]*>([^<]*)</text>', page)
    simulated = [t for t in titles if t.endswith("— SIMULATED server")]
    assert len(simulated) == 4  # three completion-time charts and the throughput chart; not the roofline's
    assert len(titles) == 5
    assert re.search(r"<title>SIMULATED · servecheck report</title>", page)


def test_several_staircase_and_arms_runs_are_laid_side_by_side() -> None:
    """Seed 000 section 3 in the report: one row and one line per run, and which one rises."""
    serial, flagged, batched = (samples.staircase(serial=True), samples.staircase(serial=True, flag="--cb 8"),
                                samples.staircase(serial=False))
    for i, doc in enumerate((serial, flagged, batched), start=1):
        doc["run_id"] = i
    page, c = parse([serial, flagged, batched, samples.roofline()])
    text = "".join(c.text)
    assert "Side by side" in text and "only #3 rises; flat: #1, #2" in text
    assert "flag=--cb 8" in text
    (overview, *_) = c.charts("lines")
    assert overview["circle"] == 9  # three runs x N = 1, 2, 4
    assert page.index("Side by side") < page.index('id="run-0"')
    assert "Side by side" not in parse([serial, samples.roofline()])[0]  # one diffable run: nothing to compare


def test_the_speculative_section_reads_as_a_person_reads_it() -> None:
    """Issue 41: in a browser the checks printed `the server&#x27;s counters` (escaped twice), the
    pre-flight note twice, and the legend said "prose" / "verbatim repetition" where the table said
    "unpredictable" / "predictable". Escaped once, the note once, one name per prompt kind."""
    page, c = parse([samples.speculative()])
    text = "".join(c.text)  # the page as a reader sees it: every entity unescaped once
    for twice in ("&#x27;", "&#39;", "&amp;", "&lt;", "&gt;", "&quot;"):
        assert twice not in text, twice
    assert "&amp;#" not in page and "&amp;lt;" not in page
    assert "the server's counters give 3.00 tokens per step" in text
    assert "stream 1's arrivals came <2 ms apart" in text
    assert text.count(samples.LATENESS_NOTE) == 1
    table = page[page.index("<h3>By N and prompt kind</h3>"):]
    table = table[:table.index("</table>")]
    assert "verbatim repetition" in table and "prose" in table
    assert ">predictable<" not in table and ">unpredictable<" not in table
    legend = page[page.index("<svg"):page.index("<h3>By N and prompt kind</h3>")]
    assert ("verbatim repetition" in legend and "prose" in legend
            and "predictable" not in legend.replace("unpredictable", ""))
    checks = page[page.index("<h3>Checks</h3>"):]
    assert "N=2 verbatim repetition: the server's counters" in "".join(_visible(checks))
    assert "N=1 prose:" in "".join(_visible(checks)) and "unpredictable" not in checks


def _visible(fragment: str) -> list[str]:
    collector = Collector()
    collector.feed(fragment)
    return collector.text
