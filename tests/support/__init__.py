"""What the tests share, one module per concern. Fixtures live in `tests/conftest.py` and use
these; a test imports each name from the module that owns it, never from conftest.py.

- `repo`: the repository's folder.
- `ledger_backend`: the ledger the tests get (SQLite, or PostgreSQL in the suite's second
  pass), and the PostgreSQL cluster their databases are made in.
- `processes`: children in process groups of their own, the marks of a run, and their end.
- `commands`: the `postledger` command, and any other, in a process of its own.
- `databases`: fresh PostgreSQL databases, written down and dropped.
- `session`: the end of a pytest process and of the run, and the clean-up at exit.
- `prefect_api`: a pytest worker's Prefect API, what it holds, what a flow run logs.
- `prefect_server`: a real `prefect server start`, on a fresh PostgreSQL database.
- `waiting`: for a check to hold, for a call in the background.
- `simulators`: the simulator, its fault plans, quick timings.
- `openai_spec`: a proxy that checks what passes against OpenAI's OpenAPI document.
- `months`: posts files and runs of a month.
- `bad_inputs`: bad posts files and what their messages say.
- `ledgers`: ledgers read, set up or moved by hand, and the counts every ledger keeps.
- `ledger_faults`: a ledger that fails a chosen write, as a database would.
- `trip_port`, `model_upstream`, `money_model`: the trip without Prefect, a model upstream at
  the wire, and the money model's pieces.
- `browser`: a headless Chromium for the Prefect UI.
"""
