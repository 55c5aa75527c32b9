"""``tomllib`` on every Python the package supports (``requires-python`` says 3.10; tomllib is 3.11's)."""

try:
    import tomllib
except ModuleNotFoundError:  # 3.10: tomli is the same parser (the test extra installs it there)
    import tomli as tomllib

__all__ = ["tomllib"]
