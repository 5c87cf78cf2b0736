"""tidings: wide-area publish/subscribe with exactly-once delivery."""
