"""The weights: modules, the networks built from a recipe, a static memory, and a run's model."""
