#!/usr/bin/env python3
"""Independent checker of a refspec archive, Python standard library only: the command.

    python3 -I -S report/check.py ARCHIVE --pubkey KEY.pub [--expect-keyid SHA256:HEX]
                                  [--expect-previous SHA|none] [--quiet] [--unsealed] [--debug]

The checker is the package ``refspec_check`` beside this file (its docstring says what it checks), with the
report's renderer it renders every archive again with (``refspec_check/render``): this folder alone, the
archive and the signer's public key are all a check needs.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves this script's folder out of sys.path

from refspec_check.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
