"""Ledgerflow command line, local development environment and Python SDK."""
