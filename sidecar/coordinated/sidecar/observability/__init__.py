"""What the node reports about itself: metrics and problems."""
