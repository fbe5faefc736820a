"""What operators read: the overview, the saga list, the saga page, exports and permalinks."""
