"""Alembic migrations of runner's schema (shipped in the wheel as `runner.migrations`)."""
