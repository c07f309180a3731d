"""The profile database: one SQLite file and connection holding measurements, the catalog and runs."""
