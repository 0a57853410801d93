"""Children that a `postledger run` starts (its local Prefect server, the simulator): started in
sessions of their own, tied to the parent by a lifeline. Plumbing for the shell, the simulator
and the tests, none of the ledger's business: so it is not in the core."""
