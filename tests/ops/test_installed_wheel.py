"""The migrations ship inside the package: `m3grpc db upgrade` works from an installed
wheel, outside the checkout, with no alembic.ini anywhere."""

from __future__ import annotations

import venv
from pathlib import Path

from tests.support.wheel import build_wheel, run_installed


def _run(*args: str | Path, cwd: Path) -> str:
    return run_installed(*args, cwd=cwd).stdout


def test_db_upgrade_from_an_installed_wheel(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist", cwd=tmp_path)
    # The dependencies come from this interpreter's site-packages; m3grpc from the wheel.
    venv.create(tmp_path / "venv", with_pip=True, system_site_packages=True)
    bin_dir = tmp_path / "venv" / "bin"
    _run(bin_dir / "python", "-m", "pip", "install", "-q", "--no-deps", wheel, cwd=tmp_path)
    location = _run(
        bin_dir / "python",
        "-c",
        "import m3grpc.storage.migrate as m; print(m.MIGRATIONS)",
        cwd=tmp_path,
    )
    assert location.strip().startswith(str(tmp_path / "venv")), location
    database = tmp_path / "m3.sqlite"
    out = _run(bin_dir / "m3grpc", "db", "upgrade", "--database", database, cwd=tmp_path)
    assert out.strip().endswith("-> schema at revision 0002 (current)"), out
    assert not list(tmp_path.rglob("alembic.ini"))
