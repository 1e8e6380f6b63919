"""Evaluation: the :class:`~speed.train.eval.evaluator.Evaluator` and what it is made of.

=================  ==========================================================
``evaluator``      streams val and test through a model by a protocol
``metrics``        AP, AUC, MRR, Hits@k, node classification
``negatives``      evaluation and training negatives
``protocols``      TGN's, DyGLib's and TGB's protocols
``edgebank``       the EdgeBank memorisation baselines
=================  ==========================================================
"""
