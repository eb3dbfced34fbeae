"""A copy of WMT 2014 in the archives' own formats (.tgz files with the members sacreBLEU and the
corpora name, .sgm test sets), small enough to write in a test, and the ways to point the package
at it: in this process (`monkeypatch`), or in processes a test starts (`site_dir`)."""
import io
import json
import tarfile
from pathlib import Path

from transformer_lib import data
from transformer_lib.data import MANIFEST, DataFile, sha256_of

TRAIN = {"europarl-v7": [("Resumption of the session", "Wiederaufnahme der Sitzungsperiode"),
                         ("I declare resumed the session.", "Ich erkläre die Sitzung für wieder "
                                                            "aufgenommen.")],
         "commoncrawl": [("The seven-day week.", "Die Sieben-Tage-Woche."), ("", "Leer."),
                         ("Two dogs.", "Zwei Hunde.")],
         "news-commentary-v9": [("Gold at $10,000?", "Gold für 10.000 Dollar?")]}
TESTS = {"newstest2013": [("A  republican strategy", "Eine republikanische Strategie"),
                          ("Tom &amp; Jerry.", "Tom &amp; Jerry.")],
         "newstest2014": [("Gutach: Increased safety", "Gutach: Noch mehr Sicherheit"),
                          ("The man-made lake.", "Der künstliche See.")]}


def add(tar: tarfile.TarFile, name: str, text: str) -> None:
    raw = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(raw)
    tar.addfile(info, io.BytesIO(raw))


def sgm(lines) -> str:
    segs = "".join(f'<seg id="{i}">{s}</seg>\n' for i, s in enumerate(lines, 1))
    return (f'<srcset setid="x" srclang="any">\n<doc docid="d" genre="news">\n{segs}</doc>\n'
            '</srcset>\n')


def write_archives(root: Path, train=TRAIN, tests=TESTS, broken=None) -> dict[str, str]:
    """The five archives under root/wmt14 (`broken`: the corpus whose German side gets one line
    too many); returns each archive's SHA-256."""
    from transformer_lib import wmt14
    archives = {}
    for name, part in wmt14.TRAIN_PARTS.items():
        archives.setdefault(part.archive, []).extend(
            [(part.en, "".join(en + "\n" for en, _ in train[name])),
             (part.de, "".join(de + "\n" for _, de in train[name])
              + ("extra line\n" if broken == name else ""))])
    for name, part in wmt14.TEST_PARTS.items():
        archives.setdefault(part.archive, []).extend(
            [(part.en, sgm(en for en, _ in tests[name])),
             (part.de, sgm(de for _, de in tests[name]))])
    sums = {}
    for archive, members in archives.items():
        path = Path(root) / archive
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz") as tar:
            for member, text in members:
                add(tar, member, text)
        sums[archive] = sha256_of(path)
    return sums


def write_fixture(root, monkeypatch, train=TRAIN, tests=TESTS, broken=None) -> None:
    """The archives under root/wmt14, and this process's manifest pointed at their checksums."""
    for archive, sha in write_archives(root, train, tests, broken).items():
        monkeypatch.setitem(MANIFEST, archive, DataFile(archive, sha, MANIFEST[archive].url))
    monkeypatch.setenv(data.ENV_VAR, str(root))


def site_dir(where: Path, sums: dict[str, str], hooks: bool = False) -> Path:
    """A directory that, first on PYTHONPATH, points the manifest of every Python process started
    (torchrun and its workers) at the fixture's checksums (`write_archives`), and only those; with
    `hooks`, also installs the faults and delays of tests/run_hooks.py."""
    from run_hooks import SITE_LINES
    where.mkdir(parents=True, exist_ok=True)
    (where / "fixture_sums.json").write_text(json.dumps(sums))
    (where / "sitecustomize.py").write_text(
        "import json, pathlib\n"
        "from transformer_lib.data import MANIFEST, DataFile\n"
        "sums = json.loads((pathlib.Path(__file__).parent / 'fixture_sums.json').read_text())\n"
        "for name, sha in sums.items():\n"
        "    MANIFEST[name] = DataFile(name, sha, MANIFEST[name].url)\n"
        + (SITE_LINES if hooks else ""))
    return where
