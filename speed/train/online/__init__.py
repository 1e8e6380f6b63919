"""Updating a trained run with new events: in one process, or spawned ranks over appended shards."""
