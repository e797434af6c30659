"""Attention inputs and heads: synthetic sinks, sink detection in real heads, a pretrained model.

* :mod:`.sinks`: synthetic inputs with sink keys of a chosen strength Δ;
* :mod:`.heads`: per-head analysis of real attention (sinks detected, the running-max rule);
* :mod:`.realmodel`: all-MiniLM-L6-v2's attention through the instrument;
* :mod:`.decoder`: a causal LM's Q and K after the rotary embedding, and V (grouped-query heads).

May import: the API (:func:`pcast.attention`) and every trade below it (theory, contract, formats).
"""
