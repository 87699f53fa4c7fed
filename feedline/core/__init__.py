"""What every layer shares: the errors, the choices, the options (specs) a loader is given,
its statistics and bad-record ledger, and command-line flags made from a dataclass."""
