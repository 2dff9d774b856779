"""Provenance: the source manifest and freeze check, the hash-chained ledger, frozen plans,
signing keys, DSSE seals over closed-world archives, verification, restore, and stage
claims."""
