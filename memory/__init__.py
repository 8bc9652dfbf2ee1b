"""Findings memory over the journal (SPEC R-L, R-R) and the agent ledger (SPEC R-A)."""

__all__: list[str] = []
