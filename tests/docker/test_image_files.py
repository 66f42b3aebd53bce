"""What the image is built from, checked without Docker: every file the Dockerfile
copies from the build context is in it (.dockerignore is an allow-list), and the
package build in the image gets the files pyproject.toml names (its readme: without
it `pip install .` fails)."""

from __future__ import annotations

import shlex
import tomllib

from tests.docker.conftest import ROOT


def context_copies() -> list[tuple[str, list[str]]]:
    """(stage, sources) of each COPY from the build context."""
    copies = []
    stage = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if not line.startswith(("FROM ", "COPY ")):
            continue
        words = shlex.split(line, comments=True)
        if words[0] == "FROM":
            stage = words[-1]
        if words[0] == "COPY" and not any(w.startswith("--from") for w in words):
            arguments = [w for w in words[1:] if not w.startswith("--")]
            copies.append((stage, arguments[:-1]))
    return copies


def allowed(path: str) -> bool:
    patterns = (ROOT / ".dockerignore").read_text().splitlines()
    allows = [p[1:].rstrip("/") for p in patterns if p.startswith("!")]
    return any(path == allow or path.startswith(allow + "/") for allow in allows)


def test_every_copied_file_is_in_the_build_context() -> None:
    copies = context_copies()
    assert copies, "no COPY found"
    for _, sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), source
            assert allowed(source.rstrip("/")), f"{source} is left out by .dockerignore"


def test_the_package_build_gets_the_files_pyproject_names() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = [project["readme"], *project["license-files"]]
    build = [
        source for stage, sources in context_copies() if stage == "build" for source in sources
    ]
    for name in named:
        assert name in build, f"the build stage does not copy {name}"
