"""The epoch loop every run shares, and the single-process trainer."""
