# Opens one page of an `inspect view bundle` in headless Chromium, the way a reader would: the
# bundle served over HTTP on loopback (its viewer fetches the logs; file:// is not enough) and
# Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe), in real time:
# the viewer reads its logs in a way `--virtual-time-budget` does not wait for, so a
# `--dump-dom` run ends before any log is read.
#
# argv: chromium bundle_dir route want screenshot.png guard_seconds, then the headless flags
# Waits until the page's text holds `want` (or the guard passes: a hang detector), takes the
# screenshot, and prints {"text": <the page's innerText>, "url": ...} as JSON.
import base64, functools, http.server, json, os, subprocess, sys, threading, time

chromium, bundle, route, want, png, guard = sys.argv[1:7]
headless = sys.argv[7:]


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(
    ("127.0.0.1", 0), functools.partial(Quiet, directory=bundle)
)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}/{route}"

to_chrome_r, to_chrome_w = os.pipe()
from_chrome_r, from_chrome_w = os.pipe()
profile = os.path.join(os.path.dirname(os.path.abspath(png)), "chromium-profile")
proc = subprocess.Popen(
    [chromium]
    + headless
    + [
        "--remote-debugging-pipe",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
        "about:blank",
    ],
    # Chromium reads commands on fd 3 and writes answers on fd 4.
    pass_fds=(3, 4),
    preexec_fn=lambda: (os.dup2(to_chrome_r, 3), os.dup2(from_chrome_w, 4)),
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
os.close(to_chrome_r)
os.close(from_chrome_w)
reader = os.fdopen(from_chrome_r, "rb")
next_id = 0
buffered = b""


def call(method, params=None, session=None):
    global next_id, buffered
    next_id += 1
    msg = {"id": next_id, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    os.write(to_chrome_w, json.dumps(msg).encode() + b"\0")
    while True:
        while b"\0" not in buffered:
            chunk = reader.read1(65536)
            if not chunk:
                sys.exit(f"Chromium closed its pipe during {method}")
            buffered += chunk
        raw, buffered = buffered.split(b"\0", 1)
        answer = json.loads(raw)
        if answer.get("id") == next_id:
            if "error" in answer:
                sys.exit(f"{method}: {answer['error']}")
            return answer["result"]


try:
    target = call("Target.createTarget", {"url": url})["targetId"]
    session = call("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"
    ]
    deadline = time.monotonic() + float(guard)
    text = ""
    while time.monotonic() < deadline:
        text = call(
            "Runtime.evaluate",
            {"expression": "document.body ? document.body.innerText : ''", "returnByValue": True},
            session,
        )["result"].get("value", "")
        if want in text:
            break
        time.sleep(0.25)
    # Let the page settle (fonts, layout) before the picture; the text check above is the test.
    time.sleep(1)
    shot = call("Page.captureScreenshot", {"format": "png"}, session)["data"]
    with open(png, "wb") as f:
        f.write(base64.b64decode(shot))
    print(json.dumps({"text": text, "url": url}))
finally:
    try:
        call("Browser.close")
    except SystemExit:
        pass
    proc.wait(timeout=30)
    server.shutdown()
