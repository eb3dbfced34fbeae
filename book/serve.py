"""Serve the built book on 127.0.0.1 (`make serve`): WebAssembly cannot be loaded from file://.

    python book/serve.py [book/_build/html] [--port 8000]

The responses carry the two headers that make the pages cross-origin isolated
(Cross-Origin-Opener-Policy: same-origin, Cross-Origin-Embedder-Policy: require-corp), so the page
"Try the translator" may run ONNX Runtime's WebAssembly on several threads; every file of the site
is served from this one origin, so nothing the pages load is refused by them. Standard library only.
"""
from __future__ import annotations

import argparse
import functools
import http.server
from pathlib import Path


class IsolatedHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript"}

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("site", nargs="?", default=str(Path(__file__).parent / "_build" / "html"))
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").is_file():
        raise SystemExit(f"{site} holds no built site: run `make book` first")
    handler = functools.partial(IsolatedHandler, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler) as server:
        print(f"Serving {site} on http://127.0.0.1:{args.port}/ (the translator: "
              f"http://127.0.0.1:{args.port}/book/translator.html); Ctrl-C stops it.", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
