"""Ledgerflow benchmarks (``python -m bench`` / ``make bench``): numbers printed, never asserted."""
