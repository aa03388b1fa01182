// E2B's `desktop` template (images/desktop, built by `make desktop-image` as
// e2b-desktop, which serve's desktop alias uses) through the unmodified
// @e2b/desktop SDK: Sandbox.create() starts Xvfb and Xfce with the SDK's own
// commands; a page opened in Chromium (launch and open) gets a click and
// typed text through xdotool, read back from the window's title with
// commands.run; open() of a URL and of a file reaches it too; screenshot() is a PNG of the screen (written to $SHOT for the
// caller's pixel checks); the mouse moves, scrolls and drags; stream.start()
// runs x11vnc and noVNC in the sandbox, whose page answers there, and
// $STREAM_CHECK URL (the caller's) opens the stream's URL meanwhile.
// E2B_SDK: the node_modules holding @e2b/desktop (test/serve/npm-install --desktop).
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { eq, assert, main, cleanup, sleep } from './lib.mjs';

const require = createRequire(path.join(process.env.E2B_SDK, 'x.js'));
const { Sandbox } = require('@e2b/desktop');

// Polls FN (a promise of a value) until PRED holds, at most MS.
async function until(fn, pred, ms, what) {
  const end = Date.now() + ms;
  let v;
  while (Date.now() < end) {
    try {
      v = await fn();
      if (pred(v)) return v;
    } catch {}
    await sleep(500);
  }
  throw new Error(`${what}: still ${JSON.stringify(v)} after ${ms} ms`);
}

// The title of the Chromium window with the page (xdotool, in the sandbox).
async function chromiumTitles(d) {
  const r = await d.commands.run(
    'for w in $(xdotool search --onlyvisible --class chromium); do xdotool getwindowname $w; done',
    { timeoutMs: 10000 });
  return r.stdout;
}

// Left half red (typing goes into the field at its top), right half a
// button; the title tells what happened.
const page = `<!doctype html><title>agsx-desktop ready</title>
<body style="margin:0;background:#0000ff">
<div style="position:fixed;left:0;top:0;width:50vw;height:100vh;background:#ff0000">
<input id=t autofocus style="margin:20px;width:80%;font-size:30px"
 onkeydown="if (event.key === 'Enter') document.title = 'agsx-typed ' + this.value"></div>
<button style="position:fixed;right:0;top:0;width:50vw;height:100vh;background:#0000ff;border:0"
 onclick="document.title = 'agsx-clicked ' + event.clientX"></button>
</body>`;

await main(async () => {
  const d = await Sandbox.create('desktop', { timeoutMs: 300000, resolution: [1024, 768] });
  cleanup.push(d);
  eq(await d.getScreenSize(), { width: 1024, height: 768 }, 'the screen size (xrandr)');
  let r = await d.commands.run('whoami; echo $DISPLAY; pgrep -x xfwm4 >/dev/null && echo xfwm4');
  eq(r.stdout, 'user\n:0\nxfwm4\n', 'the user, DISPLAY and the window manager');

  // A page in Chromium, through gtk-launch (launch) and through xdg-open (open).
  await d.files.write('/home/user/page.html', page);
  await d.launch('chromium', 'file:///home/user/page.html');
  await until(() => chromiumTitles(d), (t) => t.includes('agsx-desktop ready'), 60000,
    'the page in Chromium (launch)');
  console.log('launched');
  // Typing: the field has the focus (autofocus) once the window has it.
  const wins = await d.getApplicationWindows('chromium');
  assert(wins.length >= 1 && wins[0] !== '', 'Chromium has a window');
  await d.commands.run(`xdotool windowactivate --sync ${wins[wins.length - 1]} || true`);
  await d.write('hello agsx 42');
  await d.press('enter');
  await until(() => chromiumTitles(d), (t) => t.includes('agsx-typed hello agsx 42'), 20000,
    'the typed text in the title');
  console.log('typed');
  // A click on the button (the right half), at a known place.
  await d.moveMouse(800, 500);
  eq(await d.getCursorPosition(), { x: 800, y: 500 }, 'the cursor after moveMouse');
  await d.leftClick();
  await until(() => chromiumTitles(d), (t) => /agsx-clicked \d+/.test(t), 20000,
    'the click in the title');
  console.log('clicked');
  await d.scroll('down', 2);
  await d.drag([300, 300], [400, 400]);
  eq(await d.getCursorPosition(), { x: 400, y: 400 }, 'the cursor after the drag');
  await d.rightClick(600, 300);
  await d.press('escape');
  await d.doubleClick(600, 300);

  // A screenshot: the page's colours, checked by the caller.
  const png = Buffer.from(await d.screenshot());
  eq(png.subarray(1, 4).toString(), 'PNG', 'the screenshot is a PNG');
  eq([png.readUInt32BE(16), png.readUInt32BE(20)], [1024, 768], 'its size');
  if (process.env.SHOT) fs.writeFileSync(process.env.SHOT, png);
  console.log('screenshot ' + png.length);

  // open(): xdg-open of a URL (a server in the sandbox: the default network
  // is internal), in the same Chromium.
  await d.files.write('/home/user/www/second.html', '<title>agsx-second page</title><body style="background:#00ff00">');
  await d.commands.run('python3 -m http.server 8000 --bind 127.0.0.1 --directory /home/user/www',
    { background: true, timeoutMs: 0 });
  await until(() => d.commands.run('curl -sf http://127.0.0.1:8000/second.html >/dev/null && echo up'),
    (r) => r.stdout === 'up\n', 20000, 'the server in the sandbox');
  await d.open('http://127.0.0.1:8000/second.html');
  await until(() => chromiumTitles(d), (t) => t.includes('agsx-second page'), 60000,
    'the page opened with xdg-open');
  // and of a file: HTML opens in Chromium too.
  await d.files.write('/home/user/third.html',
    '<title>agsx-third file</title><body style="margin:0;background:#ffff00">');
  await d.open('/home/user/third.html');
  await until(() => chromiumTitles(d), (t) => t.includes('agsx-third file'), 60000,
    'the file opened with xdg-open');
  console.log('opened');

  // The stream: x11vnc and noVNC start in the sandbox; noVNC answers there.
  await d.stream.start();
  const url = d.stream.getUrl();
  assert(url.includes(`6080-${d.sandboxId}.`) && url.includes('/vnc.html?autoconnect=true'),
    `the stream URL ${url}`);
  r = await d.commands.run('curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:6080/vnc.html; pgrep -x x11vnc >/dev/null && echo " x11vnc"');
  eq(r.stdout, '200 x11vnc\n', 'noVNC and x11vnc in the sandbox');
  console.log('stream ' + url);
  // The caller opens the stream's URL in a browser of its own while it runs
  // (serve --ports-listen forwards the host's port 6080).
  if (process.env.STREAM_CHECK)
    execFileSync(process.env.STREAM_CHECK, [url], { stdio: 'inherit', timeout: 120000 });
  await d.stream.stop();
});
