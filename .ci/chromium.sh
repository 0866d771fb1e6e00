#!/usr/bin/env bash
# Sourced by .ci/run: headless Chromium and its WebDriver for the console's browser tests
# (issue #24, server/tests/it/console.rs), from Debian's packages when they are missing. Under
# CI=true a browser test without them fails, so a failed install shows up as that failure.

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "== installing Chromium and chromedriver (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium chromium-driver >/dev/null ||
        echo ".ci/chromium.sh: chromium could not be installed; the browser tests will fail" >&2
fi
