"""Sans-IO protocol cores: no sockets, clocks, sleeps, threads or hidden randomness here.

Runtimes (`tidings.aio`, `tidings.sim`) feed inputs with `now` and apply the effects these return.
"""
