"""The status page served on the daemon's listener: reads (store), views (pure), templates."""
