"""The saga list's search language: filters, sort, keyset pages, the export's reads."""
