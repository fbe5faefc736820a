"""The pages' shared parts: template tags, times, payload rendering, error pages, the admin."""
