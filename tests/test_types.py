"""The type checker over parapipe/ and device_agents/, at the settings of pyproject.toml's ``[tool.mypy]``
(which says why each was chosen). The same check from a shell: ``mypy`` in the repository root."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_finds_no_errors(monkeypatch, tmp_path):
    try:
        from mypy import api
    except ImportError:
        pytest.fail("mypy is missing: pip install -e '.[test]'", pytrace=False)
    monkeypatch.chdir(ROOT)  # [tool.mypy] files and mypy_path are relative to the repository root
    # its cache in a temporary folder: the suite leaves no .mypy_cache/ in the checkout
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                      "--cache-dir", str(tmp_path / "mypy-cache")])
    assert status == 0, f"mypy (exit status {status}):\n{stdout}{stderr}"
