"""Executors: where a sweep's units run. `base` is the interface, `local` the GPU pool of this host."""
