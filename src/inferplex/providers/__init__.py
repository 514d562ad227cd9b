"""Provider adapters: one module per provider family, all behind the `Adapter` interface in `base`."""
