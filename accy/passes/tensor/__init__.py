"""Passes of the tensor stage."""
