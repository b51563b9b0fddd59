"""The classroom recipe of docs/instructors.md, section 2, as far as it runs without a hub.

- binder/postBuild installs a regular (not editable) package: it still imports, data included, once
  the repository it was built from is gone (a hub's user volume hides the image's home);
- binder/start, run at every start, copies the chapters a learner lacks into ~/my-chapters and keeps theirs;
- nbgitpuller pulls a course update a second time on a branch, keeping the learner's edits (on a tag it
  cannot: the guide's link names a branch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GRADER_PYTHON = ROOT / ".venv-grader" / "bin" / "python"


def run(args, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def image_env(tmp_path: Path) -> Path:
    """A fresh environment, as the image's: its own site-packages, the course's other packages visible.

    No pip of its own (fast to make): a `pip` script runs .venv's pip module with this python, so pip
    installs into this environment, as repo2docker's pip installs into the image's.
    """
    env = tmp_path / "image-env"
    run([sys.executable, "-m", "venv", "--without-pip", str(env)])
    site = run([env / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    (Path(site.stdout.strip()) / "course-packages.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
    )
    pip = env / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nexec "{env / "bin" / "python"}" -m pip "$@"\n')
    pip.chmod(0o755)
    return env


def copy_repository(to: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".ipynb_checkpoints")
    for part in ("binder", "chapters", "widgets"):
        shutil.copytree(ROOT / part, to / part, ignore=ignore)
    return to


def test_postbuild_installs_a_package_that_works_when_the_repository_is_gone(tmp_path):
    env, repo = image_env(tmp_path), copy_repository(tmp_path / "home" / "jovyan")
    path = f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}"
    run(["bash", "binder/postBuild"], cwd=repo, env=dict(os.environ, PATH=path, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert sorted(p.name for p in (repo / "my-chapters").glob("*.ipynb")) == sorted(
        p.name for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")
    )
    assert not (repo / "widgets" / "build").exists()
    shutil.rmtree(repo.parent)  # the hub's volume hides it: as good as gone
    probe = textwrap.dedent("""
        import json, autogradlab, autogradlab.checks.ch00, autogradlab.views
        from autogradlab.models.experiments.recorded import data_dir
        print(json.dumps({"file": autogradlab.__file__, "data": str(data_dir()), "has_data": any(data_dir().glob("*.json"))}))
    """)
    done = run(
        [env / "bin" / "python", "-c", probe], cwd=tmp_path, env=dict(os.environ, MPLCONFIGDIR=str(tmp_path / "mpl"))
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(found["file"]).is_relative_to(env) and Path(found["data"]).is_relative_to(env), found
    assert found["has_data"], found
    settings = next(env.glob("share/jupyter/lab/settings/overrides.json"), None)
    assert settings is not None and settings.read_text() == (ROOT / "binder" / "overrides.json").read_text()


def start(repo: Path, home: Path, **extra) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **extra
    )
    return run(["bash", str(repo / "binder" / "start"), "echo", "server started"], cwd=home, env=env)


def test_start_copies_new_chapters_into_the_home_volume_and_keeps_the_learners(tmp_path):
    repo = copy_repository(tmp_path / "srv" / "repo")  # repo2docker --target-repo-dir: outside the home
    home = tmp_path / "home"
    home.mkdir()  # the learner's first login: an empty volume
    first = start(repo, home)
    assert first.stdout.strip().endswith("server started")  # then hands over to the server
    mine = home / "my-chapters"
    names = sorted(p.name for p in (repo / "chapters").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(p.name for p in mine.glob("*.ipynb")) == names
    # The learner works in chapter 00; a new image brings a changed 00 and a new chapter.
    (mine / names[0]).write_text("my answers")
    (repo / "chapters" / names[0]).write_text("the course's fix")
    (repo / "chapters" / "99_new.ipynb").write_text("a new chapter")
    second = start(repo, home)
    assert (mine / names[0]).read_text() == "my answers" and (mine / "99_new.ipynb").is_file()
    assert f"kept your {names[0]}" in second.stdout
    (mine / "99_new.ipynb").unlink()
    start(repo, home, AUTOGRADLAB_COPY="0")  # a hub that takes its content from nbgitpuller instead
    assert not (mine / "99_new.ipynb").exists()


PULL = textwrap.dedent("""
    import sys
    from nbgitpuller.pull import GitPuller
    for line in GitPuller(sys.argv[1], sys.argv[3], branch=sys.argv[2]).pull():
        print(line, end="")
""")


def git(*args, cwd: Path) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="course", GIT_AUTHOR_EMAIL="c@example.org", GIT_COMMITTER_NAME="course")
    env["GIT_COMMITTER_EMAIL"] = "c@example.org"
    return run(["git", *args], cwd=cwd, env=env).stdout


def pull(url: str, ref: str, target: Path, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(home))  # nbgitpuller's own commits use its own identity, not the user's
    return subprocess.run(
        [GRADER_PYTHON, "-c", PULL, url, ref, str(target)], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.skipif(not GRADER_PYTHON.exists(), reason=".venv-grader is missing: run `make test`, which creates it")
def test_nbgitpuller_pulls_an_update_twice_on_a_branch_and_keeps_the_learners_edit(tmp_path):
    upstream, home = tmp_path / "course.git", tmp_path / "home"
    home.mkdir()
    work = tmp_path / "course-work"
    (work / "chapters").mkdir(parents=True)
    shutil.copy(ROOT / "chapters" / "00_welcome.ipynb", work / "chapters")
    git("init", "-q", "-b", "main", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "v1", cwd=work)
    git("tag", "v0.1.0", cwd=work)
    git("clone", "-q", "--bare", str(work), str(upstream), cwd=tmp_path)
    url = upstream.as_uri()

    target = home / "autograd-lab"
    assert pull(url, "main", target, home).returncode == 0  # first click: a clone
    learner_copy = target / "chapters" / "00_welcome.ipynb"
    learner_copy.write_text(learner_copy.read_text().replace("Welcome", "Welcome (my notes)", 1))
    mine = learner_copy.read_text()
    shutil.copy(ROOT / "chapters" / "01_dynamic_graph.ipynb", work / "chapters")  # the course's update
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "v2: chapter 01", cwd=work)
    git("push", "-q", str(upstream), "main", cwd=work)
    second = pull(url, "main", target, home)  # second click: a merge that keeps the learner's edit
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert (target / "chapters" / "01_dynamic_graph.ipynb").is_file() and learner_copy.read_text() == mine

    # A tag works once only: nbgitpuller's second pull diffs against origin/<tag>, which does not exist.
    on_tag = home / "on-tag"
    assert pull(url, "v0.1.0", on_tag, home).returncode == 0
    again = pull(url, "v0.1.0", on_tag, home)
    assert again.returncode != 0 and "origin/v0.1.0" in again.stdout + again.stderr
