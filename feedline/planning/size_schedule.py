"""The output size as a function of the epoch (progressive resizing, as FFCV does it):
``size=`` may be a callable ``epoch -> size`` or an object with a ``size(epoch)`` method.

The loader asks once per epoch, before planning it; every engine then crops to that size
and its buffers follow (the CPU engine makes its ring anew when the size changes and
frees the old one, so memory is that of the current size, never the sum of all sizes).
"""
from __future__ import annotations


def as_size(value, where: str) -> tuple[int, int]:
    """(height, width) from an int or a pair; a ValueError naming ``where`` otherwise."""
    size = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        h, w = (int(v) for v in size)
        ok = h >= 1 and w >= 1 and all(float(v) == int(v) for v in size)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{where} must be a positive int or (height, width), got {value!r}")
    return h, w


class SizeSchedule:
    """``at(epoch)``: the (height, width) of ``epoch`` from the user's callable or method."""

    def __init__(self, schedule):
        method = getattr(schedule, "size", None)
        self._fn = method if callable(method) else schedule
        if not callable(self._fn):
            raise TypeError(f"size must be an int, (height, width), a callable epoch -> size or an object "
                            f"with a size(epoch) method; got {type(schedule).__name__}")
        self.schedule = schedule

    def at(self, epoch: int) -> tuple[int, int]:
        return as_size(self._fn(int(epoch)), f"size({epoch}) (the size schedule at epoch {epoch})")

    def known_sizes(self) -> list[tuple[int, int]] | None:
        """Every size the schedule gives, when it has a ``sizes()`` method; else None."""
        sizes = getattr(self.schedule, "sizes", None)
        return [as_size(s, "size schedule's sizes()") for s in sizes()] if callable(sizes) else None

    def __repr__(self) -> str:
        return f"SizeSchedule({self.schedule!r})"


def schedule_of(size) -> SizeSchedule | None:
    """A SizeSchedule when ``size`` varies with the epoch; None for a fixed size."""
    if not callable(size) and not callable(getattr(size, "size", None)):
        return None   # a fixed size (or none given)
    return size if isinstance(size, SizeSchedule) else SizeSchedule(size)


class ProgressiveSize:
    """FFCV's progressive resizing: ``start`` up to ``start_epoch``, then a linear ramp to
    ``end`` over ``ramp_epochs`` epochs (rounded to a multiple of ``step``), ``end`` after."""

    def __init__(self, start: int, end: int, ramp_epochs: int, start_epoch: int = 0, step: int = 32):
        for name, v in (("start", start), ("end", end), ("step", step)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"ProgressiveSize: {name} must be a positive int, got {v!r}")
        for name, v in (("ramp_epochs", ramp_epochs), ("start_epoch", start_epoch)):
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"ProgressiveSize: {name} must be an int >= 0, got {v!r}")
        self.start, self.end, self.ramp_epochs, self.start_epoch, self.step = start, end, ramp_epochs, start_epoch, step

    def size(self, epoch: int) -> int:
        if epoch <= self.start_epoch:
            return self.start
        if epoch >= self.start_epoch + self.ramp_epochs:
            return self.end
        value = self.start + (epoch - self.start_epoch) / self.ramp_epochs * (self.end - self.start)
        return max(self.step, int(round(value / self.step)) * self.step)

    def sizes(self) -> set[int]:
        """Every size this schedule gives (the buffers of the largest bound memory)."""
        return {self.size(e) for e in range(self.start_epoch + self.ramp_epochs + 2)}

    def __repr__(self) -> str:
        return (f"ProgressiveSize(start={self.start}, end={self.end}, ramp_epochs={self.ramp_epochs}, "
                f"start_epoch={self.start_epoch}, step={self.step})")
