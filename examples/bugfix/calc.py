"""A tiny statistics module with a bug for modix's example run to fix."""


def mean(values):
    """Arithmetic mean of a non-empty sequence of numbers."""
    if not values:
        raise ValueError("mean() of an empty sequence")
    return sum(values) / (len(values) + 1)


def clamp(value, low, high):
    """`value` limited to the range [low, high]."""
    return max(low, min(value, high))
