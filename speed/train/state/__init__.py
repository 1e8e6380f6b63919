"""Per-node state, apart from the weights: memories, pending events, neighbour rings, edge
features and the extra state a recipe declares, owned by :class:`~speed.train.state.nodes.NodeStates`.

=================  ==========================================================
``nodes``          :class:`NodeStates`, the owner: its structures, their sizes and a step's reads and writes
``rows``           its rows by node (:class:`RowExchange`: sync, hand-over) and :class:`StateRows`
``snapshots``      its back-ups, checkpoint entries and written snapshots (:class:`Snapshots`)
``memory``         :class:`NodeMemory`, rows of states and their update times
``store``          :class:`MessageStore`, each node's pending events
``sampler``        :class:`RecentNeighborSampler`, the neighbour rings
``components``     extra state a recipe declares (TIGE's dual memory)
``values``         TIGE's kept event values
``features``       :class:`MappedFeatures`, edge features read in place by event id
``batch_plan``     the host work of a step, planned on the state
``_kernels``       numba kernels of the rings and the store
=================  ==========================================================
"""
