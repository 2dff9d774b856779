"""Core definitions every layer uses: errors and exit codes, hashing, atomic files, paths,
configuration, result tables, statistics, endpoints, arms and panels. Imports nothing
above it."""
