# kvcache/: per-session contiguous K/V storage.
