#!/usr/bin/env bats
# test-runner: parallel
# E2B's desktop template: the e2b-desktop image (images/desktop, built
# offline from Debian's archive by scripts/base-image.sh desktop; skipped
# when it cannot be built), and the unmodified npm @e2b/desktop SDK driving
# it through serve's `desktop` template (test/serve/desktop.mjs): Xvfb and
# Xfce started by the SDK, Chromium launched and opened, typing and clicks
# through xdotool read back from the window title, the mouse, a screenshot
# whose pixels are the page's, and the stream's x11vnc and noVNC in the
# sandbox. Heavy: the plain build only.

load helpers

bats_require_minimum_version 1.5.0

KEY=e2b_0123456789abcdef0123456789abcdef01234567

setup_file() {
  export DESKTOP_SDK=
  if command -v node >/dev/null && mods=$("$AGSX_SRCDIR/test/serve/npm-install" --desktop 2>/dev/null); then
    DESKTOP_SDK=$mods
  fi
}

setup() {
  common_setup
  AX_TIMEOUT=120
  SRV_PID=
}

teardown() {
  local rc=0
  serve_stop || rc=1
  sandbox_teardown || rc=1
  return $rc
}

# Builds e2b-desktop once per file into a store of the file's (the
# debootstrap rootfs with the recipe's packages is cached under
# AGSX_TEST_CACHE: minutes the first time) and points $ROOT at it; skips
# when it cannot be built here.
desktop_image() {
  heavy
  command -v debootstrap >/dev/null || skip "no debootstrap"
  local r=$BATS_FILE_TMPDIR/desktop
  if ! [ -e "$r/built" ]; then
    AGSX_ROOT=$r/root AGSX_STATE=$r/state "$AGSX_SRCDIR/scripts/base-image.sh" "$(dirname "$AGSX")" desktop \
      >"$r.log" 2>&1 || skip "e2b-desktop could not be built: $(tail -1 "$r.log")"
    touch "$r/built"
  fi
  ROOT=$r/root
}

@test "e2b-desktop: user, sudo's shape, the desktop's programs; noVNC where @e2b/desktop looks" {
  desktop_image
  run_ax run --rm e2b-desktop bash -c 'whoami; pwd
    for p in Xvfb startxfce4 xfwm4 xfdesktop xdotool x11vnc websockify scrot xdpyinfo xrandr xdg-open gtk-launch chromium netstat; do
      command -v "$p" >/dev/null || echo "missing $p"; done
    test -x /opt/noVNC/utils/novnc_proxy && test -f /opt/noVNC/vnc.html && echo novnc
    grep -q -- --no-sandbox /etc/chromium.d/agsx && echo chromium-flags'
  assert_success
  [ "$output" = $'user\n/home/user\nnovnc\nchromium-flags' ] || { show_run; false; }
}

@test "e2b-desktop: the unmodified @e2b/desktop SDK through serve: launch, type, click, screenshot, open, stream" {
  [ -n "$DESKTOP_SDK" ] || skip "the npm @e2b/desktop SDK is not installed (npm or its registry unreachable)"
  desktop_image
  # The stream's URL, opened by a headless Chromium on the host through
  # serve --ports-listen --ports-tls (noVNC's page and its WebSocket to the
  # sandbox's port 6080), when Chromium, NSS's certutil and Playwright are
  # to be had. The URL is the SDK's, https:// and unchanged: that Chromium
  # trusts agsx's CA as a user's does (its NSS database). No E2B_DOMAIN:
  # the SDK takes the listener's from the create answer's `domain`.
  local pp check= dir
  pp=$(free_port)
  SERVE_LOG_LEVEL=debug api_serve_start --ports-listen "127.0.0.1:$pp" --ports-tls
  (need_chromium && need_certutil) >/dev/null 2>&1 || true # installed if we may; else no check
  if command -v chromium >/dev/null && command -v certutil >/dev/null &&
    dir=$("$FIXTURES/browser-node-setup" 2>/dev/null); then
    mkdir -p "$T/home/.pki/nssdb"
    certutil -d "sql:$T/home/.pki/nssdb" -N --empty-password
    certutil -d "sql:$T/home/.pki/nssdb" -A -t C,, -n agsx-serve -i "$ROOT/tls/ca.pem"
    check=$T/stream-check
    printf '%s\n' '#!/bin/bash' 'echo "stream check $1"' \
      "HOME=$T/home NODE_PATH=$dir/node_modules timeout 90 node $FIXTURES/browser-view.js shot \"\$1\" $T/stream.png" \
      >"$check"
    chmod +x "$check"
  fi
  run env E2B_SDK="$DESKTOP_SDK" E2B_API_URL="$U" E2B_SANDBOX_URL="$U" E2B_API_KEY="$KEY" \
    SHOT="$T/desk.png" STREAM_CHECK="$check" \
    timeout --kill-after=5 300 node "$AGSX_SRCDIR/test/serve/desktop.mjs"
  if [ "$status" -ne 0 ] || [ "${lines[${#lines[@]}-1]}" != ok ]; then
    printf '%s\n' "$output" | sed 's/^/#   /' >&3
    tail -30 "$T/serve.log" | sed 's/^/# serve: /' >&3
    false
  fi
  grep -q 'template desktop, image e2b-desktop' "$T/serve.log" || { tail -5 "$T/serve.log" >&3; false; }
  # The screenshot: 1024x768, Chromium's window on Xfce with the page's red
  # left half and blue right half.
  [ "$(png_size "$T/desk.png")" = 1024x768 ]
  [ "$(png_pixel "$T/desk.png" 200 600)" = 255,0,0 ] || { echo "# at 200,600: $(png_pixel "$T/desk.png" 200 600)" >&3; false; }
  [ "$(png_pixel "$T/desk.png" 800 600)" = 0,0,255 ] || { echo "# at 800,600: $(png_pixel "$T/desk.png" 800 600)" >&3; false; }
  # The stream, as a person's browser shows it: the desktop with the file
  # open() showed last, yellow, in the middle of the screen.
  [ -n "$check" ] || skip "the stream's URL not opened: Chromium, certutil or playwright-core is missing"
  assert_output_contains "stream check https://6080-"
  assert_output_contains ".localhost:$pp/vnc.html?autoconnect=true"
  local size w h px
  size=$(png_size "$T/stream.png")
  w=${size%x*} h=${size#*x}
  px=$(png_pixel "$T/stream.png" $((w / 2)) $((h * 6 / 10)))
  [ "$px" = 255,255,0 ] || { echo "# the stream's middle: $px" >&3; false; }
}
