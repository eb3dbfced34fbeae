"""Serve the built book on 127.0.0.1 (`make serve`): WebAssembly cannot be loaded from file://.

    python book/serve.py [book/_build/html] [--port 8000] [--no-gzip]

The responses carry the two headers that make the pages cross-origin isolated
(Cross-Origin-Opener-Policy: same-origin, Cross-Origin-Embedder-Policy: require-corp), so the page
"Try the translator" may run ONNX Runtime's WebAssembly on several threads; every file of the site
is served from this one origin, so nothing the pages load is refused by them.

Files are sent gzip-compressed to a browser that accepts it (`Content-Encoding: gzip`; compressed
once per file and kept in memory while the server runs), as most web hosts send them: GitHub Pages
compresses its responses too. For the translator page that is most of its bytes: the runtime's
14.2 MB WebAssembly file compresses to about a quarter. `--no-gzip` sends every file as it is.
The page checks (book/check_translator.py) use this server, and count every byte it sends.
Standard library only.
"""
from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import io
import threading
from pathlib import Path

# What is worth compressing: text, and the two large binary files of the translator page (the
# runtime's .wasm and the weights). Images and fonts are compressed already.
COMPRESSIBLE = {".html", ".css", ".js", ".mjs", ".json", ".svg", ".txt", ".xml", ".ipynb", ".wasm",
                ".onnx", ".bin", ".map"}


class _Counter(io.RawIOBase):
    """A writable stream that passes every write on and counts the bytes."""

    def __init__(self, raw, record: dict):
        self.raw, self.record = raw, record

    def writable(self):
        return True

    def write(self, data):
        self.record["bytes"] += len(data)
        return self.raw.write(data)

    def flush(self):
        self.raw.flush()


class IsolatedHandler(http.server.SimpleHTTPRequestHandler):
    """The site, cross-origin isolated, gzip where it helps, every response recorded in `sent`
    (a list of {path, status, bytes, encoding}: bytes counted on the wire, headers included)."""
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript"}
    compress = True
    sent: list[dict] = []
    _gzipped: dict[tuple, bytes] = {}
    _lock = threading.Lock()

    def setup(self):
        super().setup()
        self.record = {"path": None, "status": None, "bytes": 0, "encoding": None}
        self.wfile = _Counter(self.wfile, self.record)

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass

    def send_response(self, code, message=None):
        self.record.update(path=self.path, status=code)
        type(self).sent.append(self.record)
        super().send_response(code, message)

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()

    def send_head(self):
        path = Path(self.translate_path(self.path))
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (self.compress and accepts and path.suffix in COMPRESSIBLE and path.is_file()):
            return super().send_head()
        data = self._compressed(path)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Last-Modified", self.date_time_string(int(path.stat().st_mtime)))
        self.end_headers()
        self.record["encoding"] = "gzip"
        return io.BytesIO(data)

    @classmethod
    def _compressed(cls, path: Path) -> bytes:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        with cls._lock:
            if key not in cls._gzipped:
                cls._gzipped[key] = gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
            return cls._gzipped[key]


def handler(site: Path, compress: bool = True):
    """A handler class for `site`, with its own record of what it sent."""
    cls = type("SiteHandler", (IsolatedHandler,), {"compress": compress, "sent": []})
    return functools.partial(cls, directory=str(site)), cls


def serve_in_thread(site: Path, compress: bool = True):
    """Serve `site` on a free port of 127.0.0.1 from a thread: (server, its handler class, whose
    `sent` lists every response)."""
    factory, cls = handler(site, compress)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), factory)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, cls


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("site", nargs="?", default=str(Path(__file__).parent / "_build" / "html"))
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-gzip", action="store_true", help="send every file uncompressed")
    args = p.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").is_file():
        raise SystemExit(f"{site} holds no built site: run `make book` first")
    factory, _ = handler(site, compress=not args.no_gzip)
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), factory)
    except OSError as e:
        raise SystemExit(f"cannot serve on port {args.port} ({e.strerror}): another server may "
                         f"hold it; choose another, e.g. `make serve PORT={args.port + 1}`") from e
    with server:
        print(f"Serving {site} on http://127.0.0.1:{args.port}/ (the translator: "
              f"http://127.0.0.1:{args.port}/book/translator.html); Ctrl-C stops it.", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
