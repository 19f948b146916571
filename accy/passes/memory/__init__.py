"""Passes of the memory stage."""
