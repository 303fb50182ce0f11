"""Every link of the README and the documentation stays inside the repository and reaches a file that exists (the
documentation site's own build, `mkdocs build --strict` in `make lint`, checks the links between its pages)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "experiments" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_stay_in_the_repository_and_resolve(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://", target):
            continue  # the web (the paper, verl)
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(REPO), f"{page.name}: {target} leaves the repository"
        assert path.exists(), f"{page.name}: {target} does not exist"


def test_the_readme_fits_on_two_screens():
    assert len((REPO / "README.md").read_text().splitlines()) <= 160, (
        "move details to docs/ (README: what a newcomer needs)"
    )
