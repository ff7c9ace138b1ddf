"""MLX as a local engine: `mlx` and `mlx-lm` installed once into their own virtualenv in the cache,
and mlx-lm's OpenAI-compatible server on 127.0.0.1, stopped on every exit path. (Not `mlx.py`: the
model scripts run from this folder, where such a file would hide the `mlx` package; nor `mlx/`.)

On Linux the install takes MLX's CPU backend (`mlx[cpu]`, the `mlx-cpu` wheel); on macOS on Apple
silicon the same code takes plain `mlx`, which brings Metal (untested here: servecheck is tested on
Linux). An import check runs before the stamp is written, and the stamp is written last, so a
half-finished install is redone, never used.

What mlx-lm 0.32.2's server (`mlx_lm/server.py`) does that matters here:
* `--decode-concurrency` (default 32) and `--prompt-concurrency` (default 8) bound its batch; its
  BatchGenerator holds max(the two) requests at once, so servecheck's `--parallel N` sets both.
* A request is batched only without a `seed`, without `--kv-bits` and without a draft model;
  otherwise requests run one at a time, with no log line saying so.
* No `ignore_eos`, but `logit_bias` is honoured: see `load.eos`.
* `/v1/models` scans the Hugging Face cache and answers 200 with an empty body when that folder does
  not exist (`CacheNotFound`); servecheck points HF_HOME at a folder of its own that does.

The package keeps the two apart: `provision.py` installs the environment and provides the model,
`server.py` runs the server from it. Every name is re-exported here, where servecheck, its tests,
benchmarks and scripts import them from (`servecheck.engine.mlx_engine`); patch a name in its module.
"""

from __future__ import annotations

from servecheck.engine.mlx_engine.provision import (
    Backend,
    IMPORT_CHECK,
    IMPORT_CHECK_TIMEOUT_S,
    InstallStep,
    MIN_FREE_BYTES,
    MIN_GLIBC,
    MLX_INSTALL_RECIPE,
    MLX_LM_VERSION,
    MLX_VERSION,
    MlxEnv,
    MlxLocal,
    PIP_VERSION,
    Progress,
    RUNTIME_ENV,
    backend_for,
    cached_mlx,
    check_glibc,
    import_check,
    install_mlx,
    install_requirements,
    install_steps,
    mlx_folder,
    mlx_key,
    provision_mlx,
    provision_mlx_local,
    read_stamp,
    venv_python,
)
from servecheck.engine.mlx_engine.server import (
    MlxServer,
    SERVER_MODULE,
    parallel_args,
    server_env,
)

__all__ = [
    "Backend",
    "IMPORT_CHECK",
    "IMPORT_CHECK_TIMEOUT_S",
    "InstallStep",
    "MIN_FREE_BYTES",
    "MIN_GLIBC",
    "MLX_INSTALL_RECIPE",
    "MLX_LM_VERSION",
    "MLX_VERSION",
    "MlxEnv",
    "MlxLocal",
    "MlxServer",
    "PIP_VERSION",
    "Progress",
    "RUNTIME_ENV",
    "SERVER_MODULE",
    "backend_for",
    "cached_mlx",
    "check_glibc",
    "import_check",
    "install_mlx",
    "install_requirements",
    "install_steps",
    "mlx_folder",
    "mlx_key",
    "parallel_args",
    "provision_mlx",
    "provision_mlx_local",
    "read_stamp",
    "server_env",
    "venv_python",
]
