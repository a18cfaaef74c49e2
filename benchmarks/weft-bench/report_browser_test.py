#!/usr/bin/env python3
"""The bench_report_browser test: weft-bench report's HTML in a real browser.

It writes a history of 50 measurements x 100 runs (one step in some of
them), the newest run as the results and the one before as the base, and
has weft-bench make the report. Then Debian's headless Chromium loads it,
driven over the DevTools protocol on a pipe (--remote-debugging-pipe; the
standard library only), at a phone's width, and the test checks:

  - the file is at most 1 MB and loads within 2 s (the best of up to three
    loads, since a loaded CI machine may hold one back);
  - no console message (of any level), no uncaught exception, no log entry;
  - no network request besides the file itself;
  - nothing is wider than the phone's screen (no sideways scrolling);
  - the plots are not empty: screenshots of the first spread plot and the
    first history plot, decoded (zlib), have enough pixels that are not
    the plot's background.

Usage: report_browser_test.py WEFT_BENCH WORKDIR. Exit 0 passed, 1 failed,
77 skipped (no Chromium, or a weft-bench without SQLite), with the reason.
"""

import base64
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib

PHONE_W, PHONE_H = 390, 844


def fail(msg):
    print("bench_report_browser: FAILED: " + msg)
    sys.exit(1)


def skip(msg):
    print("bench_report_browser: skipped: " + msg)
    sys.exit(77)


def write_history(work, nmeas=50, nruns=100):
    rnd = random.Random(30)
    runs = []
    for r in range(nruns):
        recs = []
        for m in range(nmeas):
            level = 100.0 + m
            if m % 5 == 0 and r >= 60:
                level *= 1.1
            run = level * (1 + rnd.gauss(0, 0.01))
            samples = [round(run * (1 + rnd.gauss(0, 0.005)), 3) for _ in range(5)]
            recs.append({
                "schema": 1, "bench": "sleep", "backend": "weft", "jobs": 8 + m, "sleep_ms": 20,
                "status": "ok", "repeat": 5, "elapsed_ms": sorted(samples)[2], "samples_ms": samples,
                "cpu_model": "Browser Test CPU", "cores": 2, "kernel": "6.1.0", "thp": "madvise",
                "compiler": "gcc 12.2.0", "build_type": "Release", "env": {},
                "git_commit": "c%03d" % r, "weft_version": "0.1.0",
                "date": "2026-03-%02dT%02d:00:00Z" % (1 + r // 24, r % 24),
                "command": "weft-bench sleep --backend weft --jobs %d --sleep-ms 20 --repeat 5" % (8 + m),
            })
        runs.append(recs)
    path = os.path.join(work, "history.jsonl")
    with open(path, "w") as f:
        for recs in runs:
            for rec in recs:
                f.write(json.dumps(rec) + "\n")
    for name, recs in (("new.jsonl", runs[-1]), ("base.jsonl", runs[-2])):
        with open(os.path.join(work, name), "w") as f:
            for rec in recs:
                f.write(json.dumps(rec) + "\n")
    return path


class Pipe:
    """The DevTools protocol over --remote-debugging-pipe: JSON messages ended by NUL, fds 3 and 4."""

    def __init__(self, proc, wfd, rfd):
        self.proc, self.wfd, self.rfd = proc, wfd, rfd
        self.next_id = 0
        self.events = []
        self.replies = {}
        self.cv = threading.Condition()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.rfd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                obj = json.loads(msg)
                with self.cv:
                    if "id" in obj:
                        self.replies[obj["id"]] = obj
                    else:
                        self.events.append(obj)
                    self.cv.notify_all()

    def call(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self.cv:
            while mid not in self.replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    fail("no reply to %s from Chromium" % method)
                self.cv.wait(left)
            reply = self.replies.pop(mid)
        if "error" in reply:
            fail("%s: %s" % (method, reply["error"]))
        return reply.get("result", {})

    def wait_event(self, method, timeout=60):
        deadline = time.monotonic() + timeout
        with self.cv:
            while not any(e["method"] == method for e in self.events):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(left)
        return True


def png_pixels(data):
    """Width, height and rows of RGB(A) tuples of an 8-bit PNG (zlib and the five filters)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("the screenshot is not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            if depth != 8 or color not in (2, 6):
                fail("unexpected PNG format (depth %d, color %d)" % (depth, color))
            bpp = 4 if color == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def ink(png):
    """The share of pixels that are neither the plot's background (#fafafa) nor white."""
    w, h, bpp, rows = png_pixels(png)
    inked = 0
    for line in rows:
        for x in range(0, w * bpp, bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            if min(r, g, b) < 235:
                inked += 1
    return inked / float(w * h)


def main():
    if len(sys.argv) != 3:
        print("usage: report_browser_test.py WEFT_BENCH WORKDIR")
        return 2
    bench, work = sys.argv[1], os.path.abspath(sys.argv[2])
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        skip("Chromium is not installed (scripts/deps.sh ci installs Debian's chromium)")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hist = write_history(work)
    db = os.path.join(work, "history.db")
    rc = subprocess.run([bench, "history", "add", "--db", db, hist], capture_output=True, text=True)
    if rc.returncode == 3:
        skip("this weft-bench was built without SQLite")
    if rc.returncode != 0:
        fail("history add: %s" % rc.stderr)
    html = os.path.join(work, "report.html")
    t0 = time.monotonic()
    rc = subprocess.run([bench, "report", "--db", db, os.path.join(work, "new.jsonl"), "--base",
                         os.path.join(work, "base.jsonl"), "-o", html], capture_output=True, text=True)
    if rc.returncode != 0:
        fail("report: %s" % rc.stderr)
    size = os.path.getsize(html)
    print("report: 50 measurements x 100 runs: %d bytes, written in %.2f s" % (size, time.monotonic() - t0))
    if size > 1 << 20:
        fail("the report is %d bytes, more than 1 MB" % size)

    profile = os.path.join(work, "profile")
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()

    def fds():
        os.dup2(to_browser_r, 3)
        os.dup2(from_browser_w, 4)

    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
            "--user-data-dir=" + profile, "--remote-debugging-pipe", "--enable-logging=stderr", "--v=0",
            "--window-size=%d,%d" % (PHONE_W, PHONE_H), "about:blank"]
    log = open(os.path.join(work, "chromium.log"), "w")
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=fds,
                            close_fds=False)
    os.close(to_browser_r)
    os.close(from_browser_w)
    cdp = Pipe(proc, to_browser_w, from_browser_r)
    try:
        target = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for m in ("Runtime.enable", "Log.enable", "Network.enable", "Page.enable"):
            cdp.call(m, session=session)
        cdp.call("Emulation.setDeviceMetricsOverride",
                 {"width": PHONE_W, "height": PHONE_H, "deviceScaleFactor": 1, "mobile": True}, session=session)
        url = "file://" + html
        # The best of up to three loads: on a loaded CI machine one load may wait for the CPU.
        # Every load's messages and requests count.
        loads, events = [], []
        for _ in range(3):
            with cdp.cv:
                events += cdp.events
                cdp.events.clear()
            t0 = time.monotonic()
            cdp.call("Page.navigate", {"url": url}, session=session)
            if not cdp.wait_event("Page.loadEventFired", timeout=60):
                fail("the page did not load within 60 s")
            loads.append(time.monotonic() - t0)
            time.sleep(0.5)  # late messages and requests
            if loads[-1] <= 2.0:
                break
        load_s = min(loads)
        layout = cdp.call("Runtime.evaluate", {"expression": """JSON.stringify({
              width: document.documentElement.scrollWidth,
              plots: Array.from(document.querySelectorAll('svg')).slice(0, 2).map(function (s) {
                var r = s.getBoundingClientRect();
                return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height, s.getAttribute('aria-label')];
              }),
              svgs: document.querySelectorAll('svg').length,
              scripts: document.scripts.length})""", "returnByValue": True}, session=session)
        info = json.loads(layout["result"]["value"])
        shots = []
        for x, y, w, h, label in info["plots"]:
            shot = cdp.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                       "clip": {"x": x, "y": y, "width": w, "height": h,
                                                                "scale": 1}}, session=session)
            png = base64.b64decode(shot["data"])
            with open(os.path.join(work, "%s.png" % label), "wb") as f:
                f.write(png)
            shots.append((label, ink(png)))
        with cdp.cv:
            events += cdp.events
        try:
            cdp.call("Browser.close", timeout=5)
        except SystemExit:
            pass
    finally:
        if proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(profile, ignore_errors=True)

    console = [e for e in events if e["method"] in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown",
                                                    "Log.entryAdded")]
    requests = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    others = [u for u in requests if u != url]
    print("loaded in %.3f s (%s) at %d px wide; %d plots, %d scripts; page width %d px; requests: %s"
          % (load_s, ", ".join("%.3f s" % t for t in loads), PHONE_W, info["svgs"], info["scripts"], info["width"],
             sorted(set(requests))))
    for label, share in shots:
        print("screenshot of the first %s plot: %.1f%% inked" % (label, share * 100))
    if console:
        fail("console messages: %s" % json.dumps(console)[:2000])
    if others:
        fail("network requests besides the file: %s" % others)
    if load_s > 2.0:
        fail("the page took %.2f s to load (at most 2 s)" % load_s)
    if info["scripts"] != 0:
        fail("the page has %d scripts" % info["scripts"])
    if info["width"] > PHONE_W:
        fail("the page is %d px wide on a %d px screen (it scrolls sideways)" % (info["width"], PHONE_W))
    if len(shots) != 2 or info["svgs"] != 100:
        fail("expected 100 plots (a spread and a history per measurement), found %d" % info["svgs"])
    for label, share in shots:
        if share < 0.01:
            fail("the %s plot looks empty (%.2f%% of its pixels inked)" % (label, share * 100))
    print("bench_report_browser: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
