"""Training (temporal GNN models and the PAC parallel trainer) lands here."""
