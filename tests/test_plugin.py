"""The real Trend Analyzer plugin, on our database and on msprobe's of the same input: the same answers.

TensorBoard from the reference venv (mindstudio-probe 26.2.0 ships the plugin) runs on 127.0.0.1 on a free
port, once on each database; the test asks /metrics, /values, /tags, /heatmap_data, /trend and /db_files as the
page does (values as strings, tags as names) for every metric and stat, the first and last step, rank and
module, and one or two tags, and compares the answers route by route.

The plugin's SQL has no ORDER BY where it returns lists the page sorts itself (heat-map cells, tags within a
category), and our read indexes change SQLite's plan, so those lists are compared sorted. Everything else is
compared as answered, module labels included: `<target_id>_<vpp_stage>_<name>_<micro_step>`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from reference import msprobe_executable, run_msprobe, tensorboard_executable

from benchmarks.plugin import PluginServer, page_load
from datagen.dump import generate as generate_dump
from datagen.monitor import generate as generate_monitor
from trendconv import api

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.reference  # runs msprobe data2db and the real plugin


# ---- asking the plugin everything the page can ask ----


def ask_lists(server: PluginServer) -> dict:
    """The answers that name what can be asked next: metrics and stats, steps, ranks, modules and tags."""
    answers = {("metrics",): server.ask("metrics"), ("db_files",): server.ask("db_files")}
    for metric in answers[("metrics",)]["data"]:
        name, stat = metric["name"], metric["stats"][0]
        for dimension in ("step", "rank", "module_name"):
            body = {"metric": name, "stat": stat, "dimension": dimension, "tags": []}
            answers[("values", name, dimension)] = server.ask("values", body)
        answers[("tags", name)] = server.ask("tags", params={"metric": name})
    return answers


def plan(lists: dict) -> list[dict]:
    """What to ask for each metric, from the reference's lists: targets by label without id (each server
    puts its own id in), tags by name."""
    asked = []
    for metric in lists[("metrics",)]["data"]:
        name = metric["name"]
        steps = list(lists[("values", name, "step")]["data"])
        ranks = list(lists[("values", name, "rank")]["data"])
        modules = sorted(lists[("values", name, "module_name")]["data"].items(), key=lambda item: int(item[0]))
        if not modules:  # listed in global_stats without a row: only its lists are compared
            continue
        targets = [strip_id(label) for _, label in (modules[0], modules[-1])]
        tags = sorted({tag["id"] for tag in lists[("tags", name)]["data"]})
        asked.append(
            {"metric": name, "stats": metric["stats"], "steps": [steps[0], steps[-1]], "ranks": [ranks[0], ranks[-1]]}
            | {"targets": targets, "tags": [tags[0], tags[-1]] if tags else []}
        )
    return asked


def ask_views(server: PluginServer, lists: dict, asked: list[dict]) -> dict:
    """Heat maps and line charts of every metric and stat, as a click on the page asks them."""
    answers = {}
    for view in asked:
        metric = view["metric"]
        ids = {strip_id(label): key for key, label in lists[("values", metric, "module_name")]["data"].items()}
        targets = [ids[target] for target in view["targets"]]
        for stat in view["stats"]:
            answers |= _heat_maps(server, metric, stat, view, targets)
            answers |= _lines(server, metric, stat, view, targets)
        for tag in view["tags"]:
            body = {"metric": metric, "stat": view["stats"][0], "tags": [tag]}
            answers[("values", metric, "module_name", tag)] = server.ask("values", body | {"dimension": "module_name"})
            step = {"dimension": "step", "value": view["steps"][0]}
            answers[("heatmap_data", metric, "step", tag)] = server.ask("heatmap_data", body | step)
            cell = {"dimension": "module_name", "value": targets[0], "dimX": view["steps"][0]}
            cell["dimYIdx"] = view["ranks"][0]
            answers[("trend", metric, f"tag {tag}", "module_name")] = server.ask("trend", body | cell)
    return answers


def _heat_maps(server, metric, stat, view, targets) -> dict:
    answers = {}
    for dimension, values, keys in (
        ("step", view["steps"], view["steps"]),
        ("rank", view["ranks"], view["ranks"]),
        ("module_name", targets, view["targets"]),  # a request's key names a target by its label without id
    ):
        for value, key in zip(values, keys):
            body = {"metric": metric, "stat": stat, "dimension": dimension, "value": value, "tags": []}
            answers[("heatmap_data", metric, stat, dimension, key)] = server.ask("heatmap_data", body)
    return answers


def _lines(server, metric, stat, view, targets) -> dict:
    """A click on a heat-map cell: the heat map's dimension and value, and the cell's X and Y (step: rank ×
    module; rank: step × module; module: step × rank)."""
    (step, *_, last_step), (rank, *_, last_rank) = view["steps"], view["ranks"]
    first, last = view["targets"]
    cells = [  # dimension, value, X, Y, and Y named by label for the answer's key
        ("step", step, rank, targets[0], first),
        ("step", step, last_rank, targets[-1], last),
        ("rank", rank, step, targets[0], first),
        ("rank", rank, last_step, targets[-1], last),
        ("module_name", targets[0], step, rank, rank),
        ("module_name", targets[0], last_step, last_rank, last_rank),
    ]
    answers = {}
    for dimension, value, x, y, key in cells:
        body = {"metric": metric, "stat": stat, "dimension": dimension, "value": value, "dimX": x, "dimYIdx": y}
        answers[("trend", metric, stat, dimension, x, key)] = server.ask("trend", body | {"tags": []})
    return answers


def ask_everything(server: PluginServer, asked: list[dict] | None = None) -> tuple[dict, list[dict]]:
    lists = ask_lists(server)
    asked = asked if asked is not None else plan(lists)
    return {**lists, **ask_views(server, lists, asked)}, asked


# ---- comparing answers ----


def strip_id(label: str) -> str:
    """`12_0_Module.x.forward_1` -> `0_Module.x.forward_1`: the label of a target without its id."""
    return label.split("_", 1)[1]


def canonical(key: tuple, answer, *, ids: bool, module_order: bool = True):
    """ANSWER with the lists the plugin leaves unordered sorted; without IDS, labels lose their id prefix and
    target ids are dropped (MODULE_ORDER keeps the order of modules, which the page takes from the ids)."""
    if not isinstance(answer, dict) or answer.get("success") is False:
        return answer
    route, data = key[0], answer["data"]
    if route == "tags":
        return sorted(data, key=lambda tag: (tag["category"], tag["id"]))
    if route == "heatmap_data":
        return sorted(json.dumps(row if ids else _cell_without_id(row)) for row in data)
    if route == "values" and key[2] == "module_name" and not ids:
        labels = [strip_id(label) for _, label in sorted(data.items(), key=lambda item: int(item[0]))]
        return labels if module_order else sorted(labels)
    if route == "trend" and key[3] == "module_name" and not ids:
        pairs = [(strip_id(label), value) for label, value in zip(data["dimensions"], data["values"])]
        return pairs if module_order else sorted(pairs, key=json.dumps)
    return answer


def _cell_without_id(row: list) -> list:
    x, (y, label), value = row
    return [x, strip_id(label) if isinstance(label, str) else label, value]


def differences(reference: dict, ours: dict, **kwargs) -> list[str]:
    assert reference.keys() == ours.keys()
    found = []
    for key in reference:
        expected, got = (canonical(key, answers[key], **kwargs) for answers in (reference, ours))
        if expected != got:
            found.append(f"{key}: msprobe {str(expected)[:300]} != ours {str(got)[:300]}")
    return found


def assert_meaningful(answers: dict) -> None:
    """The comparison means something: every request was answered successfully, most with data."""
    failed = [key for key, answer in answers.items() if isinstance(answer, dict) and answer.get("success") is False]
    assert failed == []
    empty = [key for key, answer in answers.items() if key[0] == "heatmap_data" and not answer["data"]]
    assert len(empty) < len(answers) / 10, empty


# ---- servers on both databases ----


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("plugin")


def answers_of_both(reference_db: Path, our_db: Path, scratch: Path) -> tuple[dict, dict]:
    tensorboard = tensorboard_executable()
    with (
        PluginServer(tensorboard, reference_db.parent, scratch) as theirs,
        PluginServer(tensorboard, our_db.parent, scratch) as ours,
    ):
        reference, asked = ask_everything(theirs)
        return reference, ask_everything(ours, asked)[0]


@pytest.fixture(scope="module", params=[True, False], ids=["micro-step", "step"])
def dump_answers(request, scratch) -> tuple[dict, dict]:
    root = scratch / f"dump-{request.param}"
    generate_dump(root / "data", steps=2, ranks=2, layers=1, seed=5)
    reference = run_msprobe(root / "data", root / "reference", micro_step=request.param)
    options = api.ParseOptions(micro_step=request.param)
    ours = api.run(root / "data", root / "ours", options, workers=2, input_format="dump").load.db
    return answers_of_both(reference, ours, scratch)


@pytest.fixture(scope="module", params=[True, False], ids=["micro-step", "step"])
def monitor_answers(request, scratch) -> tuple[dict, dict]:
    root = scratch / f"monitor-{request.param}"
    generate_monitor(root / "data", ranks=2, steps=3, layers=2, seed=3)
    reference = run_msprobe(
        root / "data", root / "reference", micro_step=request.param, input_format="monitor", process_num=1
    )
    options = api.ParseOptions(micro_step=request.param)
    ours = api.run(root / "data", root / "ours", options, workers=2, input_format="monitor").load.db
    return answers_of_both(reference, ours, scratch)


# ---- the tests ----


def test_dump_answers_are_equal(dump_answers):
    """Every answer, module labels (with their target ids) and module order included."""
    reference, ours = dump_answers
    assert_meaningful(reference)
    assert differences(reference, ours, ids=True) == []


def test_monitor_answers_are_equal_but_for_target_ids(monitor_answers):
    """Monitor target ids are a deliberate difference (docs/migration.md): msprobe's AUTOINCREMENT leaves gaps
    where an ignored duplicate insert took an id, ours are dense. With --process_num 1 msprobe numbers targets
    in the order ours are numbered, so the module order the page shows must be the same: only the id prefix of
    labels is set aside. /metrics lists metrics and stats in another order (also in docs/migration.md), so it is
    compared as a set of stats per metric."""
    reference, ours = monitor_answers
    assert_meaningful(reference)
    metrics = [
        {metric["name"]: sorted(metric["stats"]) for metric in answers[("metrics",)]["data"]}
        for answers in (reference, ours)
    ]
    assert metrics[0] == metrics[1]
    rest = [{key: answer for key, answer in answers.items() if key != ("metrics",)} for answers in (reference, ours)]
    assert differences(*rest, ids=False, module_order=True) == []


# ---- a normal user with umask 002 ----

# setpriv, not Popen(user=...): it execs the command as `nobody`, so its PID is the command's; and in some
# sandboxes only its exec reaches an interpreter behind a directory that user may not list.
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def shared_area():
    """A directory a normal user writes in, and that user's command prefix: `nobody` when we are root (CI),
    else ourselves."""
    area = Path(tempfile.mkdtemp(prefix="trendconv-plugin-"))
    try:
        if os.getuid() != 0:
            yield area, []
            return
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv (util-linux): cannot become a normal user")
        os.chown(area, 65534, 65534)
        readable = as_user(NOBODY, [sys.executable, "-c", "import trendconv, benchmarks"], area)
        if readable.returncode != 0:
            pytest.skip(f"user nobody cannot run this checkout's Python ({sys.executable}): {readable.stderr[-300:]}")
        yield area, NOBODY
    finally:
        shutil.rmtree(area, ignore_errors=True)


def as_user(prefix: list[str], command: list, area: Path) -> subprocess.CompletedProcess:
    """COMMAND in AREA as the user PREFIX runs as, with umask 002, as many shared machines set it."""
    env = {**os.environ, "HOME": str(area), "TMPDIR": str(area), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [*prefix, *map(str, command)], cwd=area, env=env, umask=0o002, capture_output=True, text=True, timeout=300
    )


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_umask_002_as_a_normal_user(shared_area):
    """With umask 002 msprobe's output directory is 0775 and the plugin disables the tab; ours is accepted.
    `trendconv check` says so and how to fix it, and names the database the plugin opens first."""
    area, user = shared_area
    make = "from datagen import dump, monitor; from pathlib import Path; data = Path('data'); "
    make += "dump.generate(data, steps=1, ranks=1, layers=1); monitor.generate(data, ranks=1, steps=2, layers=1)"
    assert as_user(user, [sys.executable, "-c", make], area).returncode == 0
    # one worker: in some sandboxes a process setpriv started cannot exec an interpreter again (the pool's)
    run = ["-m", "trendconv", "run", "data", "--db", "ours", "--quiet", "--workers", "1"]
    ours = as_user(user, [sys.executable, *run], area)
    assert (ours.returncode, ours.stderr) == (0, "")
    theirs = as_user(user, [msprobe_executable(), "data2db", "--data", "data", "--db", "ref"], area)
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    modes = [mode(area / path) for path in ("ours", "ours/dump_data.trend.db", "ref", "ref/dump_data.trend.db")]
    assert modes == ["0o755", "0o640", "0o775", "0o644"]

    check = as_user(user, [sys.executable, "-m", "trendconv", "check", "ref"], area)
    refused = "group- or other-writable (mode 0775), which the Trend Analyzer refuses; fix: chmod go-w ref"
    assert (check.returncode, check.stdout.splitlines()[:1]) == (1, [f"ref: {refused}"]), check.stderr
    with PluginServer(tensorboard_executable(), area / "ref", area, as_user=user, umask=0o002) as server:
        assert server.tab_enabled() is False
        assert server.ask("metrics")["success"] is False
    assert as_user(user, ["chmod", "go-w", "ref"], area).returncode == 0

    answers = [page_load_as(user, area, name) for name in ("ours", "ref")]
    assert differences(answers[1], answers[0], ids=True) == []
    assert_meaningful(answers[0])


def page_load_as(user, area: Path, name: str) -> dict:
    """`trendconv check` passes; the plugin shows the tab, opens the database check names first, and answers
    the page's first requests on dump_data.trend.db."""
    check = as_user(user, [sys.executable, "-m", "trendconv", "check", name], area)
    assert check.returncode == 0, check.stdout
    opened = next(line for line in check.stdout.splitlines() if line.startswith("the Trend Analyzer opens "))
    with PluginServer(tensorboard_executable(), area / name, area, as_user=user, umask=0o002) as server:
        assert server.tab_enabled() is True
        files = server.ask("db_files")
        assert files["data"] == ["dump_data.trend.db", "monitor_data.trend.db"]
        assert opened.split()[4] == files["current"]
        assert server.ask("switch_db", {"db_filename": "dump_data.trend.db"})["success"] is True
        return page_load(server)
