"""The migrations ship inside the package: `m3grpc db upgrade` works from an installed
wheel, outside the checkout, with no alembic.ini anywhere. A release build (`python -m
build`: the sdist, and the wheel built from it) passes `twine check --strict`."""

from __future__ import annotations

import sys
import tarfile
import venv
import zipfile
from pathlib import Path

from m3grpc.storage.schema_version import HEAD_REVISION
from tests.support.locks import PYTHON_BUILD, exclusive
from tests.support.wheel import ROOT, build_wheel, run_installed


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
    assert out.strip().endswith(f"-> schema at revision {HEAD_REVISION} (current)"), out
    assert not list(tmp_path.rglob("alembic.ini"))


def test_a_release_build_passes_twine_check(tmp_path: Path) -> None:
    # `pip install m3grpc` finds nothing on a package index: the Python client is
    # installed from a checkout or from this wheel, whose metadata twine checks as an
    # upload would (it failed: no long_description).
    dist = tmp_path / "dist"
    with exclusive(PYTHON_BUILD):  # the sdist step writes ROOT/m3grpc.egg-info
        run_installed(
            sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT, cwd=tmp_path
        )
    [sdist] = dist.glob("m3grpc-*.tar.gz")
    [wheel] = dist.glob("m3grpc-*.whl")
    checked = run_installed(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel)
    assert "FAILED" not in checked.stdout and "WARNING" not in checked.stdout, checked.stdout
    # The wheel was built from the sdist: what the package needs at run time is in both.
    with tarfile.open(sdist) as archive:
        packed = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    with zipfile.ZipFile(wheel) as archive:
        built = set(archive.namelist())
    for needed in (
        "m3grpc/api/inbox/static/inbox.js",
        "m3grpc/storage/migrations/env.py",
        "m3grpc/wire/gen/m3/v1/execution_service_pb2.py",
    ):
        assert needed in built, needed
        assert needed in packed, needed
    assert "README.md" in packed
