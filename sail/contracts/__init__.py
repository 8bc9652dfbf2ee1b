"""Compiled contract artifacts (ABI + bytecode JSON), shipped as package data; see contracts/."""
