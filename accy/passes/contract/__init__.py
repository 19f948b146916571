"""Passes of the contract stage."""
