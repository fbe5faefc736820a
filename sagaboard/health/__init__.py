"""Health and numbers: probes, the overview's rollup, tool health, charts, retention."""
