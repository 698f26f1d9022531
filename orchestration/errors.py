"""Errors every entry point reports the same way, importable without Dagster or the assets."""


class SettingsError(ValueError):
    """The configuration cannot be used: which file, key or variable, and why, on one line."""
