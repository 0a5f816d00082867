"""Reusable constructs: one file per AWS concept. They never read config files or context."""
