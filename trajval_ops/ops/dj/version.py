"""The Data-Juicer releases trajval_ops supports, checked once when the plugin loads: every other
module of this package relies on internals of exactly these releases."""

from __future__ import annotations


#: Data-Juicer releases whose internals this module was written and tested against.
SUPPORTED_DATA_JUICER = ("1.6.1", "1.7")  # >= first, < second


class UnsupportedDataJuicer(ImportError):
    """The installed Data-Juicer is outside the range this adapter supports."""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    return tuple(parts)


def check_data_juicer(version: str | None = None) -> str:
    """The installed Data-Juicer version; :class:`UnsupportedDataJuicer` when it is outside
    :data:`SUPPORTED_DATA_JUICER`."""
    if version is None:
        from importlib.metadata import version as installed

        version = installed("py-data-juicer")
    low, high = SUPPORTED_DATA_JUICER
    if not _version_tuple(low) <= _version_tuple(version) < _version_tuple(high):
        raise UnsupportedDataJuicer(
            f"trajval_ops supports py-data-juicer >={low},<{high}; this environment has {version}. "
            f"Install a supported release: pip install 'py-data-juicer>={low},<{high}'"
        )
    return version
