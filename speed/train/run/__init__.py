"""A run's files and their use: checkpoints, metrics.json and curves.png, the Predictor, speed embed/score."""
