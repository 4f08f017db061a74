"""The interference readers and the per-trial monitor over a faked /proc tree (monitors/
interference.py): the arithmetic of the foreign share, the series per interval, the record over
several windows, the clock's sources, the snapshot a killed worker leaves, and wait_quiet's limit.
No assertion here says "quiet" about this machine: it is busy (so is CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.analysis import interference as judged
from dlbench.monitors import interference as mon

# These tests judge trials at dlbench's own busy threshold (conftest: busy_judged).
pytestmark = pytest.mark.usefixtures("busy_judged")

TICK = mon.TICK_S


def _ticks(seconds: float) -> int:
    return round(seconds / TICK)


def write_stat(root: Path, busy_s: float, idle_s: float, steal_s: float = 0.0, cpus: int = 2,
               running: int | None = 3, loadavg: bool = True) -> None:
    """/proc/stat with the aggregate line (busy as user time), one line per CPU, procs_running;
    /proc/loadavg with the runnable count."""
    lines = [f"cpu  {_ticks(busy_s)} 0 0 {_ticks(idle_s)} 0 0 0 {_ticks(steal_s)} 0 0"]
    lines += [f"cpu{i} 0 0 0 0 0 0 0 0 0 0" for i in range(cpus)]
    lines += ["intr 0", "ctxt 0"]
    if running is not None:
        lines.append(f"procs_running {running}")
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text("\n".join(lines) + "\n")
    if loadavg and running is not None:
        (root / "loadavg").write_text(f"1.00 0.50 0.25 {running}/157 999\n")


def write_pid(root: Path, pid: int, utime_s: float, stime_s: float = 0.0, cutime_s: float = 0.0,
              cstime_s: float = 0.0, name: str = "py thon) x") -> None:
    """/proc/PID/stat: a command name with a space and a parenthesis, as the kernel allows."""
    fields = ["S", *["0"] * 10, *(str(_ticks(v)) for v in (utime_s, stime_s, cutime_s, cstime_s)), *["0"] * 30]
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")


class FakeTree:
    def __init__(self, pids: list[int]) -> None:
        self.members = pids
        self.fresh_calls = 0

    def pids(self, fresh: bool = False) -> list[int]:
        self.fresh_calls += fresh
        return list(self.members)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


# -- the readers ----------------------------------------------------------------------------------


def test_cpu_times_reads_the_aggregate_line_and_counts_cpus(tmp_path):
    write_stat(tmp_path, busy_s=3.0, idle_s=5.0, steal_s=0.5, cpus=4)
    t = mon.cpu_times(tmp_path)
    assert t is not None
    assert (t.busy_s, t.idle_s, t.steal_s, t.cpus) == pytest.approx((3.0, 5.0, 0.5, 4))
    assert t.total_s == pytest.approx(8.5)
    assert mon.cpu_times(tmp_path / "absent") is None


def test_run_queue_from_loadavg_and_else_from_stat(tmp_path):
    write_stat(tmp_path, 1, 1, running=5)
    (tmp_path / "loadavg").write_text("9.1 2.0 1.0 7/300 12\n")
    assert mon.procs_running(tmp_path) == 7  # loadavg first: a few bytes against /proc/stat's lines
    (tmp_path / "loadavg").unlink()
    assert mon.procs_running(tmp_path) == 5
    assert mon.procs_running(tmp_path / "absent") is None


def test_process_cpu_counts_reaped_children_only_when_asked(tmp_path):
    write_pid(tmp_path, 10, utime_s=2.0, stime_s=0.5, cutime_s=1.0, cstime_s=0.25)
    write_pid(tmp_path, 11, utime_s=0.3)
    assert mon.process_cpu_s([10, 11], tmp_path) == pytest.approx(2.8)
    assert mon.process_cpu_s([10, 11], tmp_path, waited_children=True) == pytest.approx(4.05)
    assert mon.process_cpu_s([10, 12345], tmp_path) == pytest.approx(2.5)  # a process gone counts 0


def test_foreign_share_is_busy_less_own_over_capacity():
    before = mon.CpuTimes(busy_s=10.0, idle_s=10.0, steal_s=0.0, cpus=2)
    after = mon.CpuTimes(busy_s=11.5, idle_s=10.5, steal_s=0.0, cpus=2)  # 2 s of capacity: 1 s wall
    assert mon.foreign_share(before, after, own_cpu_s=1.0) == pytest.approx(0.25)
    assert mon.foreign_share(before, after, own_cpu_s=3.0) == 0.0  # tick rounding never goes below 0
    assert mon.foreign_share(after, after, 0.0) is None
    stolen = mon.CpuTimes(busy_s=11.5, idle_s=10.3, steal_s=0.2, cpus=2)
    assert mon.steal_share(before, stolen) == pytest.approx(0.1)


# -- the clock ------------------------------------------------------------------------------------


def test_clock_reads_sysfs_for_the_trials_cores_only(tmp_path):
    sys_cpu = tmp_path / "sys"
    for cpu, khz in ((0, 2_000_000), (1, 3_000_000), (2, 1_000_000)):
        (sys_cpu / f"cpu{cpu}" / "cpufreq").mkdir(parents=True)
        (sys_cpu / f"cpu{cpu}" / "cpufreq" / "scaling_cur_freq").write_text(f"{khz}\n")
    clock = mon.Clock([0, 1], sys_cpu, tmp_path / "proc")
    assert clock.source == "sysfs" and clock.min_period_s == 0.0
    assert clock.mhz() == [2000.0, 3000.0]


def test_clock_falls_back_to_cpuinfo_then_to_nothing(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 2500.5\n\nprocessor\t: 1\ncpu MHz\t\t: 1200.0\n")
    clock = mon.Clock([1], tmp_path / "nosys", proc)
    assert clock.source == "cpuinfo" and clock.min_period_s >= 1.0  # read at most once a second
    assert clock.mhz() == [1200.0]
    (proc / "cpuinfo").write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # an ARM machine says no clock
    clock = mon.Clock([0], tmp_path / "nosys", proc)
    assert clock.source is None and clock.mhz() == []


# -- the monitor ----------------------------------------------------------------------------------


def _monitor(tmp_path: Path, threads: int = 2, snapshot: Path | None = None) -> tuple[mon.InterferenceMonitor, FakeClock, FakeTree]:
    clock = FakeClock()
    tree = FakeTree([10, 11])
    (tmp_path / "cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 2000\nprocessor\t: 1\ncpu MHz\t\t: 3000\n")
    m = mon.InterferenceMonitor(tree, threads, [0, 1], snapshot, root=tmp_path, sys_cpu=tmp_path / "nosys",
                                clock=clock, parent_pid=1)
    return m, clock, tree


def _state(root: Path, busy: float, idle: float, worker: float, loader: float = 0.0, parent: float = 0.0,
           steal: float = 0.0, running: int = 3, reaped: float = 0.0) -> None:
    write_stat(root, busy, idle, steal, running=running)
    write_pid(root, 10, utime_s=worker, cutime_s=reaped)
    write_pid(root, 11, utime_s=loader)
    write_pid(root, 1, utime_s=parent, cutime_s=100.0)  # the parent's reaped children are not the trial's


def test_one_window_gives_the_record_and_a_point_per_interval(tmp_path):
    m, clock, tree = _monitor(tmp_path)
    _state(tmp_path, busy=0, idle=0, worker=0)
    m.begin_window()
    assert tree.fresh_calls == 1  # the tree listed at the window's edge, not up to a second ago
    # first second: the trial uses 1 core (worker 0.8 + loader 0.2), others 0.5 of a core, parent 0.1
    clock.t += 1.0
    _state(tmp_path, busy=1.6, idle=0.4, worker=0.8, loader=0.2, parent=0.1, running=5)
    m.tick()
    # second second: a 2-core hog beside it: every CPU busy, the trial gets half a core
    clock.t += 1.0
    _state(tmp_path, busy=3.6, idle=0.4, worker=1.1, loader=0.4, parent=0.1, running=9)
    m.end_window()
    assert [t for t, _ in m.series] == pytest.approx([1.0, 2.0])
    assert [v for _, v in m.series] == pytest.approx([0.25, 0.75])
    r = m.metrics()
    assert r[judged.FOREIGN_CPU_SHARE] == pytest.approx((3.6 - 1.5 - 0.1) / 4.0)
    assert r[judged.SELF_CPU_SHARE] == pytest.approx(1.5 / (2.0 * 2))
    assert r[judged.STEAL_SHARE] == 0.0
    assert r[judged.RUN_QUEUE] == pytest.approx((3 + 5) / 2)  # the window's first sample and the tick's
    assert r[judged.CPU_FREQ_MEAN] == pytest.approx(2500.0) and r[judged.CPU_FREQ_MIN] == 2000.0
    assert judged.Interference.from_metrics(r).state == judged.BUSY


def test_a_reaped_child_moves_into_its_parents_cpu_and_is_not_foreign(tmp_path):
    m, clock, tree = _monitor(tmp_path)
    _state(tmp_path, busy=0, idle=0, worker=0, loader=0.5)
    m.begin_window()
    tree.members = [10]  # the loader worker ended and was reaped: its CPU is now the worker's cutime
    clock.t += 1.0
    # in the window: the worker 0.5 s, the loader 1.0 s more (1.5 s in all, now reaped), nobody else
    _state(tmp_path, busy=1.5, idle=0.5, worker=0.5, reaped=1.5)
    m.end_window()
    assert m.metrics()[judged.FOREIGN_CPU_SHARE] == pytest.approx(0.0)


def test_several_windows_give_one_record_and_a_continuous_series(tmp_path):
    m, clock, _ = _monitor(tmp_path, threads=1)
    _state(tmp_path, busy=0, idle=0, worker=0)
    m.begin_window()
    clock.t += 1.0
    _state(tmp_path, busy=1.0, idle=1.0, worker=1.0)  # quiet
    m.end_window()
    clock.t += 30.0  # untimed work between the windows: not counted
    _state(tmp_path, busy=50.0, idle=11.0, worker=20.0)
    m.begin_window()
    clock.t += 1.0
    _state(tmp_path, busy=52.0, idle=11.0, worker=21.0)  # a hog on the other core
    m.end_window()
    assert m.series == [(pytest.approx(1.0), pytest.approx(0.0)), (pytest.approx(2.0), pytest.approx(0.5))]
    r = m.metrics()
    assert r[judged.FOREIGN_CPU_SHARE] == pytest.approx(1.0 / 4.0)
    assert r[judged.SELF_CPU_SHARE] == pytest.approx(2.0 / 2.0)


def test_a_short_last_interval_joins_the_point_before(tmp_path):
    m, clock, _ = _monitor(tmp_path)
    _state(tmp_path, busy=0, idle=0, worker=0)
    m.begin_window()
    clock.t += 1.0
    _state(tmp_path, busy=1.0, idle=1.0, worker=1.0)
    m.tick()
    clock.t += 0.1  # under MIN_INTERVAL_S
    _state(tmp_path, busy=1.2, idle=1.0, worker=1.0)
    m.end_window()
    assert len(m.series) == 1
    t, share = m.series[0]
    assert t == pytest.approx(1.1) and share == pytest.approx(0.2 / 2.2)


def test_a_window_shorter_than_an_interval_is_one_point(tmp_path):
    m, clock, _ = _monitor(tmp_path)
    _state(tmp_path, busy=0, idle=0, worker=0)
    m.begin_window()
    clock.t += 0.05
    _state(tmp_path, busy=0.1, idle=0.0, worker=0.05)
    m.end_window()
    assert len(m.series) == 1 and m.series[0][1] == pytest.approx(0.5)


def test_nothing_measured_is_every_field_none_and_state_unknown(tmp_path):
    m, _, _ = _monitor(tmp_path)
    r = m.metrics()
    assert set(r) == set(judged.METRICS) and all(v is None for v in r.values())
    assert judged.Interference.from_metrics(r).state == judged.UNKNOWN
    m.end_window()  # closing what never opened (a trial that failed before its window) is harmless
    assert m.series == []


def test_without_proc_the_monitor_measures_nothing(tmp_path):
    m = mon.InterferenceMonitor(FakeTree([1]), 2, [0], root=tmp_path / "absent", sys_cpu=tmp_path)
    m.begin_window()
    m.tick()
    m.end_window()
    assert not m.available and m.metrics()[judged.FOREIGN_CPU_SHARE] is None


def test_an_open_window_counts_up_to_its_latest_reading_and_the_snapshot_keeps_it(tmp_path):
    snapshot = tmp_path / "out.interference.json"
    m, clock, _ = _monitor(tmp_path, snapshot=snapshot)
    _state(tmp_path, busy=0, idle=0, worker=0)
    m.begin_window()
    clock.t += 1.0
    _state(tmp_path, busy=2.0, idle=0.0, worker=1.0)  # a hog on the other core
    m.tick()
    first = mon.read_snapshot(snapshot)  # written after the first interval: a worker killed soon keeps it
    assert first is not None and first[0][judged.FOREIGN_CPU_SHARE] == pytest.approx(0.5)
    clock.t += 1.0
    _state(tmp_path, busy=2.5, idle=1.5, worker=1.5)  # the hog stopped
    m.tick()
    assert m.metrics()[judged.FOREIGN_CPU_SHARE] == pytest.approx(1.0 / 4.0)  # the open window so far
    assert mon.read_snapshot(snapshot) == first  # not yet due again
    clock.t += mon.SNAPSHOT_PERIOD_S
    _state(tmp_path, busy=2.5 + mon.SNAPSHOT_PERIOD_S, idle=1.5 + mon.SNAPSHOT_PERIOD_S,
           worker=1.5 + mon.SNAPSHOT_PERIOD_S)
    m.tick()
    # the worker is killed here, inside its window: the parent reads what it left
    kept = mon.read_snapshot(snapshot)
    assert kept is not None
    metrics, series = kept
    assert metrics == m.metrics() and series == m.series
    assert [round(v, 6) for _, v in series] == [0.5, 0.0, 0.0]
    assert mon.read_snapshot(tmp_path / "absent.json") is None


# -- waiting for a quiet machine --------------------------------------------------------------------


class Machine:
    """A faked /proc whose foreign load is `shares[i]` during the i-th interval of a wait."""

    def __init__(self, root: Path, shares: list[float]) -> None:
        self.root, self.shares, self.t, self.busy, self.i = root, shares, 0.0, 0.0, 0
        write_stat(root, 0.0, 0.0)

    def sleep(self, seconds: float) -> None:
        share = self.shares[min(self.i, len(self.shares) - 1)]
        self.i += 1
        self.t += seconds
        self.busy += share * 2 * seconds
        write_stat(self.root, self.busy, 2 * self.t - self.busy)

    def clock(self) -> float:
        return self.t


def test_wait_quiet_returns_once_quiet_with_the_seconds_waited(tmp_path):
    machine = Machine(tmp_path, [0.9, 0.8, 0.02])
    told = []
    waited = mon.wait_quiet(60.0, own_pids=[], root=tmp_path, sleep=machine.sleep, clock=machine.clock,
                            on_wait=lambda share, s: told.append(round(share, 2)))
    assert waited == pytest.approx(3.0)
    assert told == [0.9, 0.8]


def test_wait_quiet_gives_up_at_its_limit(tmp_path):
    machine = Machine(tmp_path, [0.9])
    assert mon.wait_quiet(5.0, root=tmp_path, sleep=machine.sleep, clock=machine.clock) is None
    assert 5.0 <= machine.t <= 6.0  # one interval past the limit at most


def test_wait_quiet_that_cannot_read_proc_never_says_quiet(tmp_path):
    assert mon.wait_quiet(5.0, root=tmp_path / "absent", sleep=lambda s: None) is None


def test_the_methodology_states_the_thresholds_and_every_field():
    text = (Path(__file__).resolve().parents[1] / "docs" / "methodology.md").read_text()
    section = text[text.index("## Interference"):text.index("## Cost of measuring")]
    assert f"{judged.BUSY_FOREIGN_SHARE * 100:.0f} % of the machine" in section
    assert f"steal {judged.BUSY_STEAL_SHARE * 100:.0f} %" in section
    assert all(f"`{name}`" in section for name in judged.METRICS)
