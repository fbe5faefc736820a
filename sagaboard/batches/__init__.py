"""Batch jobs: one action over every saga a filter selects, and what each item's action did."""
