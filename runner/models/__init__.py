"""Model adapters: provider APIs as ordinary model callables (their SDKs imported lazily)."""
