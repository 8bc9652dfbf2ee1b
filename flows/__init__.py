"""The flows runtime: drive a flow body under a durable root run (SPEC R-F)."""

__all__: list[str] = []
