"""Passes of the dispatch stage."""
