"""The baselines shipped inside the package, named as the model aliases are: ``--longctx-baseline smollm2-135m``
gates SmolLM2 against its committed baseline wherever pytest-longctx is installed, without the repository (whose
``baselines/smollm2-135m.json.gz`` is the same file). A name is a shipped baseline only where no file of that name
is there: a path given is always the path."""
from __future__ import annotations

from pathlib import Path

from pytest_longctx.errors import LongctxError

SHIPPED = Path(__file__).resolve().parent / "baselines"
SUFFIX = ".json.gz"


def shipped_names() -> list[str]:
    """The names of the baselines shipped with the package, e.g. ``smollm2-135m``."""
    return sorted(p.name.removesuffix(SUFFIX) for p in SHIPPED.glob(f"*{SUFFIX}"))


def baseline_file(given: str, here: Path, option: str, writing: bool = False) -> Path:
    """The file a baseline option names: ``given`` relative to ``here`` (the folder the command runs in), or, where
    nothing is there and ``given`` is a shipped baseline's name, that baseline. ``writing`` (an update): a shipped
    baseline is the package's, never replaced: the name is refused, saying what to give instead."""
    path = here / given
    if given not in shipped_names() or path.exists() or path.is_symlink():
        return path
    if writing:
        raise LongctxError(f"{option} {given}: names the baseline shipped with pytest-longctx, which an update does not "
                           f"replace; give the file to write, e.g. {option} baselines/my-model{SUFFIX}")
    return SHIPPED / f"{given}{SUFFIX}"
