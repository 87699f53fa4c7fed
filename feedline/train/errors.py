"""The trainer's error: an option or input the user can fix."""
from __future__ import annotations

from ..core.errors import FeedlineError


class TrainError(FeedlineError):
    """A trainer option or input the user can fix: bad flag values, unusable data, checkpoints."""
