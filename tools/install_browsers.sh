#!/usr/bin/env bash
# Installs what the browser tests drive, from Debian's packages, where it is missing and this
# machine can: Chromium (the site, the PDF and the translator page), Firefox ESR (the translator
# page in a second browser) and poppler-utils (pdftotext reads the PDF back). .ci/run calls it before
# `make test`, where CI=true turns a browser test that finds no browser into a failure. Without root
# or apt-get it installs nothing and says so; `make test` then skips those tests, naming what to
# install.
set -uo pipefail
wanted=()
command -v chromium >/dev/null 2>&1 || wanted+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || command -v firefox >/dev/null 2>&1 || wanted+=(firefox-esr)
command -v pdftotext >/dev/null 2>&1 || wanted+=(poppler-utils)
if [ ${#wanted[@]} -eq 0 ]; then
  echo "browsers: chromium, firefox and pdftotext are installed"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "browsers: missing ${wanted[*]}; not root with apt-get, so nothing was installed" \
       "(Debian: apt-get install ${wanted[*]})"
  exit 0
fi
echo "browsers: installing ${wanted[*]} from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${wanted[@]}" >/tmp/install_browsers.log 2>&1; then
  apt-get update -q >>/tmp/install_browsers.log 2>&1
  apt-get install -y -q --no-install-recommends "${wanted[@]}" >>/tmp/install_browsers.log 2>&1 \
    || { echo "browsers: apt-get failed (/tmp/install_browsers.log):"; tail -5 /tmp/install_browsers.log; }
fi
exit 0
