"""The dashboard's HTML pages (htmx): thin views over selectors and domain services."""
