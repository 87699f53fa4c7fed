"""The data path between a store and the training loop: batch plans, decode threads,
the pinned batch ring, the CUDA-stream prefetcher, and the DALI alternative."""
