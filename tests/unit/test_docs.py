"""The README and docs a first user reads: links that resolve inside the repository, the setup step
they need, channel rules that hold, and a `make` install that shows progress."""

import re
from pathlib import Path

import pytest

from tidings.core.channels import pattern_matches, validate_channel, validate_pattern
from tidings.core.errors import ChannelError

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#]+)(?:#[^)]*)?\)")


def docs():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", docs(), ids=lambda p: p.name)
def test_relative_links_resolve_inside_the_repository(doc):
    for target in LINK.findall(doc.read_text()):
        if "://" in target:
            continue
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"{doc.name} links {target}"


def test_readme_says_how_to_get_the_command_and_names_no_file_outside_the_repository():
    text = (ROOT / "README.md").read_text()
    assert "../shared" not in text and "DESIGN.md" not in text
    assert ". .venv/bin/activate" in text and ".venv/bin" in text


def test_the_channel_rules_in_the_readme_hold():
    text = (ROOT / "README.md").read_text()
    assert "## Channels and patterns" in text and "Segments may be empty" in text
    assert validate_channel("a//b").count("/") == 2 and validate_channel("a/") == "a/"
    validate_channel("/".join(["s"] * 32))
    for bad in ("", "a/+", "a/#", "x" * 1025, "/".join(["s"] * 33), "a\x00b"):
        with pytest.raises(ChannelError):
            validate_channel(bad)
    for bad in ("a+", "a/#/b"):
        with pytest.raises(ChannelError):
            validate_pattern(bad)
    assert pattern_matches("nodes/#", "nodes") and pattern_matches("nodes/+/load", "nodes//load")
    assert not pattern_matches("#", "$sys/x") and not pattern_matches("+/x", "$sys/x")


def test_make_install_shows_progress():
    recipe = (ROOT / "Makefile").read_text().split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert recipe.splitlines()[1].lstrip().startswith("@echo")
    install = next(line for line in recipe.splitlines() if "-e '.[spark," in line)
    assert " -q " not in install and "--progress-bar on" in install
