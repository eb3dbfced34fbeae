"""Make the release tags that a repository published from `main` alone lacks (`make tags`).

    python tools/release_tags.py [--dry-run]

Every notebook's set-up cell installs the git tag `vX.Y.Z` of the version it was written for, but
tags do not travel with a branch: a fresh publish of `main`, or a clone made without tags, has
none. A release is the commit where it was made (CHANGELOG.md, "How a release is made"): the first
commit on the first-parent history of HEAD at which `transformer_lib/__init__.py` says
`__version__ = "X.Y.Z"` and CHANGELOG.md's newest entry is `## [X.Y.Z]`. This script finds that
commit for every version and makes each missing annotated tag there. A tag that already exists is
left alone if it names that commit and reported (exit status 1) if it names another. `--dry-run`
prints what it would do. Afterwards, `git push origin --tags` publishes them. Standard library only.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

VERSION_FILE = "transformer_lib/__init__.py"
CHANGELOG = "CHANGELOG.md"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def version_at(commit: str, cwd: Path) -> tuple[str | None, str | None]:
    """(__version__, CHANGELOG's newest entry) at `commit`; None where a file or line is absent."""
    def show(path: str) -> str:
        try:
            return git("show", f"{commit}:{path}", cwd=cwd)
        except subprocess.CalledProcessError:
            return ""
    version = re.search(r'^__version__ = "([^"]+)"', show(VERSION_FILE), re.M)
    entry = re.search(r"^## \[(\d+\.\d+\.\d+)\]", show(CHANGELOG), re.M)
    return (version[1] if version else None), (entry[1] if entry else None)


def release_commits(cwd: Path) -> dict[str, str]:
    """Version -> the first commit of HEAD's first-parent history where the two agree."""
    if git("rev-parse", "--is-shallow-repository", cwd=cwd).strip() == "true":
        raise SystemExit("this clone is shallow: its first commits are missing, so the commit of "
                         "a release cannot be told (git fetch --unshallow first)")
    found: dict[str, str] = {}
    # agreement can only begin at a commit that changes one of the two files
    for commit in git("log", "--first-parent", "--reverse", "--format=%H", "HEAD", "--",
                      VERSION_FILE, CHANGELOG, cwd=cwd).split():
        version, entry = version_at(commit, cwd)
        if version and version == entry and version not in found:
            found[version] = commit
    return found


def make_tags(cwd: Path, dry_run: bool = False) -> int:
    """Create the missing tags; returns the exit status (1 if a tag names another commit)."""
    status = 0
    for version, commit in release_commits(cwd).items():
        tag = f"v{version}"
        try:
            have = git("rev-parse", f"{tag}^{{commit}}", cwd=cwd).strip()
        except subprocess.CalledProcessError:
            have = None
        if have == commit:
            print(f"{tag}: already at {commit[:12]}")
        elif have:
            print(f"{tag}: names {have[:12]}, but the release was made at {commit[:12]}; left "
                  "as it is (delete it with `git tag -d` to have it made again)")
            status = 1
        elif dry_run:
            print(f"{tag}: would be made at {commit[:12]}")
        else:
            git("tag", "-a", tag, "-m", f"transformer_lib {version}", commit, cwd=cwd)
            print(f"{tag}: made at {commit[:12]}")
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dry-run", action="store_true", help="say what would be made, make nothing")
    p.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]),
                   help="the repository (default: this one)")
    args = p.parse_args(argv)
    return make_tags(Path(args.repo), args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
