"""The agent tick loop, dispatch runner and chain access (SPEC R-A)."""

__all__: list[str] = []
