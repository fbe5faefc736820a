"""Recording what agents report: ingestion, the manual flow, the API agents post to, and the
verification that replays it."""
