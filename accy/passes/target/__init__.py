"""Passes of the target stage."""
