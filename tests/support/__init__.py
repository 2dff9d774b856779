"""Helper modules the tests import (``from support.NAME import ...``; ``tests`` is on pytest's
``pythonpath``): no tests of their own."""
