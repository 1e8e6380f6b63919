"""One training step and one epoch: the loader, the engine, training negatives, the optimiser, a process's setup."""
