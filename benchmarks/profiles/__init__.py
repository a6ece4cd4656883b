"""The profiles and probes: scripts that say where a benchmark's time goes (host time by owner,
timestamps, one hardware switch), for a question a benchmark's number raised."""
