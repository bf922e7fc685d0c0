"""What runs use and cost: tokens counted before a call, usage and prices after it."""
