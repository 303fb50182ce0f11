"""Figures and tables of an experiment, computed from recorded run directories."""
