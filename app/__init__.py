"""Ledgerflow domain and persistence. Never imports Flask."""
