"""MLX provisioning, model generation and the server's command line without the real MLX: a fake
base python creates a fake virtualenv whose python plays pip, the import check and the model script."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servecheck.cli.main import main
from servecheck.engine import mlx_model
from servecheck.engine.cache import EngineCache, clear, list_entries
from servecheck.engine.mlx_engine import provision as mlx_provision
from servecheck.engine.mlx_engine import (
    MlxServer,
    backend_for,
    cached_mlx,
    check_glibc,
    install_requirements,
    install_steps,
    mlx_folder,
    parallel_args,
    provision_mlx,
    server_env,
)
from servecheck.engine.mlx_model import MLX_SIZES, mlx_model_dir, resolve_mlx_model
from servecheck.errors import EngineError, UsageError

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
    if "install" in args and "mlx-lm==0.32.2" in args:
        print("Collecting mlx==0.32.4")
        if os.environ.get("FAKE_PIP_FAIL"):
            print("ERROR: No matching distribution found for mlx-cpu==0.32.4")
            sys.exit(1)
        print("Installing collected packages: mlx-cpu, mlx, mlx-lm")
    sys.exit(0)
if args[0] == "-c":
    if os.environ.get("FAKE_IMPORT_FAIL"):
        print("ImportError: libmlx.so: cannot open shared object file", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({{"mlx": "0.32.4", "mlx_lm": "0.32.2", "device": "Device(cpu, 0)",
                      "transformers": "5.25.0", "tokenizers": "0.23.3"}}))
    sys.exit(0)
if args[0].endswith("mlx_model_script.py"):
    if os.environ.get("FAKE_MODEL_FAIL"):
        print("ModuleNotFoundError: No module named 'mlx.core'", file=sys.stderr)
        sys.exit(1)
    spec = json.loads(pathlib.Path(args[1]).read_text())
    out = pathlib.Path(spec["out"])
    (out / "config.json").write_text(json.dumps({{"model_type": "llama", "eos_token_id": 1,
        "max_position_embeddings": spec["max_position_embeddings"]}}))
    (out / "tokenizer_config.json").write_text(json.dumps({{"eos_token": "</s>"}}))
    (out / "tokenizer.json").write_text(json.dumps({{"added_tokens": [{{"id": 1, "content": "</s>"}}],
        "model": {{"vocab": {{"</s>": 1, "a": 7}}}}}}))
    (out / "model.safetensors").write_text("{{}}")
    print(json.dumps({{"vocab_size": spec["vocab_size"], "params": 1, "eos_token_ids": [1], "dtype": spec["dtype"]}}))
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
    # Patched where install_mlx and mlx_key read them: the provision module.
    monkeypatch.setattr(mlx_provision, "backend_for", lambda: "cpu")
    monkeypatch.setattr(mlx_provision, "check_glibc", lambda: None)
    for name in ("FAKE_PIP_FAIL", "FAKE_IMPORT_FAIL", "FAKE_MODEL_FAIL"):
        monkeypatch.delenv(name, raising=False)
    return base


def calls(cache: EngineCache) -> list[str]:
    path = mlx_folder(cache, "cpu") / "calls.log"
    return path.read_text().splitlines() if path.is_file() else []


# -- what the machine takes ---------------------------------------------------------------------------


@pytest.mark.parametrize(("system", "machine", "backend"), [
    ("Linux", "x86_64", "cpu"), ("Linux", "aarch64", "cpu"), ("Darwin", "arm64", "metal"),
])
def test_the_backend_follows_the_machine(system: str, machine: str, backend: str) -> None:
    assert backend_for(system, machine) == backend


@pytest.mark.parametrize(("system", "machine"), [("Darwin", "x86_64"), ("Windows", "AMD64"), ("Linux", "riscv64")])
def test_a_machine_mlx_does_not_run_on_is_refused(system: str, machine: str) -> None:
    with pytest.raises(EngineError) as err:
        backend_for(system, machine)
    assert f"not {system} {machine}" in err.value.message and "URL" in (err.value.hint or "")


def test_linux_takes_the_cpu_backend_and_macos_plain_mlx() -> None:
    assert install_requirements("cpu") == ["mlx[cpu]==0.32.4", "mlx-lm==0.32.2"]
    assert install_requirements("metal") == ["mlx==0.32.4", "mlx-lm==0.32.2"]


def test_an_old_glibc_is_named_before_pip_runs() -> None:
    check_glibc(("glibc", "2.36"))
    check_glibc(("", ""))  # not glibc: pip decides
    with pytest.raises(EngineError) as err:
        check_glibc(("glibc", "2.31"))
    assert "glibc 2.35 or newer" in err.value.message and "2.31" in err.value.message


# -- the install -------------------------------------------------------------------------------------


def test_install_steps_pin_both_packages(tmp_path: Path) -> None:
    steps = install_steps("/usr/bin/python3", tmp_path / "k", "cpu")
    assert steps[0].cmd == ["/usr/bin/python3", "-m", "venv", str(tmp_path / "k" / "venv")]
    python = str(tmp_path / "k" / "venv" / "bin" / "python")
    assert all(s.cmd[0] == python for s in steps[1:])
    assert steps[-1].cmd[-2:] == ["mlx[cpu]==0.32.4", "mlx-lm==0.32.2"]


def test_install_is_stamped_last_and_then_reused(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    seen: list[str] = []
    env = provision_mlx(cache, progress=seen.append, base_python=fake_base)
    assert (env.origin, env.mlx_version, env.mlx_lm_version, env.backend) == ("installed", "0.32.4", "0.32.2", "cpu")
    folder = mlx_folder(cache, "cpu")
    assert env.python == folder / "venv" / "bin" / "python" and folder.parent == cache.root / "mlx"
    stamp = json.loads((folder / "stamp.json").read_text())
    assert stamp["requirements"] == ["mlx[cpu]==0.32.4", "mlx-lm==0.32.2"] and stamp["device"] == "Device(cpu, 0)"
    assert stamp["size_bytes"] > 0 and (folder / "install.log").is_file()
    assert any("installing mlx[cpu]==0.32.4 mlx-lm==0.32.2" in line for line in seen)
    made = calls(cache)
    again = provision_mlx(cache, base_python=fake_base)
    assert again.origin == "cache" and calls(cache) == made  # nothing ran the second time
    assert cached_mlx(cache, "cpu") == again


def test_an_install_without_a_stamp_is_redone(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    half = mlx_folder(cache, "cpu") / "venv" / "bin"
    half.mkdir(parents=True)
    (half / "python").write_text("#!/bin/sh\nexit 1\n")
    assert cached_mlx(cache, "cpu") is None
    seen: list[str] = []
    assert provision_mlx(cache, progress=seen.append, base_python=fake_base).origin == "installed"
    assert any("removing an unfinished MLX install" in line for line in seen)


def test_a_stamp_for_another_pin_is_not_used(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    provision_mlx(cache, base_python=fake_base)
    stamp = mlx_folder(cache, "cpu") / "stamp.json"
    stamp.write_text(json.dumps({**json.loads(stamp.read_text()), "mlx_lm_pin": "0.31.0"}))
    assert cached_mlx(cache, "cpu") is None


@pytest.mark.parametrize(("fail", "words"), [
    ("FAKE_PIP_FAIL", "the MLX install failed to pip install mlx and mlx-lm"),
    ("FAKE_IMPORT_FAIL", "the installed MLX does not import"),
])
def test_a_failed_install_is_not_stamped_and_names_its_log(
    tmp_path: Path, fake_base: Path, monkeypatch: pytest.MonkeyPatch, fail: str, words: str
) -> None:
    cache = EngineCache(tmp_path / "cache")
    monkeypatch.setenv(fail, "1")
    with pytest.raises(EngineError) as err:
        provision_mlx(cache, base_python=fake_base)
    assert words in err.value.message and "full log:" in (err.value.hint or "")
    assert cached_mlx(cache, "cpu") is None
    monkeypatch.delenv(fail)
    assert provision_mlx(cache, base_python=fake_base).origin == "installed"  # the next run redoes it


def test_no_install_when_not_allowed(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as err:
        provision_mlx(EngineCache(tmp_path / "cache"), allow_install=False)
    assert "cache build --mlx" in (err.value.hint or "")


# -- the model ------------------------------------------------------------------------------------------


def test_the_model_is_generated_in_the_mlx_env_once(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    env = provision_mlx(cache, base_python=fake_base)
    model = resolve_mlx_model("tiny", cache, env.python)
    assert model.path == mlx_model_dir(cache, "tiny") and model.name == "servecheck-mlx-tiny"
    assert model.eos_token_ids == (1,)  # from config.json and the tokenizer's eos_token
    stamp = json.loads((model.path / "stamp.json").read_text())
    assert stamp["format"] == "mlx" and stamp["dtype"] == "float32" and stamp["eos_token_ids"] == [1]
    assert stamp["spec"]["max_position_embeddings"] >= 8192  # room for long prompts
    made = [c for c in calls(cache) if "mlx_model_script.py" in c]
    assert len(made) == 1
    resolve_mlx_model("tiny", cache, env.python)
    assert len([c for c in calls(cache) if "mlx_model_script.py" in c]) == 1  # reused
    assert not list(model.path.parent.glob(".*partial*"))


def test_a_failed_generation_leaves_no_model(tmp_path: Path, fake_base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = EngineCache(tmp_path / "cache")
    env = provision_mlx(cache, base_python=fake_base)
    monkeypatch.setenv("FAKE_MODEL_FAIL", "1")
    with pytest.raises(EngineError) as err:
        resolve_mlx_model("tiny", cache, env.python)
    assert "No module named 'mlx.core'" in err.value.message
    assert not mlx_model_dir(cache, "tiny").exists()


def test_a_model_folder_is_taken_with_its_eos_ids(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen-mlx"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    model = resolve_mlx_model(str(folder), EngineCache(tmp_path / "cache"), None)
    assert (model.path, model.name, model.eos_token_ids) == (folder, "Qwen-mlx", (151643, 151645))
    with pytest.raises(UsageError):
        resolve_mlx_model(str(tmp_path / "nothing"), EngineCache(tmp_path / "cache"), None)


def test_no_module_beside_the_model_scripts_hides_a_package_they_import() -> None:
    """The scripts run from the engine folder, which Python puts first on their path: an `mlx.py`
    there made `import mlx.core` fail."""
    folder = Path(mlx_model.__file__).parent
    names = {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if p.is_dir()}
    assert not names & {"mlx", "mlx_lm", "tokenizers", "transformers", "torch", "safetensors"}


def test_the_tiny_model_fits_the_issue() -> None:
    spec = MLX_SIZES["tiny"]
    assert (spec.hidden_size, spec.num_layers) == (256, 4) and spec.max_position_embeddings >= 8192


# -- the server -------------------------------------------------------------------------------------------


def test_parallel_sets_both_concurrency_flags() -> None:
    assert parallel_args(1) == ["--decode-concurrency", "1", "--prompt-concurrency", "1"]
    assert parallel_args(4) == ["--decode-concurrency", "4", "--prompt-concurrency", "4"]
    assert parallel_args(None) == []  # mlx-lm's defaults (32 and 8)


def test_the_server_command(tmp_path: Path) -> None:
    model = tmp_path / "m"
    server = MlxServer(tmp_path / "venv" / "bin" / "python", model, parallel=2, extra_args=("--prompt-cache-size", "0"))
    cmd = server.command(8123)
    assert cmd[:4] == [str(tmp_path / "venv" / "bin" / "python"), "-m", "mlx_lm", "server"]
    assert cmd[cmd.index("--model") + 1] == str(model.resolve())
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[-6:] == ["--decode-concurrency", "2", "--prompt-concurrency", "2", "--prompt-cache-size", "0"]
    assert "--decode-concurrency" not in MlxServer("python", model, parallel=None).command(1)
    with pytest.raises(UsageError):
        MlxServer("python", model, parallel=0)
    with pytest.raises(UsageError):
        server.check_inputs()  # no config.json


def test_the_server_env_is_offline_with_a_hugging_face_hub_folder(tmp_path: Path) -> None:
    env = server_env(tmp_path / "k")
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HOME"] == str(tmp_path / "k" / "runtime" / "hf")
    assert (tmp_path / "k" / "runtime" / "hf" / "hub").is_dir()  # /v1/models scans it
    assert "HF_HOME" not in server_env(None)


# -- the cache and the CLI -------------------------------------------------------------------------------


def test_cache_show_lists_the_mlx_env_and_model(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    env = provision_mlx(cache, base_python=fake_base)
    resolve_mlx_model("tiny", cache, env.python)
    lines = {e.kind: e.line() for e in list_entries(cache)}
    assert "MLX 0.32.4, mlx-lm 0.32.2 (cpu backend)" in lines["mlx"]
    models = [e.line() for e in list_entries(cache) if e.kind == "model"]
    assert any("MLX checkpoint" in line for line in models)


def test_cache_show_names_who_made_an_mlx_env_that_is_not_servecheck_s_own(tmp_path: Path) -> None:
    # benchmarks/mlx_versions.py keeps an older mlx-lm beside the cache's own, stamped as made by it
    folder = tmp_path / "cache" / "mlx" / "versions-mlx-0.32.4-lm-0.28.3-tf4"
    folder.mkdir(parents=True)
    (folder / "stamp.json").write_text(json.dumps({"mlx_version": "0.32.4", "mlx_lm_version": "0.28.3",
                                                   "backend": "cpu", "installed_at": "2026-12-06T00:00:00Z",
                                                   "install_s": 61.0, "made_by": "benchmarks/mlx_versions.py"}))
    (line,) = [e.line() for e in list_entries(EngineCache(tmp_path / "cache")) if e.kind == "mlx"]
    assert "mlx-lm 0.28.3 (cpu backend)" in line and line.endswith("for benchmarks/mlx_versions.py)"), line
    assert "unfinished" not in line


def test_cache_clear_removes_the_mlx_env(tmp_path: Path, fake_base: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    provision_mlx(cache, base_python=fake_base)
    with cache.all_locks():  # the MLX lock among them: a clear waits for an install
        assert clear(cache) > 0
    assert not (cache.root / "mlx").exists() and cached_mlx(cache, "cpu") is None


def test_flags_for_other_engines_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SERVECHECK_CACHE_DIR", str(tmp_path / "cache"))
    for args, words in ((["serve-local", "--engine", "mlx", "--threads", "2"], "--threads is not for --engine mlx"),
                        (["serve-local", "--engine", "mlx", "--ctx", "4096"], "--ctx is not for --engine mlx"),
                        (["demo", "--engine", "mlx", "--llama-server", "/bin/true"],
                         "--llama-server is for --engine llamacpp")):
        with pytest.raises(SystemExit) as done:
            main(args)
        assert done.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "cache" / "mlx").exists()  # refused before anything was installed
