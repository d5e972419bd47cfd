"""``python -m phi4mm ARGS``: runs the ``phi4mm`` program installed with the package (``serve``,
``run``, ``chat``, ``bench``, ``info``, ``quantize``, ``export``...) with the same arguments."""

import os
import sys

from . import cli_path


def main() -> None:
    path = cli_path()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
