"""The GPU check's plan, proven here without a GPU: the budget arithmetic (plan.py), a
capped command's process group and marked orphans killed, and one that outlives SIGKILL
abandoned (procs.py), pytest output read back after a crash (pytest_runs.py), and the whole
plan run with stand-ins that sleep, segfault, hang and find no CUDA device, then rerun
with --only-failed (dryrun.py, what `make gpu-dry-run` runs). `make gpu-rehearsal` runs the
real call with the GPU machine's software; it takes minutes and several GB, so it is not
a test here."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".ci" / "gpu"))
import dryrun  # noqa: E402
import plan  # noqa: E402
import procs  # noqa: E402
import pytest_runs  # noqa: E402


@pytest.mark.parametrize("budget", [270, 200, 120, 61.3])
def test_caps_and_reserve_sum_to_the_budget_and_cut_the_least_valuable_first(budget):
    caps = plan.plan(plan.CORE, budget)
    assert sum(caps.values()) + plan.RESERVE_S == pytest.approx(budget)
    names = [s.name for s in plan.CORE]
    assert list(caps) == names[:len(caps)]                       # in order of value: only a tail is cut
    for stage in plan.CORE:
        if stage.name in caps:
            assert caps[stage.name] <= stage.nominal_s
    if budget == 270:
        assert list(caps) == names and caps["cuda_tests"] == 65


def test_the_core_call_fits_twice_in_a_session():
    """A fresh start (240 s), the call and an immediate rerun each to their timeout_s, and the
    idle time before the machine goes back: within the session's 900 s."""
    assert plan.full_budget(plan.CORE) == plan.MAX_BUDGET_S == 270
    assert plan.worst_case_s() == 240 + 2 * (270 + 45) + 30 == 900 <= plan.SESSION_S
    assert [s.name for s in plan.CORE] == ["setup", "smoke", "cuda_tests", "data", "loader", "prefetch",
                                           "gpu_whole_decode", "resnet50", "grid_splice"]
    assert [s.name for s in plan.CORE if not s.cuda] == ["setup", "data"]
    assert sum(plan.plan(plan.CORE, 600).values()) == 260                  # a larger budget: unused


def test_the_budget_from_the_device_time_left():
    assert plan.budget_for(900) == plan.MAX_BUDGET_S
    assert plan.budget_for(500) == 500 - plan.START_S - plan.CALL_OVERHEAD_S
    assert plan.budget_for(300, warm=True) == 300 - plan.CALL_OVERHEAD_S
    assert plan.budget_for(100) == 0
    with pytest.raises(ValueError, match="no room"):
        plan.plan(plan.CORE, 12)


def test_a_capped_command_loses_its_whole_group_and_its_marked_escapees(tmp_path):
    # a child in the group and a grandchild in a session of its own, then the parent hangs
    code = ("import subprocess, sys, time\n"
            "a = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "b = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
            "print(a.pid, b.pid, flush=True)\ntime.sleep(600)\n")
    token = f"test-{os.getpid()}-{time.time_ns()}"
    out = procs.run_capped([sys.executable, "-c", code], 2.0, cwd=tmp_path, env=dict(os.environ),
                           log=tmp_path / "log", token=token)
    assert out.status == "timed out" and "stopped at its cap of 2 s" in out.tail
    kids = [int(x) for x in (tmp_path / "log").read_text().split()[:2]]
    assert kids[1] in out.orphans_killed                             # the one that left the group
    assert procs.marked_pids(token) == []
    for pid in kids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]


def test_a_process_that_outlives_sigkill_is_abandoned_and_the_check_goes_on(tmp_path, monkeypatch):
    """A stage stuck in the driver: SIGKILL has no effect on it. Here SIGKILL is not sent
    (and SIGTERM ignored), which looks the same from outside: run_capped returns all the same,
    within its cap and waits, and names the process it left behind."""
    real = procs.send
    monkeypatch.setattr(procs, "send", lambda pid, sig, group=False: None if sig == signal.SIGKILL
                        else real(pid, sig, group))
    monkeypatch.setattr(procs, "GRACE_S", 0.5)
    monkeypatch.setattr(procs, "KILL_WAIT_S", 0.5)
    code = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('stuck', flush=True)\n"
            "time.sleep(600)\n")
    t0 = time.monotonic()
    out = procs.run_capped([sys.executable, "-c", code], 1.5, cwd=tmp_path, env=dict(os.environ),
                           log=tmp_path / "log", token=f"stuck-{time.time_ns()}")
    try:
        assert time.monotonic() - t0 < 1.5 + 0.5 + 0.5 + 2.0 + 2.0        # cap, grace, kill wait, sweep, slack
        assert out.status == "timed out" and len(out.abandoned) == 1
        assert "abandoned, the check goes on" in out.tail and "stuck" in out.tail
    finally:
        for pid in out.abandoned:
            os.kill(pid, signal.SIGKILL)


def test_crashed_failed_and_not_started(tmp_path):
    def run(code):
        return procs.run_capped([sys.executable, "-c", code], 20, cwd=tmp_path, env=dict(os.environ),
                                log=tmp_path / "log", token=f"t-{time.time_ns()}")
    crashed = run("import os, signal; print('last words', flush=True); os.kill(os.getpid(), signal.SIGSEGV)")
    assert (crashed.status, crashed.signal) == ("crashed", "SIGSEGV") and "last words" in crashed.tail
    assert run("raise SystemExit(4)").status == "failed"
    missing = procs.run_capped(["/nonexistent/program"], 5, cwd=tmp_path, env={}, log=tmp_path / "l", token="x")
    assert missing.status == "not started" and "nonexistent" in missing.tail


def test_pytest_output_read_back_after_a_crash():
    text = ("tests/test_a.py::test_one PASSED [ 33%]\ntests/test_a.py::test_two FAILED [ 66%]\n"
            "tests/test_a.py::test_three Fatal Python error: Segmentation fault\n")
    counts = pytest_runs.log_counts(text)
    assert counts["passed"] == 1 and counts["failed"] == 1
    assert counts["running_when_stopped"] == "tests/test_a.py::test_three"
    assert counts["failed_tests"] == ["tests/test_a.py::test_two"]


def test_without_cuda_the_test_files_run_together_and_a_collection_error_fails(tmp_path):
    """Where every CUDA test skips, one process for all files: each must still collect."""
    (tmp_path / "conftest.py").write_text(dryrun.TESTS["conftest.py"])
    cuda = "@pytest.mark." + "cuda"   # in two: files_marked must not take this file for a CUDA test file
    (tmp_path / "test_a.py").write_text(f"import pytest\n\n{cuda}\n@pytest.mark.skip('no CUDA')\n"
                                        "def test_a():\n    pass\n")
    (tmp_path / "test_b.py").write_text(f"import pytest\n\n{cuda}\ndef test_b():\n    pytest.skip('no CUDA')\n")

    def run(cmd, cap, log):
        return procs.run_capped(cmd, cap, cwd=tmp_path, env=dict(os.environ), log=log, token=f"t-{time.time_ns()}")
    files = [tmp_path / "test_a.py", tmp_path / "test_b.py"]
    ok = pytest_runs.run_together(run, sys.executable, files, "cuda and not dali", 60, 10, tmp_path / "logs")
    assert (ok["status"], ok["passed"], ok["skipped"], ok["failed"]) == ("ok", 0, 2, 0)
    assert [f["status"] for f in ok["files"]] == ["collected", "collected"]
    (tmp_path / "test_b.py").write_text("import a_module_this_machine_lacks\n")
    bad = pytest_runs.run_together(run, sys.executable, files, "cuda and not dali", 60, 10, tmp_path / "logs")
    assert bad["status"] == "problems" and "a_module_this_machine_lacks" in bad["tail"]


def test_cuda_test_files_found_by_their_mark():
    """The core call runs "cuda and not dali": a file whose every test is DALI's (its module
    mark) is not started at all; one with a DALI param beside CUDA tests is."""
    files = [f.name for f in pytest_runs.files_marked(REPO / "tests", "cuda", leave_out_module_mark="dali")]
    assert files[0] == "test_cuda_finisher.py" and "test_gpu_decode.py" in files
    assert "test_gpu_check.py" not in files and "test_dali.py" not in files
    assert "test_dali.py" in [f.name for f in pytest_runs.files_marked(REPO / "tests", "cuda")]


def test_the_dry_run_holds_and_its_rerun_runs_only_what_failed(tmp_path):
    """The whole plan with stand-ins: a segfault and a hang (in a stage and in a test file)
    reported, a stage without CUDA "skipped", every later stage run, no process left,
    summary.json after every stage. Then --only-failed: the stages that ended ok are kept."""
    problems, final = dryrun.dry_run(tmp_path, scale=0.25)
    assert problems == []
    stages = final["stages"]
    assert stages["core.prefetch"]["status"] == "crashed" and stages["core.prefetch"]["signal"] == "SIGSEGV"
    assert stages["core.gpu_whole_decode"]["status"] == "timed out"
    assert (stages["core.resnet50"]["status"], stages["core.resnet50"]["reason"]) == ("skipped", "no CUDA device")
    assert stages["core.setup"]["status"] == "ok"
    assert final["tests"]["cuda_tests"]["crashed"] == ["test_cuda_3_segfault.py"]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["stages"] == stages
    assert json.loads((tmp_path / "work" / "summary.json").read_text())["stages"] == stages

    problems, again = dryrun.rerun_only_failed(tmp_path, scale=0.25)
    assert problems == []
    assert again["plans"]["core.plan"]["kept"] == ["smoke", "data", "loader", "grid_splice"]
    for name in ("prefetch", "gpu_whole_decode", "resnet50"):               # rerun, now with stand-ins that work
        assert again["stages"][f"core.{name}"]["status"] == "ok"
    assert again["stages"]["core.smoke"] == stages["core.smoke"]           # kept as it was
    assert again["stages"]["core.cuda_tests"]["status"] == "problems"        # the same test files: rerun


def test_a_check_stopped_by_sigterm_takes_its_running_stage_with_it(tmp_path):
    """The device call's limit: check.py gets SIGTERM in the middle of a hung stage; the
    stage's processes, the one in a session of its own too, end with it."""
    import signal
    import subprocess
    import dryrun as d
    standins = tmp_path / "standins.json"
    standins.write_text(json.dumps({"smoke": "hang"}))
    bundles = tmp_path / "bundles"
    import bundle
    bundle.pack({"core": d.tiny_wheel(tmp_path / "wheels").parent}, bundles, tmp_path / "xz", 1 << 20, 1 << 20)
    token = f"sigterm-{time.time_ns()}"
    (tmp_path / "out").mkdir()
    env = dict(os.environ, FEEDLINE_GPU_WORK=str(tmp_path / "work"), GPU_WHEELS_OUT=str(bundles),
               OUT=str(tmp_path / "out"), **{d.DRY_MARKER: token})
    check = subprocess.Popen([sys.executable, str(REPO / ".ci" / "gpu" / "check.py"), "--budget-s", "300",
                              "--dry-run", str(standins), "--tests", str(tmp_path)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = tmp_path / "work" / "seen" / "smoke.json"
    deadline = time.monotonic() + 60
    while not seen.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    children = json.loads(seen.read_text())["children"]
    time.sleep(0.3)
    check.send_signal(signal.SIGTERM)
    assert check.wait(timeout=30) != 0
    time.sleep(0.5)
    assert d.marked(token) == []
    assert not any(dryrun._alive(pid) for pid in children)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["stages"]["core.smoke"]["status"] == "stopped"   # said before it went


def test_the_smoke_decodes_compare_on_the_cpu_backend(monkeypatch):
    """The smoke test's decodes and comparisons, on nvImageCodec's CPU backend (on the GPU
    machine the same code runs on the GPU backends): whole images and regions agree."""
    import smoke
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    nv = load_nvimgcodec()
    monkeypatch.setattr(smoke, "gpu_backends", lambda nv: [nv.CPU_ONLY])
    out = {}
    smoke.child_region(out)
    assert out["region_ok"] is True and len(out["region_diffs"]) == smoke.BATCH
    images = smoke.decode(nv, smoke.jpegs(2), [nv.CPU_ONLY])
    assert all(image.ndim == 3 and image.shape[2] == 3 for image in images)


def test_the_dali_call_fits_its_budget():
    caps = plan.plan(plan.DALI, plan.DALI_BUDGET_S)
    assert sum(caps.values()) + plan.RESERVE_S == pytest.approx(plan.DALI_BUDGET_S)
    assert list(caps)[:5] == ["setup", "smoke", "data", "dali_tests", "dali_decode"]
    assert plan.dali_budget_for(400) == plan.DALI_BUDGET_S
    assert plan.dali_budget_for(200) == 200 - 2 * plan.RECEIVE_CALL_S - plan.CALL_OVERHEAD_S


def test_a_stage_leaves_the_later_stages_their_caps_unless_they_are_kept():
    caps = plan.plan(plan.CORE, plan.MAX_BUDGET_S)
    assert plan.cap_now(caps, "loader", 1000) == (caps["loader"], None)            # at most its own cap
    later = sum(v for k, v in list(caps.items())[list(caps).index("loader") + 1:])
    assert plan.cap_now(caps, "loader", later + 20) == (20, None)                    # the later stages keep theirs
    assert plan.cap_now(caps, "loader", later + 2)[1].startswith("out of time: ")
    kept = ("prefetch", "gpu_whole_decode")                                          # --only-failed: not run
    assert plan.cap_now(caps, "loader", later + 2, skipped=kept) == (
        min(caps["loader"], 2 + caps["prefetch"] + caps["gpu_whole_decode"]), None)
    assert plan.cap_now(caps, "grid_splice", 3)[1] == "out of time: 3 s left for it"
