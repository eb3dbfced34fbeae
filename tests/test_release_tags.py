"""tools/release_tags.py (`make tags`): on a clone without tags, every release's tag is made again
at the commit where the release was made, and nothing else is touched."""
import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("release_tags", ROOT / "tools" / "release_tags.py")
release_tags = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release_tags)


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if git("rev-parse", "--is-shallow-repository", cwd=ROOT) == "true":
        pytest.skip("this checkout is shallow: the releases' commits are not in it")
    path = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-tags", "--single-branch", str(ROOT),
                    str(path)], check=True)
    return path


def test_a_tagless_clone_gets_every_release_tag_at_its_commit(clone, capsys):
    assert git("tag", "--list", cwd=clone) == ""
    assert release_tags.make_tags(clone) == 0
    tags = git("tag", "--list", "v*", cwd=clone).split()
    assert {"v0.2.0", "v0.3.0"} <= set(tags)
    for tag in tags:
        commit = git("rev-parse", f"{tag}^{{commit}}", cwd=clone)
        version = tag[1:]
        assert release_tags.version_at(commit, clone) == (version, version)
        # the release was made here: one commit earlier the two did not agree yet
        assert release_tags.version_at(f"{commit}^", clone) != (version, version)
        assert git("cat-file", "-t", tag, cwd=clone) == "tag"               # annotated
    # 0.1.0 was never released: its CHANGELOG entry never was the newest while it was the version
    assert "v0.1.0" not in tags
    assert release_tags.make_tags(clone) == 0                                # a second run: no-op
    assert "already at" in capsys.readouterr().out


def test_a_tag_at_another_commit_is_reported_and_left_alone(clone, capsys):
    git("tag", "-f", "-a", "v0.2.0", "-m", "moved", "HEAD", cwd=clone)
    assert release_tags.make_tags(clone, dry_run=True) == 1
    assert "left as it is" in capsys.readouterr().out
    assert git("rev-parse", "v0.2.0^{commit}", cwd=clone) == git("rev-parse", "HEAD", cwd=clone)


def test_a_shallow_clone_is_refused(tmp_path):
    path = tmp_path / "shallow"
    subprocess.run(["git", "clone", "--quiet", "--depth", "3", f"file://{ROOT}", str(path)],
                   check=True)
    with pytest.raises(SystemExit, match="shallow"):
        release_tags.release_commits(path)
