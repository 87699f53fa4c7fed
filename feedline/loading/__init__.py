"""What is delivered: FeedLoader, its keywords and its DataLoader-like surface."""
