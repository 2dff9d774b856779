"""State formation and transfer studies (paper §6.1-6.2, S4, S5): ``refspec state``.

Partition campaign (``refspec state partition``)
    For every input the prompt is prefilled by several arms that differ only in
    how the prompt is partitioned, then continued by natural greedy decoding
    (target only, one token per caller) in the same context:

    * ``A``  -- micro-batch ``--ub-a`` (512), the whole prompt in one caller;
    * ``B``  -- the same context, the prompt split externally into ``--b-split``
      (128) tokens plus the remainder (two callers);
    * ``C``  -- micro-batch ``--ub-c`` (128), the whole prompt in one caller,
      partitioned by the runtime;
    * ``S<s>`` -- external split sweep at ``s`` tokens (``--splits``; a negative
      ``s`` counts from the end, ``Sn-1`` = all but the last token, then one);
    * ``U<u>`` -- runtime micro-batch sweep (``--ub-sweep``), whole prompt in one caller.

    Only the final prompt position requests logits (output capacity one).
    Recorded per input and arm: the complete endpoint, the initial FP32 logits
    (sha256; payload file when kept), the sequence KV bytes
    (``llama_state_seq_get_data``; sha256; payload file when kept), the first
    output difference from ``A`` and the equivalence classes of the arms by
    identical endpoint, identical KV and identical logits. Where two arms' KV
    bytes differ, per-layer K/V differences are tabled (``kv_diff``).

Crosses (``refspec state crosses``)
    A common receiver (a fresh context) restores a sequence KV payload and its
    positions with ``llama_state_seq_set_data``, applies the greedy sampler to
    the recipient's stored initial logits (the generated prefix is empty and
    that token is pending), then continues greedy decoding. For a donor pair
    (X, Y) of partition arms and both directions, the controls run first --
    ``EMPTY`` (own-path sham: the recipient's own state; it must reproduce the
    recipient's natural endpoint) and ``ALL`` (whole-KV cross) -- then the subset
    selectors (layer-0 K, layer-0 V, layer-0 K+V, K of every layer, V of every
    layer, early/middle/late layer groups, prefix/tail positions), spliced
    from the donor into the recipient's payload using the actual storage
    strides. Each (task, repeat) runs in its own fresh process. Outcomes are
    classified as the recipient's natural endpoint, the donor's (only when the
    two differ) or a third trajectory; the bytes an intervention actually
    changed are recorded. Frontier contrasts (S5.2): for the panels
    L0 = (EMPTY, L0_K, L0_V, L0_KV), KV = (EMPTY, K_ALL, V_ALL, ALL) and
    POSITION = (EMPTY, PREFIX, TAIL, ALL)
    the first output where the four trajectories cease to agree is located and
    the full logits there are compared: the additive prediction of the two
    single components against the actual joint effect.

Tables: ``partition``, ``kv_diff`` (partition), ``crosses``, ``frontier``
(crosses); documented in ``anc/state.md``.

Modules: :mod:`.kvstate` (sequence-state structure, payload files, validation, splicing),
:mod:`.partition` (the partition study), :mod:`.crosses` (the crosses study),
:mod:`.receiver` (the common receiver and one crosses job), :mod:`.jobs` (the job protocol:
JSON job files run in a fresh process) and :mod:`.summaries` (the text summaries). The command
line is :mod:`refspec.commands.state`.
"""
