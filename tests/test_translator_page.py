"""The page "Try the translator" in headless Chromium (book/check_translator.py), where Chromium
is installed: its files (book/_static/translator, which `make test` and `make book` fill from npm
and the export) on a page of their own, against the PyTorch translator; and the file picker with a
tiny translator trained here by the command line's `--export-web`. `make browser-check` runs the
same checks on the built book's page."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "book" / "_static" / "translator"

_spec = importlib.util.spec_from_file_location("check_translator",
                                               ROOT / "book" / "check_translator.py")
check_translator = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_translator)

needs_chromium = pytest.mark.needs_browser("chromium",
                                           check_translator.check_site.find_chromium(None))
needs_assets = pytest.mark.skipif(
    not (STATIC / "vendor" / "ort.wasm.min.mjs").is_file()
    or not (STATIC / "model" / "manifest.json").is_file(),
    reason="the page's runtime and model are not in book/_static/translator (make translator)")


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """A translator trained for 20 updates by the command line, exported with --export-web."""
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run([sys.executable, "-m", "transformer_lib.train", "--preset", "cpu-tiny",
                    "--max-steps", "20", "--train-pairs", "2000", "--eval-sentences", "5",
                    "--test-sentences", "5", "--no-progress", "--out-dir", str(out / "run"),
                    "--export-web", str(out / "web")], check=True, capture_output=True)
    return out / "web"


@needs_chromium
@needs_assets
@pytest.mark.needs_data
@pytest.mark.slow
def test_the_page_translates_as_pytorch_does_and_refuses_bad_input(tmp_path, tiny_export):
    site, rel = check_translator.harness_site(tmp_path / "site")
    checks = check_translator.run(site, rel, quick=False, own=tiny_export)
    assert not checks.failures, "\n".join(checks.failures)
    assert len(checks.notes) >= 20                  # every check ran


def test_the_harness_page_holds_the_contracts_elements(tmp_path):
    site, rel = check_translator.harness_site(tmp_path / "site")
    page = (site / rel).read_text()
    assert 'id="ad-translator"' in page and "boot.js" in page
    js = (STATIC / "translator.js").read_text()
    for name in ("ad-source", "ad-translate", "ad-output", "attentionDerived"):
        assert name in js
    assert "innerHTML" not in js and "innerHTML" not in (STATIC / "boot.js").read_text()


def test_the_page_loads_nothing_from_another_host():
    for path in STATIC.glob("*.js"):
        text = path.read_text()
        text = text.replace("http://127.0.0.1", "").replace("http://www.w3.org/2000/svg", "")
        assert "http://" not in text and "https://" not in text, path
