"""Repositories: async functions that take a session/connection and never commit."""
