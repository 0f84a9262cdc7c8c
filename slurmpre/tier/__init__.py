"""The node-local tier: checkpoints kept on the node, flushed to the shared folder in the
background, pulled over the network at a hand-over."""
