"""The app's bytecode is checked against its source by hash, not by modification time.

Python trusts a `__pycache__` file whose recorded source time (whole seconds) and size match the
source's. A file saved twice in one second with the same size (`old` → `new`, a checkout, an
editor's quick second save) would then run the code of the first save, while `app_version`,
hashed from the file itself, names the second: `toolpipe serve` would follow the app one save
late and say it had not. Bytecode written in the checked-hash form (PEP 552) is compared with a
hash of the source at every import, and the import system keeps that form when it recompiles.
"""

import _imp
import importlib.util
import os
import py_compile
import sys
from pathlib import Path

# A pyc's flags word (PEP 552): bit 0 says the pyc is hash-based, bit 1 that it is checked.
_CHECKED_HASH = 0b11


def check_by_hash(files: list[Path]) -> None:
    """Write each file's bytecode in the checked-hash form where it is not already.

    Nothing is written where Python would write nothing: with `PYTHONDONTWRITEBYTECODE` set or
    in a folder this process may not write (a deployed function's code); nor under
    `--check-hash-based-pycs never`, where Python would not check the hash. A file that does not
    compile is left to the import, which says why in its own error.
    """
    if sys.dont_write_bytecode or _imp.check_hash_based_pycs == "never":
        return  # `never`: Python would trust a hash-based pyc unchecked, and never see a save
    writable: dict[str, bool] = {}
    for path in files:
        cached = importlib.util.cache_from_source(str(path))
        folder = os.path.dirname(cached)
        if folder not in writable:
            # The `__pycache__` folder, or the one it would be made in: a file is compiled only
            # where it can be written, not at each import and then thrown away.
            writable[folder] = os.access(folder if os.path.isdir(folder) else path.parent, os.W_OK)
        if not writable[folder]:
            continue
        if _checked_by_hash(cached):
            continue
        try:
            py_compile.compile(
                str(path), cfile=cached, doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )  # fmt: skip
        except (py_compile.PyCompileError, OSError):
            continue


def _checked_by_hash(cached: str) -> bool:
    """Whether the bytecode at `cached` is this Python's and checked against its source by hash."""
    try:
        with open(cached, "rb") as f:
            header = f.read(8)
    except OSError:
        return False
    return (
        len(header) == 8
        and header[:4] == importlib.util.MAGIC_NUMBER
        and int.from_bytes(header[4:8], "little") & _CHECKED_HASH == _CHECKED_HASH
    )
