"""Passes of the kernel stage."""
