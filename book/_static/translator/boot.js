// The first script of the page "Try the translator" (book/translator.md): a classic script, so that
// it runs even where a module cannot load (a page opened from a file). It says in one line why the
// translator cannot start there, or shows the static figure where WebAssembly is missing, and
// otherwise loads the translator (translator.js, a module) into the element #ad-translator.
(function () {
  "use strict";
  var root = document.getElementById("ad-translator");
  if (!root) return;
  function say(text) {
    var p = document.createElement("p");
    p.className = "ad-unavailable";
    p.textContent = text;
    var loading = root.querySelector(".ad-loading");
    if (loading) loading.remove();
    root.insertBefore(p, root.firstChild);
    root.classList.add("ad-static-only");
  }
  if (location.protocol === "file:") {
    say("This page was opened from a file, and browsers load WebAssembly only over HTTP: " +
        "run `make serve` in the repository and open http://127.0.0.1:8000/book/translator.html " +
        "(or serve book/_build/html with any web server).");
    return;
  }
  if (typeof WebAssembly !== "object" || typeof WebAssembly.instantiate !== "function") {
    say("This browser has no WebAssembly, so the translator cannot run here; the figure below " +
        "shows the attention heads of one sentence instead.");
    return;
  }
  var script = document.createElement("script");
  script.type = "module";
  script.src = new URL("translator.js", document.currentScript.src).href;
  document.head.appendChild(script);
})();
