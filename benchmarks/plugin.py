"""The Trend Analyzer plugin, run for real: a TensorBoard on loopback, and the requests its page sends.

Used by tests/test_plugin.py (same answers as on msprobe's database) and benchmarks/plugin_timing.py. The
plugin ships in mindstudio-probe 26.2.0 (package trend_analyzer, TensorBoard entry point TrendVis); its routes
are under /data/plugin/TrendVis/. TensorBoard is started with `--port 0` (it picks a free port and prints it)
and `--load_fast=false` (no data-server child process), and is always stopped by its PID.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROUTES = "/data/plugin/TrendVis"
START_SECONDS = 60
REQUEST_SECONDS = 180  # the page gives up after 3 minutes
_LISTENING = re.compile(r"TensorBoard \S+ at http://127\.0\.0\.1:(\d+)/")


class PluginServer:
    """`with PluginServer(tensorboard, logdir, scratch) as server:` a ready TensorBoard; stopped on leaving,
    whatever happened. AS_USER is a command prefix that runs it as another user and execs it (setpriv), so the
    PID stays TensorBoard's; UMASK is the umask it starts with."""

    def __init__(self, tensorboard: Path, logdir: Path, scratch: Path, *, as_user=(), umask: int = -1):
        self.command = [*as_user, str(tensorboard), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0"]
        self.command.append("--load_fast=false")
        self.scratch, self.umask = scratch, umask
        self.log = scratch / f"tensorboard-{logdir.name}-{id(self)}.log"
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    def __enter__(self) -> PluginServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        # TMPDIR and HOME in SCRATCH: TensorBoard notes its instances under $TMPDIR/.tensorboard-info
        env = {**os.environ, "TMPDIR": str(self.scratch), "HOME": str(self.scratch)}
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, umask=self.umask
            )

    def wait_ready(self) -> None:
        """Until TensorBoard says its port and answers there; a bounded poll."""
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"TensorBoard exited with {self.process.returncode}:\n{self.log_text()}")
            if self.port is None:
                found = _LISTENING.search(self.log_text())
                self.port = int(found.group(1)) if found else None
            if self.port is not None and self._answers():
                return
            time.sleep(0.1)
        raise RuntimeError(f"TensorBoard not ready after {START_SECONDS} s:\n{self.log_text()}")

    def _answers(self) -> bool:
        try:
            self.get_json("/data/plugins_listing", timeout=5)
        except OSError:
            return False
        return True

    def stop(self) -> None:
        """SIGTERM to our TensorBoard by its PID, SIGKILL if it has not gone in 10 s."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get_json(self, path: str, params: dict | None = None, *, timeout: float = REQUEST_SECONDS):
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(self.url(path + query), timeout=timeout) as response:
            return json.loads(response.read())

    def post_json(self, path: str, body: dict, *, timeout: float = REQUEST_SECONDS):
        request = urllib.request.Request(
            self.url(path), data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def ask(self, route: str, body: dict | None = None, params: dict | None = None):
        """One plugin route as the page asks it: GET with PARAMS, or POST of BODY as JSON."""
        if body is None:
            return self.get_json(f"{ROUTES}/{route}", params)
        return self.post_json(f"{ROUTES}/{route}", body)

    def tab_enabled(self) -> bool:
        """Whether TensorBoard shows the Trend Analyzer tab (the plugin's is_active)."""
        return bool(self.get_json("/data/plugins_listing")["TrendVis"]["enabled"])


def page_load(server: PluginServer) -> dict[tuple, object]:
    """The requests of opening the tab, in the page's order: metrics; then for the first metric and its first
    stat the step list, the tags and the database list; then the heat map of the first step. Keyed by route
    and what was asked."""
    answers: dict[tuple, object] = {("metrics",): server.ask("metrics")}
    first = answers[("metrics",)]["data"][0]
    metric, stat = first["name"], first["stats"][0]
    values = server.ask("values", {"metric": metric, "stat": stat, "dimension": "step", "tags": []})
    answers[("values", metric, "step")] = values
    answers[("tags", metric)] = server.ask("tags", params={"metric": metric})
    answers[("db_files",)] = server.ask("db_files")
    step = next(iter(values["data"]))  # the browser sends it as a string
    body = {"metric": metric, "stat": stat, "dimension": "step", "value": step, "tags": []}
    answers[("heatmap_data", metric, stat, "step", step)] = server.ask("heatmap_data", body)
    return answers
