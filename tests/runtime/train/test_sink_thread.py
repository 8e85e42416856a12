"""BackgroundSinks: reports written off the training thread, the newest one winning, no history lost, the
final one waited for, a sink's error raised on the training thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from graphtrain.contract.spec import Progress
from graphtrain.runtime.train.sink_thread import BackgroundSinks, coalesce
from graphtrain.runtime.train.sinks import FileSink

WAIT = 10.0


def progress(step: int) -> Progress:
    return Progress(epoch=0, epochs=2, step=step, loss=1.0 / step)


class GatedSink:
    """Records what it is given; each write waits for the gate (the test holds the writer thread)."""

    def __init__(self) -> None:
        self.written: list[tuple[int, bool, list[int] | None]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail: Exception | None = None

    def write(self, p: Progress, final: bool, history: list[Progress] | None = None) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT)
        if self.fail is not None:
            raise self.fail
        self.written.append((p.step, final, None if history is None else [h.step for h in history]))

    def load_history(self) -> list[Progress]:
        return [progress(s) for _, _, h in self.written[-1:] for s in h or []]


def test_coalesce_keeps_the_replaced_reports_history() -> None:
    a, b = progress(1), progress(2)
    assert coalesce(None, (b, False, None)) == (b, False, None)
    assert coalesce((a, False, [a]), (b, False, None)) == (b, False, [a])
    assert coalesce((a, False, [a]), (b, True, [a, b])) == (b, True, [a, b])


def test_the_newest_report_is_written_and_the_final_one_waited_for() -> None:
    sink = GatedSink()
    sinks = BackgroundSinks([sink])
    sinks.write(progress(1), False)
    assert sink.entered.wait(WAIT)  # the writer holds report 1 at the gate; the caller went on
    sinks.write(progress(2), False, [progress(2)])
    sinks.write(progress(3), False)  # replaces 2, keeping its history
    done = threading.Event()
    final = threading.Thread(target=lambda: (sinks.write(progress(4), True), done.set()))
    final.start()
    assert not done.wait(0.2)  # the final report waits for the writer
    sink.gate.set()
    final.join(WAIT)
    assert done.is_set()
    # 3 was either written (carrying 2's history) or replaced by 4 (which then carries it)
    assert sink.written[0] == (1, False, None)
    assert sink.written[-1][:2] == (4, True)
    assert [2] in [h for _, _, h in sink.written]
    sinks.close()


def test_a_sinks_error_is_raised_at_the_next_report() -> None:
    sink = GatedSink()
    sink.fail = OSError("disk full")
    sink.gate.set()
    sinks = BackgroundSinks([sink])
    sinks.write(progress(1), False)
    with pytest.raises(OSError, match="disk full"):
        sinks.flush()
    sink.fail = None
    sinks.write(progress(2), True)  # raised once: the next reports go on
    assert sink.written == [(2, True, None)]
    sinks.close()


def test_after_close_reports_are_written_inline_and_history_reads_after_the_writes(tmp_path: Path) -> None:
    sinks = BackgroundSinks([FileSink(tmp_path)])
    sinks.write(progress(1), False, [progress(1)])
    assert [p.step for p in sinks.load_history()] == [1]  # flushed before it read
    sinks.close()
    assert not sinks._thread.is_alive()
    sinks.write(progress(2), False, [progress(1), progress(2)])
    assert [p.step for p in FileSink(tmp_path).load_history()] == [1, 2]
    sinks.close()  # twice: nothing to do


def test_a_sink_never_reported_to_holds_no_thread() -> None:
    sinks = BackgroundSinks([GatedSink()])
    sinks.close()
    assert not sinks._thread.is_alive()


def test_reports_queued_behind_a_failed_write_are_dropped_not_written_at_close() -> None:
    """The final "Succeeded" queued behind a write that fails: its flush raises the failure, and close()
    (EpochLoop.run's finally) does not write it afterwards."""
    sink = GatedSink()
    sink.fail = OSError("disk full")
    sinks = BackgroundSinks([sink])
    sinks.write(progress(1), False)
    assert sink.entered.wait(WAIT)
    raised: list[BaseException] = []

    def final() -> None:
        try:
            sinks.write(progress(2), True)
        except OSError as exc:
            raised.append(exc)

    writer = threading.Thread(target=final)
    writer.start()
    writer.join(0.2)  # queued behind report 1, waiting for it
    sink.gate.set()  # report 1 fails
    writer.join(WAIT)
    assert [str(e) for e in raised] == ["disk full"]
    sink.fail = None
    sinks.close()
    assert sink.written == []
