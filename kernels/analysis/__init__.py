"""The analysis of the tidy tables: paired statistics, the claims verdict, tables and figures.

Torch-free. ``registry`` ties each claim to its outputs.
"""
