"""Experiments beside the campaigns: numerical replay E1 (``replay``) over the attention
operand library and its native tool (``operands``), the representation audit, backend
admission, and state formation and transfer (``state``)."""
