"""Binder files stay consistent with requirements.txt, and point at chapter 00."""

import re


def pins(path):
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==")
            found[name.strip().lower().replace("_", "-")] = version.strip()
    return found


# What the image adds for a class on a hub (docs/instructors.md, section 2): nbgitpuller, whose own
# needs (jupyter_server, tornado) are already pinned, so it adds nothing else.
HUB_EXTRAS = {"nbgitpuller"}


def test_binder_requirements_pin_the_same_versions(repo_root):
    main, binder = pins(repo_root / "requirements.txt"), pins(repo_root / "binder" / "requirements.txt")
    assert main, "requirements.txt has no pins"
    assert binder.pop("torch") == main.pop("torch") + "+cpu"  # CPU build of the same release
    extras = {name: binder.pop(name) for name in HUB_EXTRAS}
    assert binder == main
    assert extras["nbgitpuller"] == pins(repo_root / "requirements-grader.txt")["nbgitpuller"]  # the version tested
    assert "nbgitpuller" in (repo_root / "docs" / "instructors.md").read_text()


def test_every_requirement_is_pinned_exactly(repo_root):
    for name in ("requirements.txt", "requirements-test.txt", "requirements-grader.txt", "binder/requirements.txt"):
        for line in (repo_root / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line and not line.startswith("-"):
                assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][\w.+]*", line), f"{name}: not an exact pin: {line}"


def test_binder_uses_pytorch_cpu_index_python_311_graphviz(repo_root):
    binder = repo_root / "binder"
    assert "https://download.pytorch.org/whl/cpu" in (binder / "requirements.txt").read_text()
    assert (binder / "runtime.txt").read_text().strip() == "python-3.11"
    assert "graphviz" in (binder / "apt.txt").read_text().split()
    post = (binder / "postBuild").read_text()
    assert "pip install" in post and "./widgets" in post and "overrides.json" in post
    assert " -e " not in post, "an editable install points into the image's home, which a hub's volume hides"
    start = (binder / "start").read_text()
    assert start.rstrip().endswith('exec "$@"'), "repo2docker's start must hand over to the server"
    assert (binder / "start").stat().st_mode & 0o111 and (binder / "postBuild").stat().st_mode & 0o111


def test_readme_badges_open_chapter_00_at_the_release_tag(repo_root):
    """The README's badges are the ones the release writes into chapter 00 (one address, one tag)."""
    from autogradlab.release.launch import badges

    readme = (repo_root / "README.md").read_text()
    assert badges("00_welcome.ipynb") in readme
    match = re.search(r"https://mybinder\.org/v2/gh/[^)\s]+", readme)
    assert match and "urlpath=lab%2Ftree%2Fmy-chapters%2F00_welcome.ipynb" in match.group(0)  # the learner's copy
    assert "/HEAD?" not in readme, "Binder must build a tag, not a moving HEAD that rebuilds on every commit"


def test_the_package_ships_the_repository_licence(repo_root):
    """widgets/ is built on its own (pip, Colab): it carries a copy of the MIT licence, kept identical."""
    assert (repo_root / "widgets" / "LICENSE").read_text() == (repo_root / "LICENSE").read_text()
    assert "MIT License" in (repo_root / "LICENSE").read_text()
    assert "CC BY-SA 4.0" in (repo_root / "LICENSE-TEXT.md").read_text()
