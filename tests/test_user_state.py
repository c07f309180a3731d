"""The suite keeps off the user's state (tests/conftest.py): it runs in a temporary working folder, and the
caches it would fill (agent copies on the loopback SSH host, ONNX Runtime's and matplotlib's files) are
temporary folders. ``.ci/run`` checks the whole README test command: the checkout, ignored files included, and
the account's cache are as they were."""
from __future__ import annotations

import os
from pathlib import Path

from parapipe.app.deploy import DEFAULT_REMOTE_DIR, DeployOptions, default_remote_dir
from parapipe.remote.remote_agent import AGENT_CACHE_DIR, HOST_CACHE_ENV, host_cache_dir

REPO = Path(__file__).resolve().parent.parent


def _outside(path: Path, folder: Path) -> bool:
    return folder.resolve() not in [path.resolve(), *path.resolve().parents]


def test_tests_run_outside_the_checkout_and_the_account_cache():
    cwd = Path.cwd()
    assert _outside(cwd, REPO), cwd  # profile.sqlite, out/, out/deploy of the commands' defaults land here
    account_cache = Path(os.path.expanduser("~")) / ".cache"
    for name in ("PARAPIPE_HOST_CACHE_DIR", "XDG_CACHE_HOME", "MPLCONFIGDIR"):
        folder = Path(os.environ[name])
        assert folder.is_dir() and _outside(folder, REPO) and _outside(folder, account_cache), (name, folder)


def test_the_host_cache_folder_follows_the_environment(monkeypatch):
    monkeypatch.setenv(HOST_CACHE_ENV, "/srv/pp cache")
    assert host_cache_dir() == "/srv/pp cache"
    assert default_remote_dir() == DeployOptions().remote_dir == "/srv/pp cache/deploy"
    for unset in ("", "  "):
        monkeypatch.setenv(HOST_CACHE_ENV, unset)
        assert host_cache_dir() == AGENT_CACHE_DIR == ".cache/parapipe"
        assert DeployOptions().remote_dir == DEFAULT_REMOTE_DIR == ".cache/parapipe/deploy"
    monkeypatch.delenv(HOST_CACHE_ENV)
    assert host_cache_dir() == AGENT_CACHE_DIR and default_remote_dir() == DEFAULT_REMOTE_DIR
