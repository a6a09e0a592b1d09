"""The loop IR: buffers, loops, stores, allocations; immutable nodes with one printer."""
