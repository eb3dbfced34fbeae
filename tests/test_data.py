"""transformer_lib.data: directory resolution, checksums, clear errors, loaders (on
../shared/data)."""
import gzip
import os
import shutil
from pathlib import Path

import pytest

from transformer_lib import data
from transformer_lib.data import ENV_VAR, MANIFEST, DataError, fetch, resolve_data_dir

SHARED = os.environ.get(ENV_VAR)


def test_resolution_order(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_data_dir() == tmp_path / "env"
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert resolve_data_dir() == tmp_path / "cache" / "transformer_lib"


def test_missing_file_offline_says_which_where_and_how(tmp_path):
    with pytest.raises(DataError) as e:
        fetch("multi30k/val.de.gz", data_dir=tmp_path, download=False)
    msg = str(e.value)
    assert "multi30k/val.de.gz" in msg and str(tmp_path) in msg and ENV_VAR in msg
    assert MANIFEST["multi30k/val.de.gz"].url in msg


def test_failed_download_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise OSError("network is unreachable")
    monkeypatch.setattr(data.urllib.request, "urlopen", no_network)
    with pytest.raises(DataError, match="download from .* failed") as e:
        fetch("tinyshakespeare/input.txt", data_dir=tmp_path)
    assert "network is unreachable" in str(e.value) and ENV_VAR in str(e.value)
    assert not any(p.is_file() for p in tmp_path.rglob("*"))              # no partial file left


def test_download_that_matches_is_kept(tmp_path, monkeypatch):
    """The success path: verified bytes are moved into place and found again without the network."""
    import hashlib
    import io

    payload = b"a stand-in for the dataset"
    entry = MANIFEST["tinyshakespeare/input.txt"]
    monkeypatch.setitem(MANIFEST, entry.path,
                        data.DataFile(entry.path, hashlib.sha256(payload).hexdigest(), entry.url))
    monkeypatch.setattr(data.urllib.request, "urlopen", lambda *a, **k: io.BytesIO(payload))
    path = fetch(entry.path, data_dir=tmp_path)
    assert path == tmp_path / entry.path and path.read_bytes() == payload
    assert [p.name for p in path.parent.iterdir()] == ["input.txt"]         # the .part file is gone
    assert fetch(entry.path, data_dir=tmp_path, download=False) == path


def test_download_with_wrong_bytes_is_discarded(tmp_path, monkeypatch):
    import io

    monkeypatch.setattr(data.urllib.request, "urlopen", lambda *a, **k: io.BytesIO(b"not the file"))
    with pytest.raises(DataError, match="SHA-256"):
        fetch("tinyshakespeare/input.txt", data_dir=tmp_path)
    assert not (tmp_path / "tinyshakespeare" / "input.txt").exists()
    assert not list((tmp_path / "tinyshakespeare").glob("*.part"))


def test_unknown_file_and_split():
    with pytest.raises(DataError, match="Unknown dataset file"):
        fetch("nope.txt")
    with pytest.raises(ValueError, match="split must be one of"):
        data.load_multi30k("dev")


@pytest.mark.needs_data
def test_corrupt_file_is_never_used(tmp_path):
    target = tmp_path / "multi30k" / "val.de.gz"
    target.parent.mkdir()
    raw = bytearray(Path(SHARED, "multi30k", "val.de.gz").read_bytes())
    raw[100] ^= 0xFF
    target.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="corrupt"):
        fetch("multi30k/val.de.gz", data_dir=tmp_path, download=False)


@pytest.mark.parametrize("download", [False, True])
def test_a_directory_where_the_file_should_be(tmp_path, monkeypatch, download):
    """A folder in place of the dataset file (or a file in place of its folder) is named, with what
    to do: no bare IsADirectoryError, no download attempted, nothing changed."""
    def no_download(*args, **kwargs):
        raise AssertionError("must not download")
    monkeypatch.setattr(data.urllib.request, "urlopen", no_download)
    (tmp_path / "multi30k" / "val.de.gz").mkdir(parents=True)
    with pytest.raises(DataError, match=rf"Dataset file 'multi30k/val.de.gz' in {tmp_path} is a "
                                        rf"directory \({tmp_path / 'multi30k' / 'val.de.gz'}\), "
                                        "not the file. Remove or rename that directory") as e:
        fetch("multi30k/val.de.gz", data_dir=tmp_path, download=download)
    assert ENV_VAR in str(e.value)
    (tmp_path / "tinyshakespeare").write_text("a file where the folder should be")
    with pytest.raises(DataError, match=rf"Dataset file 'tinyshakespeare/input.txt' cannot be in "
                                        rf"{tmp_path}: {tmp_path / 'tinyshakespeare'} is a file, "
                                        "not a directory"):
        fetch("tinyshakespeare/input.txt", data_dir=tmp_path, download=download)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["multi30k", "tinyshakespeare",
                                                           "val.de.gz"]
    with pytest.raises(IsADirectoryError, match=rf"translator file {tmp_path} is a directory; "
                                                "give the file that save_translator wrote"):
        data.load_translator(tmp_path)


@pytest.mark.needs_data
def test_loaders_on_shared_data():
    for split, n in [("train", 29000), ("val", 1014), ("test_2016_flickr", 1000)]:
        pairs = data.load_multi30k(split)
        assert len(pairs) == n and all(de and en for de, en in pairs)
    # (German, English), in that order, line i with line i.
    assert data.load_multi30k("train")[0] == ("Zwei junge weiße Männer sind im Freien in der Nähe "
                                              "vieler Büsche.",
                                              "Two young, White males are outside near many "
                                              "bushes.")
    text = data.load_tiny_shakespeare()
    assert len(text) == 1_115_394 and len(set(text)) == 65 and text.startswith("First Citizen:")
    pairs = data.load_tatoeba_fra_eng()
    assert len(pairs) == 142787 and all(len(p) == 2 and p[0] and p[1] for p in pairs)
    assert pairs[0] == ("Go.", "Va !")                                   # (English, French)


@pytest.mark.needs_data
def test_mismatched_parallel_files_are_rejected(tmp_path, monkeypatch):
    d = tmp_path / "multi30k"
    d.mkdir()
    for lang in ("de", "en"):
        shutil.copy(Path(SHARED, "multi30k", f"val.{lang}.gz"), d / f"val.{lang}.gz")
    with gzip.open(d / "val.en.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    with gzip.open(d / "val.en.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines[:-1]) + "\n")
    # Pretend this shortened file is the genuine one, so only the length check can catch it.
    entry = MANIFEST["multi30k/val.en.gz"]
    monkeypatch.setitem(MANIFEST, "multi30k/val.en.gz",
                        data.DataFile(entry.path, data.sha256_of(d / "val.en.gz"), entry.url))
    with pytest.raises(DataError, match="1014 German lines but 1013 English lines"):
        data.load_multi30k("val", data_dir=tmp_path)


def test_a_failed_download_leaves_no_empty_folders(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise OSError("network is unreachable")
    monkeypatch.setattr(data.urllib.request, "urlopen", no_network)
    root = tmp_path / "cache" / "transformer_lib"
    with pytest.raises(DataError, match="network is unreachable"):
        fetch("multi30k/train.de.gz", data_dir=root)
    assert list(tmp_path.iterdir()) == []             # neither multi30k/ nor cache/transformer_lib/
    (tmp_path / "mine").mkdir()                               # a folder that was there before stays
    with pytest.raises(DataError):
        fetch("multi30k/train.de.gz", data_dir=tmp_path / "mine")
    assert [p.name for p in tmp_path.rglob("*")] == ["mine"]


def test_a_server_that_never_answers_is_given_up_quickly_and_said_so(tmp_path, monkeypatch, capsys):
    import urllib.error
    seen = {}

    def silent_server(url, timeout=None, **kwargs):
        seen["timeout"] = timeout
        raise urllib.error.URLError(TimeoutError("timed out"))
    monkeypatch.setattr(data.urllib.request, "urlopen", silent_server)
    with pytest.raises(DataError, match=r"failed \(no answer within 15 s\)"):
        fetch("tinyshakespeare/input.txt", data_dir=tmp_path)
    assert seen["timeout"] == data.DOWNLOAD_TIMEOUT_S <= 15
    err = capsys.readouterr().err
    assert ("downloading 'tinyshakespeare/input.txt' from https://" in err
            and "after 15 s without an answer" in err)


MULTI30K_FILES = [f"multi30k/{split}.{lang}.gz" for split in data.MULTI30K_SPLITS
                  for lang in ("de", "en")]


def test_every_missing_file_is_named_at_once(tmp_path, monkeypatch):
    """A reader supplying files by hand learns of all of them in one error (not six in turn), with
    where each comes from and where it goes; after one failed download no other is tried."""
    tried = []

    def no_network(url, *args, **kwargs):
        tried.append(url)
        raise OSError("network is unreachable")
    monkeypatch.setattr(data.urllib.request, "urlopen", no_network)
    with pytest.raises(DataError) as e:
        data.fetch_all(MULTI30K_FILES, data_dir=tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"6 of the 6 dataset files needed are missing or unusable in {tmp_path}")
    for name in MULTI30K_FILES:
        assert f"'{name}' not found" in msg and f"{MANIFEST[name].url} -> {tmp_path / name}" in msg
    assert "network is unreachable" in msg and ENV_VAR in msg and len(tried) == 1
    # one pair for one split: the loader names both of its files
    with pytest.raises(DataError, match=r"2 of the 2 .*'multi30k/val\.de\.gz' not found.*"
                                        r"'multi30k/val\.en\.gz' not found"):
        data.load_multi30k("val", data_dir=tmp_path, download=False)


@pytest.mark.needs_data
def test_missing_and_corrupt_files_are_named_together(tmp_path):
    (tmp_path / "multi30k").mkdir()
    for name in MULTI30K_FILES[:3]:
        shutil.copy(Path(SHARED, name), tmp_path / name)
    (tmp_path / MULTI30K_FILES[1]).write_bytes(b"not gzip")
    with pytest.raises(DataError) as e:
        data.fetch_all(MULTI30K_FILES, data_dir=tmp_path, download=False)
    msg = str(e.value)
    assert msg.startswith("4 of the 6 dataset files")
    assert f"'{MULTI30K_FILES[1]}' fails its checksum" in msg
    assert all(f"'{n}' not found" in msg for n in MULTI30K_FILES[3:])
    assert MULTI30K_FILES[0] not in msg and f"'{MULTI30K_FILES[2]}'" not in msg
    # a single problem keeps fetch's own message
    with pytest.raises(DataError, match="Dataset file 'multi30k/val.en.gz' not found"):
        data.fetch_all(["multi30k/train.de.gz", "multi30k/val.en.gz"], data_dir=tmp_path,
                       download=False)


def test_the_needs_data_marker_looks_where_the_package_does(monkeypatch, tmp_path):
    import conftest  # tests/conftest.py: the shared markers
    assert conftest.ENV_VAR == ENV_VAR
    monkeypatch.setattr(conftest, "CACHE", tmp_path / "no-cache")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert not conftest.have_dataset("multi30k")
    (tmp_path / "multi30k").mkdir()
    assert conftest.have_dataset("multi30k") and not conftest.have_dataset("tinyshakespeare")
    monkeypatch.delenv(ENV_VAR)
    assert not conftest.have_dataset("multi30k")
