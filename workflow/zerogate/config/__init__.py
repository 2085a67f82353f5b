"""Profiles, machine descriptions and typed settings: what the user configures, checked."""
